"""Step 5: softmax over each row of scores, stable for huge scores and safe for empty rows."""

from __future__ import annotations

import torch

from .checks import check_blocked_shape

# Half-precision exponentials and sums lose too many digits; do the softmax in float32.
_UPCAST = (torch.float16, torch.bfloat16)


def stable_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax computed as exp(s - max s) / sum exp(s - max s), which cannot overflow.

    Args:
        scores: any real scores; ``-inf`` entries get probability 0.
        dim: the dimension that sums to one.

    Returns:
        Probabilities along ``dim``. A slice that is all ``-inf`` gives NaN, as in
        ``torch.softmax``; :func:`masked_softmax` is the version that handles it.

    Shape:
        any -> same
    """
    shifted = scores - scores.amax(dim=dim, keepdim=True)  # largest entry becomes 0
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)


def masked_softmax(scores: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax over the keys that are not blocked.

    Policy for a row with no visible key (a query that sees only padding): its weights are
    all zero, so its output is the zero vector, and its gradients are zero too, never NaN.
    ``torch.softmax`` would return NaN for such a row (0 / 0).

    Args:
        scores: scaled scores.
        blocked: True where query i must not see key j; broadcast against ``scores``.

    Returns:
        Attention weights: each row sums to 1 over its visible keys, or is all 0 if none is
        visible. Same dtype as ``scores``; float16/bfloat16 are computed in float32.

    Shape:
        scores: (B, T, T); blocked: (T, T) or (B, T, T) -> (B, T, T). More leading
        dimensions work alike (:func:`attnbook.checks.check_blocked_shape`).
    """
    check_blocked_shape(scores, blocked)  # a mask that would broadcast the wrong way: refused
    if scores.size(-1) == 0:  # no keys at all: every row is empty, and empty rows are 0
        return torch.zeros_like(scores)
    out_dtype = scores.dtype
    if out_dtype in _UPCAST:
        scores = scores.float()
    scores = scores.masked_fill(blocked, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)  # (B, T, 1); -inf for an empty row
    # An empty row has max -inf and -inf - (-inf) = NaN; shift it by 0 instead.
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0).detach()
    e = (scores - row_max).exp()  # (B, T, T); exactly 0 where blocked
    total = e.sum(dim=-1, keepdim=True)  # (B, T, 1); 0 only for an empty row
    # Dividing an empty row by 1 instead of 0 keeps its weights (and gradients) at 0.
    weights = e / total.masked_fill(total == 0, 1.0)
    return weights.to(out_dtype)


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """Jacobian of softmax at output ``p``: J = diag(p) - p pᵀ, so J[i, j] = ∂p_i / ∂s_j.

    Args:
        p: softmax outputs (probabilities) along the last dimension.

    Returns:
        One (n, n) Jacobian per probability vector. It is symmetric, its rows sum to 0
        (adding a constant to every score changes nothing), and it vanishes as p becomes one-hot.

    Shape:
        (..., n) -> (..., n, n)
    """
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., n, n)


def temperature_softmax(scores: torch.Tensor, temperature: float, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores / temperature``: sharper below 1, flatter above 1.

    As the temperature goes to 0 the result tends to a one-hot vector on the largest score
    (shared evenly among ties); as it goes to infinity, to the uniform distribution.

    Args:
        scores: any real scores; ``-inf`` entries get probability 0.
        temperature: a positive number; 1 gives the plain softmax.
        dim: the dimension that sums to one.

    Returns:
        Probabilities along ``dim``, same dtype as ``scores`` (float16/bfloat16 are computed
        in float32). A slice that is all ``-inf`` gives NaN, as in :func:`stable_softmax`.

    Raises:
        ValueError: if ``temperature`` is not positive.

    Shape:
        any -> same
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    out_dtype = scores.dtype
    if out_dtype in _UPCAST:
        scores = scores.float()
    # Shift before dividing: s / tau itself overflows for a small tau (70 / 1e-3 > float16's
    # 65504, 1e36 / 1e-3 > float32's 3.4e38), while (s - max s) / tau is <= 0 and at worst -inf.
    shifted = scores - scores.amax(dim=dim, keepdim=True)  # largest entry becomes 0
    e = (shifted / temperature).exp()
    return (e / e.sum(dim=dim, keepdim=True)).to(out_dtype)
