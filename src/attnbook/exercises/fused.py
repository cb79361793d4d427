"""Checks for the lab "The fused kernel"."""

from __future__ import annotations

import torch

from ..fused import empty_rows, sdpa_mask
from ..masks import causal_mask
from . import Feedback, check_tensor


def check_sdpa_mask(answer, padding_mask: torch.Tensor) -> Feedback:
    """Exercise: SDPA's bool attn_mask (True = may attend) from causal + padding.

    Shape:
        padding_mask: (B, T) -> answer: (B, T, T) or (B, 1, T, T)
    """
    B, T = padding_mask.shape
    right = sdpa_mask(padding_mask, T)[:, 0]  # (B, T, T)
    if isinstance(answer, torch.Tensor) and answer.dim() == 4 and answer.size(1) == 1:
        answer = answer[:, 0]
    causal = causal_mask(T)  # True = blocked
    real_k = padding_mask[:, None, :]  # (B, 1, T)
    mistakes = {
        "our convention (True = blocked); SDPA wants True = may attend": ~right,
        "padding applied to queries (rows) instead of keys (columns)":
            ~causal & padding_mask[:, :, None],
        "the causal part only: padded keys are still visible": (~causal).expand(B, T, T),
        "the padding part only: future keys are visible": real_k.expand(B, T, T),
        "the causal mask upside down (j < i allowed, j > i visible)":
            ~causal.T & real_k,
    }
    return check_tensor(_as_float(answer), right.double(),
                        {k: v.double() for k, v in mistakes.items()}, name="the mask")


def check_empty_rows(answer, padding_mask: torch.Tensor) -> Feedback:
    """Exercise: which queries see no real key at or before them.

    Shape:
        padding_mask: (B, T) -> answer: (B, T) bool
    """
    right = empty_rows(padding_mask)
    mistakes = {
        "the padded queries: a padded query after a real token still sees that token":
            ~padding_mask,
        "the real tokens (True = real), not the empty rows": padding_mask,
        "the opposite: True where a query does see a real key": ~right,
        "no empty row: with left padding the first queries see only padding":
            torch.zeros_like(right),
    }
    return check_tensor(_as_float(answer), right.double(),
                        {k: v.double() for k, v in mistakes.items()}, name="the empty rows")


def _as_float(answer):
    if isinstance(answer, torch.Tensor) and answer.dtype == torch.bool:
        return answer.double()
    return answer
