"""Checks for the lab "Padding": the blocked matrix of a padded batch in a KV-cache step, and the
empty rows of a padded batch under a sliding window."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _causal(T: int, device) -> torch.Tensor:
    return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)


def _step(n_new: int, L: int, offset: int) -> torch.Tensor:
    """(n_new, L): True where key j > offset + i (offset = the position of new query 0)."""
    return torch.ones(n_new, L, dtype=torch.bool).triu(diagonal=offset + 1)


def check_blocked(answer, padding_mask: torch.Tensor, n_new: int | None = None) -> Feedback:
    """Exercise: True where query i must not see key j (j in its future, or key j is padding).

    With ``n_new``, the queries are the last ``n_new`` of the ``L`` positions (a KV-cache step:
    the cached tokens first, then the new ones), so new query i sits at position
    L - n_new + i; without it (an older edition), every position is a query.

    Args:
        answer: the learner's blocked matrix.
        padding_mask: True = real token, for every key (cached and new).
        n_new: how many new queries; None = all L.

    Shape:
        padding_mask: (B, L); answer: (B, n_new, L)
    """
    padding_mask = padding_mask.detach().cpu().bool()
    B, L = padding_mask.shape
    n = L if n_new is None else n_new
    start = L - n  # the position of the first new query
    causal = _step(n, L, start)  # (n, L)
    pad_keys = ~padding_mask[:, None, :]  # (B, 1, L): a padded key blocks its whole column
    pad_queries = ~padding_mask[:, start:, None]  # (B, n, 1): the new queries' own padding
    expected = causal | pad_keys  # (B, n, L)
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
            pad_keys.expand(B, n, L),
        "the causal mask alone: the padding keys are missing":
            causal.expand(B, n, L),
        "you combined with & (and) instead of | (or): a key is blocked if it is in the "
        "future OR is padding":
            causal & pad_keys,
        "the allowed positions (True = may attend), not the blocked ones: invert it":
            ~(causal | pad_keys),
    }
    if n != L:
        mistakes.update({
            "the causal part of the top-left corner (triu with diagonal=1): new query i is the "
            "token at position L - n_new + i, after the cached ones, so it sees keys 0 .. "
            "L - n_new + i. Shift the diagonal by L - n_new":
                _step(n, L, 0) | pad_keys,
            "the whole square (B, L, L) matrix: the cached tokens' queries were answered "
            "already; keep only the rows of the n_new new queries (the last ones)":
                _causal(L, "cpu") | pad_keys,
            "a square (B, n_new, n_new) matrix over the new keys alone: the new queries also "
            "see every cached key, so the matrix has L columns":
                _causal(n, "cpu") | ~padding_mask[:, None, start:],
            "a causal part one too low (diagonal = L - n_new): that blocks each new token from "
            "its own key. Add 1":
                _step(n, L, start - 1) | pad_keys,
        })
    feedback = check_tensor(answer, expected, mistakes, name="your blocked matrix", atol=0, rtol=0)
    if feedback.ok and torch.as_tensor(answer).dtype != torch.bool:
        return Feedback(False, "Not yet: the pattern is right, but a mask must be bool; "
                               "combine bool tensors with | and ~.")
    return feedback


def empty_rows(padding_mask: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """True for each query that sees no real key under the causal (or sliding-window, ``window``
    keys: itself and the window - 1 before it) and padding masks.

    Shape:
        (B, T) -> (B, T)
    """
    T = padding_mask.size(-1)
    gap = torch.arange(T, device=padding_mask.device)
    gap = gap[:, None] - gap[None, :]  # (T, T): i - j
    outside = (gap < 0) if window is None else (gap < 0) | (gap >= window)
    blocked = outside | ~padding_mask[:, None, :]  # (B, T, T)
    return blocked.all(dim=-1)  # (B, T)


def check_empty_rows(answer, padding_mask: torch.Tensor, window: int | None = None
                     ) -> Feedback:
    """Exercise: which queries have a row with no visible key (where the original module gives
    NaN), under the causal mask or, with ``window``, a sliding window of ``window`` keys.

    Shape:
        padding_mask: (B, T); answer: (B, T) bool, True = empty row
    """
    padding_mask = padding_mask.detach().cpu().bool()
    expected = empty_rows(padding_mask, window)
    B, T = padding_mask.shape
    mistakes = {}
    if window is not None:
        pad = (~padding_mask).long()
        mistakes.update({
            "the empty rows of the causal mask alone (no real key at or before i): with a "
            "window, a query whose last window keys are all padding is empty too, even after "
            "real tokens":
                empty_rows(padding_mask),
            "a window one key too wide (w + 1 keys): query i sees itself and the w - 1 keys "
            "before it, w keys in all":
                empty_rows(padding_mask, window + 1),
        })
    mistakes.update({
        "every padded position: a padded query still sees the real tokens in its window, "
        "so its row is not empty. Only a query with no real key among the keys it may see "
        "is empty":
            ~padding_mask,
        "the real tokens: those are the rows that do have a visible key (at least themselves)":
            padding_mask,
        "no empty row at all: under left padding the first queries see only padding"
        + ("; with a window, so do padded queries far enough after the last real token"
           if window is not None else ""):
            torch.zeros(B, T, dtype=torch.bool),
        "every row of each sequence that has padding: a real query always sees itself":
            (~padding_mask).any(dim=-1, keepdim=True).expand(B, T),
    })
    if window is not None and window > 1:
        mistakes["a window one key too narrow (w - 1 keys): query i sees itself and the "
                 "w - 1 keys before it, w keys in all"] = empty_rows(padding_mask, window - 1)
    if window is not None:
        mistakes.update({
            "the blocked matrix itself, (B, T, T): reduce each query's row with .all(dim=-1)":
                ((torch.arange(T)[:, None] - torch.arange(T) < 0)
                 | (torch.arange(T)[:, None] - torch.arange(T) >= window)
                 | ~padding_mask[:, None, :]),
            "the rows with some padding in their window: a row is empty only when every key in "
            "its window is blocked (all, not any)":
                torch.stack([(pad[:, max(0, i - window + 1):i + 1] > 0).any(dim=-1)
                             for i in range(T)], dim=-1) if T else expected,
        })
    return check_tensor(answer, expected, mistakes, name="your empty-row prediction",
                        atol=0, rtol=0)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _mask(lengths: list[int], L: int, sides: str) -> torch.Tensor:
    """(B, L) True = real: sequence b has lengths[b] real tokens, padded on sides[b] ('l'/'r')."""
    pos = torch.arange(L)
    rows = [(pos >= L - n) if side == "l" else (pos < n) for n, side in zip(lengths, sides)]
    return torch.stack(rows)


def _random_mask(g: torch.Generator, B: int, L: int) -> torch.Tensor:
    """(B, L) True = real: random lengths 1 .. L, each sequence padded left or right."""
    lengths = (1 + torch.randint(L, (B,), generator=g)).tolist()
    sides = "".join("lr"[int(v)] for v in torch.randint(2, (B,), generator=g))
    return _mask(lengths, L, sides)


def _blocked_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # (lengths, L, sides, n_new): one token; a decode step; a whole prefill (square); a chunk
    # of a left-padded batch; a right-padded one; a far larger batch with random lengths.
    for lengths, L, sides, n in (([1], 1, "l", 1), ([7, 3], 7, "ll", 1), ([4, 2, 6], 6, "lrl", 6),
                                 ([9, 5, 2], 9, "lll", 4), ([3, 8], 8, "rr", 3)):
        m = _mask(lengths, L, sides)
        cases.append(HiddenCase((m.clone(), n), (m, n), f"padding_mask of shape {tuple(m.shape)}, "
                                                        f"n_new = {n}"))
    L = 12
    m = _random_mask(g, 5, L)
    cases.append(HiddenCase((m.clone(), 5), (m, 5), f"padding_mask of shape (5, {L}), n_new = 5"))
    return cases


def _empty_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # (lengths, T, sides, w): one token; w = 1 (every padded query empty); a window as wide as
    # T (the causal mask alone); right padding (empty rows after the last real token); both.
    for lengths, T, sides, w in (([1], 1, "r", 1), ([2, 4], 5, "rl", 1), ([3, 1, 6], 6, "lrr", 6),
                                 ([2, 5, 7], 9, "rrr", 3), ([4, 2], 7, "lr", 2)):
        m = _mask(lengths, T, sides)
        cases.append(HiddenCase((m.clone(), w), (m, w), f"padding_mask of shape {tuple(m.shape)}, "
                                                        f"w = {w}"))
    T = 11
    m = _random_mask(g, 4, T)
    w = 1 + int(torch.randint(5, (1,), generator=g))
    cases.append(HiddenCase((m.clone(), w), (m, w), f"padding_mask of shape (4, {T}), w = {w}"))
    return cases


GRADED = {
    # The library builds both from its masks: the exercises ask for the offset, the key columns
    # and the window themselves.
    "check_blocked": FunctionExercise(
        "step_blocked", check_blocked, _blocked_cases,
        forbidden=("blocked_positions", "causal_mask", "mask")),
    "check_empty_rows": FunctionExercise(
        "window_empty_rows", check_empty_rows, _empty_cases,
        forbidden=("empty_rows", "blocked_positions", "window_mask")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
