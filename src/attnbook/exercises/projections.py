"""Checks for the lab "Tokens as vectors: queries, keys and values" (step 1, the projections)."""

from __future__ import annotations

import torch
from torch import nn

from . import Feedback, check_tensor


def check_query_matrix(answer, attn: nn.Module) -> Feedback:
    """Exercise: the book's W_q (so that Q = X W_q) read off ``attn.query``: its weight, transposed.

    Args:
        answer: the learner's matrix.
        attn: a module with ``query``, ``key`` and ``value`` layers; each ``nn.Linear`` stores
            its ``weight`` as (out, in) and computes ``x @ weight.T``.

    Shape:
        attn.query.weight: (d, d); answer: (d, d)
    """
    wq = attn.query.weight.detach()
    mistakes = {
        "the weight as stored, (out, in): nn.Linear computes x @ weight.T, so the book's "
        "W_q is weight.T": wq,
        "the key's matrix: W_q comes from attn.query": attn.key.weight.detach().T,
        "the key's weight as stored: use attn.query.weight, transposed": attn.key.weight.detach(),
    }
    return check_tensor(answer, wq.T, mistakes, name="W_q")


def check_queries(answer, x: torch.Tensor, attn: nn.Module) -> Feedback:
    """Exercise: the queries Q = X W_q from the token vectors and ``attn.query.weight``.

    Args:
        answer: the learner's queries.
        x: token vectors.
        attn: a module with ``query``, ``key`` and ``value`` layers (``attnbook.Attention``).

    Shape:
        x: (T, d) or (B, T, d); answer: same as x
    """
    wq = attn.query.weight.detach()
    wk = attn.key.weight.detach()
    wv = attn.value.weight.detach()
    q = x @ wq.T  # (..., T, d)
    mistakes = {
        "you used the weight as stored (out, in); nn.Linear multiplies by its transpose, "
        "x @ weight.T": x @ wq,
        "the keys: you used the key matrix (attn.key) for the query": x @ wk.T,
        "the values: you used the value matrix (attn.value) for the query": x @ wv.T,
        "the keys computed with the stored weight: use attn.query.weight, transposed": x @ wk,
        "the token vectors themselves: the query is x times W_q, not x": x,
        "Q transposed (one column per token, weight @ x.T): the book keeps one row per token":
            q.transpose(-2, -1),
    }
    return check_tensor(answer, q, mistakes, name="Q")


def check_parameter_count(answer, d_model: int, context_length: int) -> Feedback:
    """Exercise: the number of learned parameters of ``Attention(d_model, context_length)``.

    Three bias-free d x d matrices: 3 d^2. The causal mask is a buffer, not a parameter.
    """
    d, L = d_model, context_length
    expected = torch.tensor(3 * d * d)
    mistakes = {
        "three matrices plus a bias each (3d^2 + 3d): the projections are built with bias=False":
            torch.tensor(3 * d * d + 3 * d),
        "you counted the causal mask (context_length^2 entries): it is a buffer, not a parameter,"
        " and is never trained": torch.tensor(3 * d * d + L * L),
        "the count of one matrix (d^2): there are three, query, key and value":
            torch.tensor(d * d),
        "four matrices (4d^2): this module has no output projection W_o":
            torch.tensor(4 * d * d),
        "3d, three times d: each matrix is d x d, so it holds d^2 numbers, not d":
            torch.tensor(3 * d),
    }
    return check_tensor(answer, expected, mistakes, name="the parameter count", atol=0.5, rtol=0)
