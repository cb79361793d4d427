"""Checks for the lab "The causal mask": the mask of a KV-cache step, sliding-window scores, and
causality."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _ones(rows: int, cols: int) -> torch.Tensor:
    return torch.ones(rows, cols, dtype=torch.bool)


def check_cached_mask(answer, n_new: int, n_keys: int) -> Feedback:
    """Exercise: the causal mask of ``n_new`` new queries over ``n_keys`` keys, as in a KV cache
    (the cached keys first, then the new tokens' own): True where key j is blocked for new
    query i, which sits at position i + n_keys - n_new, so j > i + n_keys - n_new.

    Shape:
        answer: (n_new, n_keys) bool
    """
    start = n_keys - n_new  # the position of the first new query
    expected = torch.triu(_ones(n_new, n_keys), diagonal=start + 1)
    mistakes = {
        "the top-left corner (triu with diagonal=1, the first n_new rows of the square mask): "
        "new query i is token start + i, where start = n_keys - n_new tokens are cached before "
        "it, so it sees keys 0 .. start + i. Shift the diagonal by start":
            torch.triu(_ones(n_new, n_keys), diagonal=1),
        "a diagonal one too low (diagonal = n_keys - n_new): that blocks each new token from "
        "its own key. Add 1":
            torch.triu(_ones(n_new, n_keys), diagonal=start),
        "a diagonal one too high (diagonal = n_keys - n_new + 2): each new token would see "
        "the next one":
            torch.triu(_ones(n_new, n_keys), diagonal=start + 2),
        "the allowed set, not the blocked one (True/False swapped): True must mark what is "
        "blocked, the keys after the query's own position":
            ~expected,
        "the whole square mask of n_keys tokens: the cached tokens' queries were answered "
        "already; keep only the rows of the n_new new queries (the last ones)":
            torch.triu(_ones(n_keys, n_keys), diagonal=1),
        "a square (n_new, n_new) mask over the new keys alone: the new queries also see every "
        "cached key, so the mask has n_keys columns":
            torch.triu(_ones(n_new, n_new), diagonal=1),
        "an empty mask (all False): that is right for one new token, which sees every key, "
        "but a chunk of several new tokens must not see its own later tokens":
            torch.zeros(n_new, n_keys, dtype=torch.bool),
    }
    feedback = check_tensor(answer, expected, mistakes, name="your mask", atol=0, rtol=0)
    if feedback.ok and torch.as_tensor(answer).dtype != torch.bool:
        return Feedback(False, "Not yet: the pattern is right, but masked_fill needs a bool mask; "
                               "build it with dtype=torch.bool.")
    return feedback


def _blocked_outside(T: int, window: int) -> torch.Tensor:
    """True where query i must not see key j with a window of ``window`` keys: i - j not in
    0 .. window - 1."""
    gap = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # i - j
    return (gap < 0) | (gap >= window)


def check_window_scores(answer, scores: torch.Tensor, window: int) -> Feedback:
    """Exercise: the scores of sliding-window causal attention: every entry outside query i's
    window (keys i - window + 1 .. i) replaced by -inf, the others unchanged.

    Shape:
        scores: (T, T); answer: (T, T)
    """
    T = scores.size(-1)
    inf = float("-inf")

    def fill(blocked, value=inf):
        return scores.masked_fill(blocked.to(scores.device), value)

    blocked = _blocked_outside(T, window)
    expected = fill(blocked)
    gap = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    mistakes = {
        "the causal mask alone: the window is missing, so each query still sees every earlier "
        "key. Also block the keys window or more positions back (i - j >= window)":
            fill(gap < 0),
        "a window one key too wide (i - j > window blocked): query i sees window keys, itself "
        "and the window - 1 before it":
            fill((gap < 0) | (gap > window)),
        "a window one key too narrow (i - j >= window - 1 blocked): query i sees itself and "
        "the window - 1 keys before it, window keys in all":
            fill((gap < 0) | (gap >= window - 1)),
        "a band without the causal part (|i - j| >= window blocked): the future is still "
        "visible; block j > i too":
            fill(gap.abs() >= window),
        "the keys before the window filled, but the future left visible: block j > i too":
            fill(gap >= window),
        "the blocked entries filled with 0, not -inf: exp(0) = 1, so they still get weight":
            fill(blocked, 0.0),
        "the allowed entries filled, not the blocked ones: the mask is inverted":
            fill(~blocked),
        "the scores unchanged: nothing is masked": scores,
        "the attention weights (the softmax of the masked scores), not the masked scores: "
        "the exercise stops before the softmax":
            torch.softmax(expected.double(), dim=-1).to(expected.dtype),
    }
    feedback = check_tensor(answer, expected, mistakes, name="your windowed score matrix")
    if feedback.ok or answer is None or answer is Ellipsis:
        return feedback
    a = torch.as_tensor(answer).detach().cpu().double()
    if a.shape == expected.shape:
        keep = ~blocked
        kept_ok = torch.allclose(a[keep], scores.detach().cpu().double()[keep], atol=1e-4)
        filled = a[blocked]
        if kept_ok and filled.numel() and torch.isfinite(filled).all() and (filled < -100).all():
            return Feedback(False, f"Not yet: you filled the blocked entries with a large finite "
                                   f"number ({filled.max().item():.3g}), not -inf. It gives "
                                   "weight 0 here, but it overflows in float16 and leaks weight "
                                   "in a row with nothing visible. Use float('-inf').")
    return feedback


def check_changed_outputs(answer, T: int, j: int) -> Feedback:
    """Exercise: which outputs y_0 .. y_{T-1} can change when the input of token ``j`` changes.

    Shape:
        answer: (T,) bool, True = this output may change
    """
    pos = torch.arange(T)
    expected = pos >= j
    mistakes = {
        "the outputs before j: those are exactly the ones causality protects; the outputs "
        "at and after j are the ones that see token j":
            pos <= j,
        "the outputs after j only: token j's own output also sees token j (the diagonal "
        "is not masked)":
            pos > j,
        "output j alone: every later token also attends to token j":
            pos == j,
        "every output: the mask stops the tokens before j from seeing it":
            torch.ones(T, dtype=torch.bool),
    }
    return check_tensor(answer, expected, mistakes, name="your set of changed outputs",
                        atol=0, rtol=0)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _cached_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase((n, L), (n, L), f"n_new = {n}, n_keys = {L}")
            for n, L in ((1, 1), (1, 7), (2, 9), (4, 4), (5, 11))]


def _window_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # w = 1: only the diagonal; w >= T: the plain causal mask; 500: far from 0, as in ch. 4.
    for T, w, scale in ((1, 1, 1.0), (5, 1, 3.0), (7, 3, 1.0), (6, 10, 1.0), (8, 2, 500.0)):
        s = scale * torch.randn(T, T, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((s.clone(), w), (s, w), f"scores of shape ({T}, {T}), w = {w}"))
    return cases


def _changed_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase((T, j), (T, j), f"T = {T}, j = {j}")
            for T, j in ((8, 0), (7, 6), (9, 4), (1, 0))]


GRADED = {
    # The square mask and the window are in the library: the exercises ask for the offset and
    # the band themselves.
    "check_cached_mask": FunctionExercise("cached_causal_mask", check_cached_mask, _cached_cases,
                                          forbidden=("causal_mask", "mask", "window_mask")),
    "check_window_scores": FunctionExercise("window_scores", check_window_scores, _window_cases,
                                            forbidden=("window_mask", "window_attention",
                                                       "sliding_window_mod")),
    "check_changed_outputs": FunctionExercise("changed_outputs", check_changed_outputs,
                                              _changed_cases),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
