"""Steps 2 and 3: dot-product scores between queries and keys, and their scaling by sqrt(d)."""

from __future__ import annotations

import math

import torch

# A half-precision score keeps 8 (bfloat16) or 11 (float16) bits: at |q·k| ~ 4, bfloat16 rounds
# it by up to 0.016, more than the rest of the computation loses. Form such scores in float32.
_UPCAST = (torch.float16, torch.bfloat16)


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Dot product of every query with every key.

    Args:
        q: queries, one row per token.
        k: keys, one row per token.

    Returns:
        ``scores`` with ``scores[..., i, j] = q[..., i, :] · k[..., j, :]``: how well
        query ``i`` matches key ``j``. Float16 and bfloat16 inputs give float32 scores
        (rounding each score to half precision would cost more accuracy than the rest of
        attention); other dtypes are kept.

    Shape:
        q: (B, T, d), k: (B, T, d) -> (B, T, T). Any leading dimensions work, e.g. (B, h, T, d_h).
    """
    if q.dtype in _UPCAST:
        q, k = q.float(), k.float()
    return q @ k.transpose(-2, -1)  # (B, T, d) @ (B, d, T) -> (B, T, T)


def scale_scores(scores: torch.Tensor, d: int) -> torch.Tensor:
    """Divide scores by sqrt(d), where ``d`` is the width of the queries and keys.

    Args:
        scores: raw dot products ``q · k``.
        d: width of q and k (``d_model`` for one head, ``d_h`` per head with many).

    Returns:
        Scores with variance about 1 when q and k have independent unit-variance entries.

    Shape:
        (..., T, T) -> (..., T, T)
    """
    return scores / math.sqrt(d)
