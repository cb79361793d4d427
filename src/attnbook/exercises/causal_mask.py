"""Checks for the lab "The causal mask": the mask itself, the masked scores, and causality."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _ones(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool)


def check_causal_mask(answer, T: int) -> Feedback:
    """Exercise: the causal mask for ``T`` tokens, True where key j is blocked for query i (j > i).

    Shape:
        answer: (T, T) bool
    """
    expected = torch.triu(_ones(T), diagonal=1)
    mistakes = {
        "the allowed set, not the blocked one: tril (or ~ of the right mask, True/False swapped) "
        "keeps the past and the diagonal. True must mark what is blocked, the future j > i":
            torch.tril(_ones(T)),
        "triu with diagonal=0: that also blocks each token from itself, so the first token "
        "would see nothing at all. Use diagonal=1":
            torch.triu(_ones(T)),
        "the strict past (tril with diagonal=-1): that blocks the tokens before i. "
        "Block the future, j > i":
            torch.tril(_ones(T), diagonal=-1),
        "a matrix of ones: that blocks every key. Block only j > i":
            _ones(T),
        "an empty mask (all False): nothing is blocked, so every token sees the future":
            torch.zeros(T, T, dtype=torch.bool),
    }
    feedback = check_tensor(answer, expected, mistakes, name="your causal mask", atol=0, rtol=0)
    if feedback.ok and torch.as_tensor(answer).dtype != torch.bool:
        return Feedback(False, "Not yet: the pattern is right, but masked_fill needs a bool mask; "
                               "build it with dtype=torch.bool.")
    return feedback


def check_masked_scores(answer, scores: torch.Tensor) -> Feedback:
    """Exercise: the scores with every future key (j > i) replaced by -inf.

    Shape:
        scores: (T, T); answer: (T, T)
    """
    T = scores.size(-1)
    future = torch.triu(_ones(T), diagonal=1).to(scores.device)
    inf = float("-inf")
    expected = scores.masked_fill(future, inf)
    mistakes = {
        "the future filled with 0, not -inf: exp(0) = 1, so the future still gets weight":
            scores.masked_fill(future, 0.0),
        "the past (the allowed set) filled, not the future: the mask is inverted":
            scores.masked_fill(~future, inf),
        "the diagonal filled too (triu with diagonal=0): each token must still see itself":
            scores.masked_fill(torch.triu(_ones(T)).to(scores.device), inf),
        "the strict past filled (tril with diagonal=-1), not the future (triu with "
        "diagonal=1)":
            scores.masked_fill(torch.tril(_ones(T), diagonal=-1).to(scores.device), inf),
        "the scores unchanged: nothing is masked": scores,
        "the attention weights (the softmax of the masked scores), not the masked scores: "
        "the exercise stops before the softmax":
            torch.softmax(expected.double(), dim=-1).to(expected.dtype),
    }
    feedback = check_tensor(answer, expected, mistakes, name="your masked score matrix")
    if feedback.ok or answer is None or answer is Ellipsis:
        return feedback
    a = torch.as_tensor(answer).detach().cpu().double()
    if a.shape == expected.shape:
        keep = ~future.cpu()
        kept_ok = torch.allclose(a[keep], scores.detach().cpu().double()[keep], atol=1e-4)
        filled = a[future.cpu()]
        if kept_ok and filled.numel() and torch.isfinite(filled).all() and (filled < -100).all():
            return Feedback(False, f"Not yet: you filled the future with a large finite number "
                                   f"({filled.max().item():.3g}), not -inf. It gives weight 0 "
                                   "here, but it overflows in float16 and leaks weight in a "
                                   "row with nothing visible. Use float('-inf').")
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


def _mask_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase((T,), (T,), f"T = {T}") for T in (1, 2, 7, 9)]


def _scores_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for T, scale in ((1, 1.0), (4, 3.0), (7, 1.0), (6, 500.0)):  # 500: far from 0, as in ch. 4
        s = scale * torch.randn(T, T, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((s.clone(),), (s,), f"scores of shape ({T}, {T})"))
    return cases


def _changed_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase((T, j), (T, j), f"T = {T}, j = {j}")
            for T, j in ((8, 0), (7, 6), (9, 4), (1, 0))]


GRADED = {
    "check_causal_mask": FunctionExercise("my_causal_mask", check_causal_mask, _mask_cases,
                                          forbidden=("causal_mask",)),
    "check_masked_scores": FunctionExercise("masked_scores", check_masked_scores, _scores_cases),
    "check_changed_outputs": FunctionExercise("changed_outputs", check_changed_outputs,
                                              _changed_cases),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
