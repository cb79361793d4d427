"""Checks for the lab "Scores" (step 2: every query against every key)."""

from __future__ import annotations

import math

import torch

from . import Feedback, check_tensor


def _t(a: torch.Tensor) -> torch.Tensor:
    """Swap the last two dimensions (works batched, unlike ``.T`` on a 3-D tensor)."""
    return a.transpose(-2, -1)


def check_scores(answer, q: torch.Tensor, k: torch.Tensor) -> Feedback:
    """Exercise: the raw scores S = Q Kᵀ, with ``S[..., i, j] = q_i · k_j``.

    Args:
        answer: the learner's scores.
        q: queries, one row per token.
        k: keys, one row per token.

    Shape:
        q, k: (T, d) or (B, T, d); answer: (T, T) or (B, T, T)
    """
    q, k = q.detach(), k.detach()
    s = q @ _t(k)  # (..., T, T)
    d = q.size(-1)
    mistakes = {
        "K Qᵀ: your scores are transposed; row i must hold query i against every key, "
        "scores[i, j] = q_i · k_j": _t(s),
        "scores already divided by sqrt(d): scaling is step 3; here we want the raw dot "
        "products": s / math.sqrt(d),
        "scores divided by d: scaling is step 3 (and uses sqrt(d)); here we want the raw dot "
        "products": s / d,
        "the elementwise product q * k, shape (T, d): a dot product multiplies and then sums "
        "over d, and every query must meet every key; use a matrix product, q @ k.T": q * k,
        "the diagonal alone, (q * k).sum(-1): only q_i · k_i, each query against its own key; "
        "the scores pair every query with every key": (q * k).sum(-1),
        "Qᵀ K, shape (d, d): the transpose belongs on K, Q @ Kᵀ, giving (T, T)": _t(q) @ k,
        "Q Qᵀ: the queries against themselves; the second factor is the keys": q @ _t(q),
        "K Kᵀ: the keys against themselves; the first factor is the queries": k @ _t(k),
    }
    if q.size(-1) == k.size(-2):  # only then does q @ k run at all
        mistakes["q @ k: you forgot to transpose the keys; use q @ k.transpose(-2, -1)"] = q @ k
    return check_tensor(answer, s, mistakes, name="scores")


def check_score_row(answer, q: torch.Tensor, k: torch.Tensor, i: int) -> Feedback:
    """Exercise: row ``i`` of the scores, query ``i`` against every key, as one product.

    Shape:
        q, k: (T, d); answer: (T,)
    """
    q, k = q.detach(), k.detach()
    mistakes = {
        "column i of the scores (every query against key i): row i is query i against every "
        "key, k @ q[i]": q @ k[i],
        "the elementwise product q[i] * k, shape (T, d): sum over d to get one number per key":
            q[i] * k,
        "query i against the other queries (q @ q[i]): compare it with the keys": q @ q[i],
        "row i already divided by sqrt(d): scaling is step 3": (k @ q[i]) / math.sqrt(q.size(-1)),
    }
    return check_tensor(answer, k @ q[i], mistakes, name=f"row {i} of the scores")


def check_cosines(answer, q: torch.Tensor, k: torch.Tensor) -> Feedback:
    """Exercise: cos θ between every query and every key, ``s_ij / (|q_i| |k_j|)``.

    Shape:
        q, k: (T, d); answer: (T, T)
    """
    q, k = q.detach(), k.detach()
    s = q @ _t(k)  # (T, T)
    nq = q.norm(dim=-1, keepdim=True)  # (T, 1): |q_i| for row i
    nk = k.norm(dim=-1, keepdim=True)  # (T, 1): |k_j|, needed along columns
    mistakes = {
        "the raw scores: divide each s_ij by |q_i| |k_j|": s,
        "scores divided by |q_i| only: each column j also needs a division by |k_j|": s / nq,
        "scores divided by |k_j| only: each row i also needs a division by |q_i|": s / _t(nk),
        "the query norms used along columns and the key norms along rows (s / (|k_i| |q_j|)):"
        " row i divides by |q_i|, column j by |k_j|": s / (nk * _t(nq)),
        "scores divided by the norms of the whole matrices |Q| |K|: divide by the norm of each "
        "vector": s / (q.norm() * k.norm()),
        "cosines transposed: row i must be query i": _t(s / (nq * _t(nk))),
    }
    return check_tensor(answer, s / (nq * _t(nk)), mistakes, name="cosines")
