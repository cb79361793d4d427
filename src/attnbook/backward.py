"""The whole module's backward pass, derived by hand (chapter 8) and checkable against autograd.

Autograd computes these gradients for ``attnbook.Attention`` by itself; this file writes them
out so that the derivation in chapter 8 is code that a test can hold to autograd and to finite
differences (``torch.autograd.gradcheck``). It covers the book's module as Part II built it: one
head, three bias-free projections, the causal mask and key padding, no position scheme.
"""

from __future__ import annotations

import math

import torch

from .checks import check_input, check_padding_mask
from .masks import blocked_positions
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax
from .weighted_sum import weighted_sum


def whole_forward(x, wq, wk, wv, causal, padding_mask=None):
    """Steps 1 to 6 with the tensors the backward needs.

    Args:
        x: token vectors.
        wq, wk, wv: the three ``nn.Linear`` weights, in their (out, in) layout: Q = x @ wq.T.
        causal: the causal mask sliced to T, True = blocked.
        padding_mask: True for real tokens; None if all are real.

    Returns:
        The output y and the saved tensors (q, k, v, a).

    Shape:
        x: (B, T, d); wq, wk, wv: (d, d); causal: (T, T); padding_mask: (B, T)
        -> y (B, T, d); q, k, v (B, T, d); a (B, T, T)
    """
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T  # (B, T, d) each: step 1
    # The module's own steps 2 to 6 (attention.py's attend, explicit path), so the forward
    # differentiated here is the one the module runs.
    s = scale_scores(attention_scores(q, k), q.size(-1))  # (B, T, T): steps 2 and 3
    a = masked_softmax(s, blocked_positions(causal, padding_mask))  # (B, T, T): steps 4, 5
    return weighted_sum(a, v), (q, k, v, a)  # (B, T, d): step 6


def whole_backward(g, x, wq, wk, wv, saved):
    """The gradients of a loss L, given g = dL/dy, by the chain rule of chapter 8.

    Returns:
        dx and the gradients of wq, wk, wv in the weights' own (out, in) layout, summed over
        the batch (what autograd leaves in ``.weight.grad``).

    Shape:
        g, x: (B, T, d); wq, wk, wv: (d, d) -> dx (B, T, d); dwq, dwk, dwv (d, d)
    """
    q, k, v, a = saved
    dv = a.transpose(-2, -1) @ g  # (B, T, d): Y = A V, so dV = Aᵀ G
    da = g @ v.transpose(-2, -1)  # (B, T, T): and dA = G Vᵀ
    # Softmax backward, row by row (chapter 6): zero where a = 0, blocked or empty row.
    ds = a * (da - (a * da).sum(dim=-1, keepdim=True))  # (B, T, T)
    scale = 1.0 / math.sqrt(q.size(-1))
    dq = ds @ k * scale  # (B, T, d): S = Q Kᵀ / sqrt(d)
    dk = ds.transpose(-2, -1) @ q * scale  # (B, T, d)
    dx = dq @ wq + dk @ wk + dv @ wv  # (B, T, d): x feeds all three projections
    # Q = x wqᵀ, so dwq = dQᵀ x, summed over the batch; likewise for K and V.
    dwq, dwk, dwv = (torch.einsum("bti,btj->ij", dt, x) for dt in (dq, dk, dv))
    return dx, dwq, dwk, dwv


class WholeByHand(torch.autograd.Function):
    """The module's forward with :func:`whole_backward` as its backward, for ``gradcheck``."""

    @staticmethod
    def forward(ctx, x, wq, wk, wv, causal, padding_mask):
        y, saved = whole_forward(x, wq, wk, wv, causal, padding_mask)
        ctx.save_for_backward(x, wq, wk, wv, *saved)
        return y

    @staticmethod
    def backward(ctx, g):
        x, wq, wk, wv, *saved = ctx.saved_tensors
        return (*whole_backward(g, x, wq, wk, wv, saved), None, None)


def attention_by_hand(m, x: torch.Tensor, padding_mask: torch.Tensor | None = None):
    """``m(x, padding_mask)`` for an ``attnbook.Attention`` m, differentiated by hand.

    Shape:
        x: (B, T, d_model); padding_mask: (B, T) -> (B, T, d_model)
    """
    position, n_heads = getattr(m, "position", "none"), getattr(m, "n_heads", 1)
    if position != "none" or n_heads != 1:
        raise ValueError("the hand-derived backward covers one head without a position scheme "
                         f"(got position={position!r}, n_heads={n_heads})")
    # The module's own input checks: a wrong width, length or dtype gets its clear error here
    # too, not a shape error from inside the backward.
    B, T, _ = check_input(x, m.d_model, m.context_length, m.query.weight.dtype)
    if padding_mask is not None:
        check_padding_mask(padding_mask, B, T)
    return WholeByHand.apply(x, m.query.weight, m.key.weight, m.value.weight,
                             m.mask[:T, :T], padding_mask)
