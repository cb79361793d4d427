"""Checks for the lab "The fused kernel": a sliding-window mask for SDPA, with padding, and the
rows it leaves empty."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _behind(T: int) -> torch.Tensor:
    """(T, T): i - j, how far key j is behind query i."""
    pos = torch.arange(T)
    return pos[:, None] - pos[None, :]


def check_sdpa_mask(answer, padding_mask: torch.Tensor, window: int | None = None) -> Feedback:
    """Exercise: SDPA's bool attn_mask (True = may attend) of sliding-window causal attention
    with padding: query i may attend to key j when i - window < j <= i and key j is real.

    Args:
        answer: the learner's mask; a head axis of size 1 and anything that broadcasts to
            (B, T, T) is accepted, as SDPA would accept it.
        padding_mask: (B, T), True = real token.
        window: keys each query sees, itself included; None: every earlier key (plain causal).

    Shape:
        padding_mask: (B, T) -> answer: (B, T, T) or (B, 1, T, T)
    """
    pad = padding_mask.detach().cpu()
    B, T = pad.shape
    w = T if window is None else window
    gap = _behind(T)
    band = (gap >= 0) & (gap < w)  # (T, T): the window, causal
    real_k = pad[:, None, :]  # (B, 1, T)
    right = band & real_k  # (B, T, T)
    mistakes = {
        "our convention (True = blocked); SDPA wants True = may attend": ~right,
        "padding applied to queries (rows) instead of keys (columns)": band & pad[:, :, None],
        "the window part only: padded keys are still visible": band.expand(B, T, T),
        "the padding part only: future keys are visible": real_k.expand(B, T, T),
        "the causal mask upside down (j >= i allowed: each query sees the keys after it)":
            band.T & real_k,
    }
    if w < T:
        mistakes.update({
            "the causal and padding mask without the window: also block the keys w or more "
            "positions back (i - j >= w)": (gap >= 0) & real_k,
            "a window one key too wide (i - j <= w allowed): query i sees w keys, itself and "
            "the w - 1 before it": (gap >= 0) & (gap <= w) & real_k,
            "a band without the causal part (|i - j| < w allowed): the future is still "
            "visible; block j > i too": (gap.abs() < w) & real_k,
        })
    if w > 1:
        mistakes["a window one key too narrow (i - j < w - 1 allowed): query i sees itself "
                 "and the w - 1 keys before it, w keys in all"] = (
            (gap >= 0) & (gap < w - 1) & real_k)
    if isinstance(answer, torch.Tensor):
        answer = answer.detach().cpu()
        if answer.dim() == 4 and answer.size(1) == 1:  # (B, 1, T, T): one head axis
            answer = answer[:, 0]
        if answer.shape != (B, T, T):
            try:
                answer = answer.expand(B, T, T)
            except RuntimeError:
                pass
    fb = check_tensor(_as_float(answer), right.double(),
                      {k: v.double() for k, v in mistakes.items()}, name="the mask")
    if fb.ok and isinstance(answer, torch.Tensor) and answer.dtype != torch.bool:
        return Feedback(False, f"Not yet: the mask has the right pattern but dtype "
                               f"{answer.dtype}. SDPA adds a float mask to the scores (0 keeps, "
                               "-inf blocks), so 1.0 and 0.0 would block nothing, and refuses "
                               "an integer one: make it bool (.bool()).")
    return fb


def _window_empty(pad: torch.Tensor, w: int) -> torch.Tensor:
    """(B, T): True where no key i - w < j <= i is real (written out, not with the library)."""
    gap = _behind(pad.size(-1))
    band = (gap >= 0) & (gap < w)
    return ~(band & pad[:, None, :]).any(dim=-1)


def check_empty_rows(answer, padding_mask: torch.Tensor, window: int | None = None) -> Feedback:
    """Exercise: which queries see no real key in their window (keys i - window + 1 .. i).

    Args:
        answer: the learner's (B, T) bool tensor, True = an empty row.
        padding_mask: (B, T), True = real token.
        window: keys each query sees, itself included; None: every earlier key (plain causal).

    Shape:
        padding_mask: (B, T) -> answer: (B, T) bool
    """
    pad = padding_mask.detach().cpu()
    T = pad.size(-1)
    w = T if window is None else window
    right = _window_empty(pad, w)
    mistakes = {
        "the padded queries: a padded query still sees the real keys in its window":
            ~pad,
        "the real tokens (True = real), not the empty rows": pad,
        "the opposite: True where a query does see a real key": ~right,
        "no empty row: with left padding the first queries see only padding":
            torch.zeros_like(right),
    }
    if w < T:
        mistakes.update({
            "the empty rows without the window (no real key at or before i): a query also "
            "loses the real keys w or more positions back, so a run of w padded tokens "
            "empties a row even after real ones": _window_empty(pad, T),
            "a window one key too wide (keys i - w .. i): query i sees w keys, itself and the "
            "w - 1 before it": _window_empty(pad, w + 1),
        })
    if w > 1:
        mistakes["a window one key too narrow (keys i - w + 2 .. i): query i sees w keys, "
                 "itself and the w - 1 before it"] = _window_empty(pad, w - 1)
    fb = check_tensor(_as_float(answer), right.double(),
                      {k: v.double() for k, v in mistakes.items()}, name="the empty rows")
    if fb.ok and isinstance(answer, torch.Tensor) and answer.dtype != torch.bool:
        return Feedback(False, f"Not yet: the empty rows are right but have dtype "
                               f"{answer.dtype}; a mask to index or fill with is bool: add "
                               ".bool().")
    return fb


def _as_float(answer):
    if isinstance(answer, torch.Tensor) and answer.dtype == torch.bool:
        return answer.double()
    return answer


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _padding(g: torch.Generator, B: int, T: int, holes: bool = False) -> torch.Tensor:
    """(B, T) bool, True = real: left and right padding in turn (random lengths, the first
    sequence with two pads), or, with ``holes``, any pattern."""
    if holes:
        return torch.rand(B, T, generator=g) < 0.6
    rows = []
    for b in range(B):
        n = max(1, T - 2) if b == 0 else int(torch.randint(1, T + 1, (1,), generator=g))
        pos = torch.arange(T)
        rows.append(pos >= T - n if b % 2 == 0 else pos < n)
    return torch.stack(rows)


def _window_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # w = 1: only the diagonal; w >= T: the plain causal mask; T = 40: far from the lab's 5.
    for B, T, w, holes in ((2, 6, 2, False), (3, 7, 1, False), (2, 5, 9, False),
                           (1, 1, 1, False), (2, 9, 3, True), (3, 40, 7, False)):
        pad = _padding(g, B, T, holes)
        cases.append(HiddenCase((pad.clone(), w), (pad, w),
                                f"padding_mask of shape ({B}, {T}), w = {w}"))
    return cases


GRADED = {
    # The library builds the causal mask with padding and the window mask: the exercises ask for
    # the window with padding, and its empty rows, written out.
    "check_sdpa_mask": FunctionExercise("window_sdpa_mask", check_sdpa_mask, _window_cases,
                                        forbidden=("sdpa_mask", "window_mask",
                                                   "sliding_window_mod", "window_attention")),
    "check_empty_rows": FunctionExercise("window_empty_rows", check_empty_rows, _window_cases,
                                         forbidden=("empty_rows", "window_mask",
                                                    "sliding_window_mod")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
