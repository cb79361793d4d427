"""Step 6: each output is a weighted average of the value vectors."""

from __future__ import annotations

import torch


def weighted_sum(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Mix the values with the attention weights.

    Args:
        weights: attention weights, each row summing to 1 (or all 0 for an empty row).
        v: values, one row per token.

    Returns:
        ``out[..., i, :] = sum_j weights[..., i, j] * v[..., j, :]``: a convex combination
        of the visible values, or the zero vector for an all-zero row of weights.

    Shape:
        weights: (B, T, T), v: (B, T, d) -> (B, T, d); more leading dimensions work alike
    """
    return weights @ v  # (B, T, T) @ (B, T, d) -> (B, T, d)
