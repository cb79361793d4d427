"""Checks for the lab "Padding": the blocked matrix of a padded batch, and its empty rows."""

from __future__ import annotations

import torch

from . import Feedback, check_tensor


def _causal(T: int, device) -> torch.Tensor:
    return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)


def check_blocked(answer, padding_mask: torch.Tensor) -> Feedback:
    """Exercise: True where query i must not see key j (j > i, or key j is padding).

    Args:
        answer: the learner's blocked matrix.
        padding_mask: True = real token.

    Shape:
        padding_mask: (B, T); answer: (B, T, T)
    """
    B, T = padding_mask.shape
    causal = _causal(T, padding_mask.device)  # (T, T)
    pad_keys = ~padding_mask[:, None, :]  # (B, 1, T): a padded key blocks its whole column
    pad_queries = ~padding_mask[:, :, None]  # (B, T, 1)
    expected = causal | pad_keys  # (B, T, T)
    mistakes = {
        "you masked queries (rows) instead of keys (columns): padding_mask[:, :, None] "
        "blocks what a padded token sees, not who sees the padded token. "
        "Use padding_mask[:, None, :]":
            causal | pad_queries,
        "you used the padding mask without inverting it (True = real): that blocks the real "
        "keys and keeps the padding. Block ~padding_mask":
            causal | padding_mask[:, None, :],
        "you masked both rows and columns: the padded queries' rows become empty, "
        "and their softmax is NaN. Mask the key columns only":
            causal | pad_keys | pad_queries,
        "the padding alone: the causal mask is missing (add | causal)":
            pad_keys.expand(B, T, T),
        "the causal mask alone: the padding keys are missing":
            causal.expand(B, T, T),
        "you combined with & (and) instead of | (or): a key is blocked if it is in the "
        "future OR is padding":
            causal & pad_keys,
        "the allowed positions (True = may attend), not the blocked ones: invert it":
            ~(causal | pad_keys),
    }
    feedback = check_tensor(answer, expected, mistakes, name="your blocked matrix", atol=0, rtol=0)
    if feedback.ok and torch.as_tensor(answer).dtype != torch.bool:
        return Feedback(False, "Not yet: the pattern is right, but a mask must be bool; "
                               "combine bool tensors with | and ~.")
    return feedback


def empty_rows(padding_mask: torch.Tensor) -> torch.Tensor:
    """True for each query that sees no real key under the causal and padding masks.

    Shape:
        (B, T) -> (B, T)
    """
    T = padding_mask.size(-1)
    blocked = _causal(T, padding_mask.device) | ~padding_mask[:, None, :]  # (B, T, T)
    return blocked.all(dim=-1)  # (B, T)


def check_empty_rows(answer, padding_mask: torch.Tensor) -> Feedback:
    """Exercise: predict which queries have a row with no visible key (where the seed gives NaN).

    Shape:
        padding_mask: (B, T); answer: (B, T) bool, True = empty row
    """
    expected = empty_rows(padding_mask)
    B, T = padding_mask.shape
    mistakes = {
        "every padded position: a right-padded query still sees the real tokens before it, "
        "so its row is not empty. Only a query with no real key at or before it is empty":
            ~padding_mask,
        "the real tokens: those are the rows that do have a visible key (at least themselves)":
            padding_mask,
        "no empty row at all: under left padding the first queries see only padding":
            torch.zeros(B, T, dtype=torch.bool),
        "every row of each sequence that has padding: a real query always sees itself":
            (~padding_mask).any(dim=-1, keepdim=True).expand(B, T),
    }
    return check_tensor(answer, expected, mistakes, name="your empty-row prediction",
                        atol=0, rtol=0)
