"""Checks for the lab "Softmax" (step 5)."""

from __future__ import annotations

import torch

from ..softmax import softmax_jacobian, stable_softmax
from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _naive_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(s) / sum exp(s) without the max trick: the formula that overflows."""
    e = scores.exp()
    return e / e.sum(dim=dim, keepdim=True)


def _matches_with_nan(answer, wrong: torch.Tensor) -> bool:
    """True if ``answer`` equals ``wrong``, NaN for NaN and inf for inf."""
    try:
        answer = torch.as_tensor(answer).detach().cpu()
    except (TypeError, ValueError, RuntimeError):
        return False
    wrong = wrong.detach().cpu()
    return answer.shape == wrong.shape and torch.allclose(
        answer.double(), wrong.double(), atol=1e-4, rtol=1e-4, equal_nan=True)


def check_softmax(answer, scores: torch.Tensor) -> Feedback:
    """Exercise: the softmax of each row of ``scores``, computed so that it cannot overflow.

    Shape:
        scores: (T, T); answer: (T, T), each row summing to 1
    """
    s = scores.detach().double().cpu()
    expected = stable_softmax(s, dim=-1)
    # The naive formula in the dtype the learner had, and in float64 in case they upcast.
    for naive in (_naive_softmax(scores.detach().cpu()), _naive_softmax(s)):
        if not torch.isfinite(naive).all() or not torch.allclose(naive, expected.to(naive.dtype)):
            if _matches_with_nan(answer, naive):
                return Feedback(False, "Not yet: the softmax looks like the result of the naive "
                                       "formula exp(s) / sum exp(s), which overflowed: exp of a "
                                       "large score is inf and inf / inf = NaN (or a sum of inf "
                                       "turns every weight into 0). Subtract each row's max first.")
    # Mistakes whose result holds NaN or inf (0 / 0, exp overflow): compared NaN for NaN.
    flat = s - s.amax()  # the whole matrix's maximum: rows far below it underflow to 0 / 0
    square = s.dim() == 2 and s.shape[0] == s.shape[1]
    # (T, T) - (T,) broadcasts along the last axis, i.e. by column (it only runs when square).
    loose = s - s.amax(dim=-1) if square else None
    with_nan = {
        "each entry shifted by the maximum of the whole matrix, not by its own row's: a row far "
        "below that maximum underflows to exp(...) = 0 everywhere and 0 / 0 = NaN. Take each "
        "row's max: S.amax(dim=-1, keepdim=True)":
            flat.exp() / flat.exp().sum(-1, keepdim=True),
        "the row max taken without keepdim=True: amax(dim=-1) is a (T,) vector, and S minus it "
        "broadcasts along the last axis, so entry [i, j] is shifted by row j's max. Keep the "
        "dimension: S.amax(dim=-1, keepdim=True), shape (T, 1)":
            loose.exp() / loose.exp().sum(-1, keepdim=True),
        "the row sum taken without keepdim=True: e / e.sum(-1) divides entry [i, j] by row j's "
        "sum (a (T,) vector broadcasts along the last axis). Use e.sum(dim=-1, keepdim=True)":
            (s - s.amax(-1, keepdim=True)).exp()
            / (s - s.amax(-1, keepdim=True)).exp().sum(-1),
        "the row max and the row sum both taken without keepdim=True: each (T,) vector "
        "broadcasts along the last axis, by column, not by row. Use keepdim=True for both":
            loose.exp() / loose.exp().sum(-1),
    } if square else {
        "each entry shifted by the maximum of the whole matrix, not by its own row's: a row far "
        "below that maximum underflows to exp(...) = 0 everywhere and 0 / 0 = NaN. Take each "
        "row's max: S.amax(dim=-1, keepdim=True)":
            flat.exp() / flat.exp().sum(-1, keepdim=True)}
    if not _matches_with_nan(answer, expected):
        for mistake, wrong in with_nan.items():
            if _matches_with_nan(answer, wrong):
                return Feedback(False, f"Not yet: {mistake}.")
    row_max = s.amax(dim=-1, keepdim=True)  # (T, 1)
    mistakes = {
        "it was normalised over the wrong dimension (each column sums to one, not each row): "
        "use dim=-1": stable_softmax(s, dim=-2),
        "you forgot to exponentiate: the scores divided by their row sum": s / s.sum(-1, True),
        "you divided by the row max instead of subtracting it: exp(s / max) normalised":
            stable_softmax(s / row_max, dim=-1),
        "exp(s - max) without dividing by the row sum: the rows do not sum to one":
            (s - row_max).exp(),
        "the softmax of the whole matrix at once (all entries together sum to one)":
            stable_softmax(s.flatten(), dim=-1).reshape(s.shape),
    }
    return check_tensor(answer, expected, mistakes, name="the softmax")


def check_jacobian(answer, scores: torch.Tensor) -> Feedback:
    """Exercise: the Jacobian J[i, j] = dp_i / ds_j of p = softmax(s) for one row of scores.

    Shape:
        scores: (n,); answer: (n, n)
    """
    p = stable_softmax(scores.detach().double().cpu(), dim=-1)  # (n,)
    expected = softmax_jacobian(p)  # (n, n)
    n = p.numel()
    mistakes = {
        "diag(p): you forgot the -p pᵀ term": torch.diag(p),
        "-p pᵀ alone: you forgot the diag(p) term (the i = j case of the quotient rule)":
            -torch.outer(p, p),
        "diag(p_i (1 - p_i)): the diagonal is right, but the off-diagonal entries -p_i p_j "
        "are missing": torch.diag(p * (1 - p)),
        "you used p_i (1 - p_i) everywhere, also off the diagonal; for i ≠ j the derivative "
        "is -p_i p_j": (p * (1 - p))[:, None].expand(n, n),
        "diag(p) minus the inner product pᵀp (one number) instead of the outer product p pᵀ "
        "(a matrix)": torch.diag(p) - (p @ p),
        "p pᵀ - diag(p): the sign is flipped": torch.outer(p, p) - torch.diag(p),
    }
    return check_tensor(answer, expected, mistakes, name="the Jacobian")


def check_temperature(answer, scores: torch.Tensor, temperature: float) -> Feedback:
    """Exercise: the softmax of one row of scores at a given temperature.

    Shape:
        scores: (n,); answer: (n,)
    """
    s = scores.detach().double().cpu()
    tau = float(temperature)
    p = stable_softmax(s, dim=-1)
    expected = stable_softmax(s / tau, dim=-1)
    mistakes = {
        "you multiplied the scores by the temperature instead of dividing by it":
            stable_softmax(s * tau, dim=-1),
        "you divided the probabilities by the temperature, not the scores: the result "
        "no longer sums to one": p / tau,
        "the plain softmax, at temperature 1: you forgot to divide the scores by τ before "
        "the softmax (adding or subtracting τ instead would give this too, by shift "
        "invariance)": p,
        "p ** (1 / τ) without renormalising; divide by its sum and you have the answer":
            p ** (1 / tau),
    }
    return check_tensor(answer, expected, mistakes, name="the tempered softmax")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).

_NO_SOFTMAX = ("softmax", "stable_softmax", "temperature_softmax", "masked_softmax",
               "log_softmax", "softmax_v2", "Softmax")


def _softmax_cases(g: torch.Generator) -> list[HiddenCase]:
    big = 3 * torch.randn(5, 5, generator=g)  # float32, as in the lab: one row near 1000
    big[1] += 1000.0
    small = torch.randn(3, 7, generator=g, dtype=torch.float64)
    small[2] -= 1000.0  # every exponential underflows in the naive formula
    one = torch.randn(1, 1, generator=g, dtype=torch.float64)
    return [HiddenCase((S.clone(),), (S,), label) for S, label in (
        (big, "a (5, 5) float32 matrix with a row near 1000"),
        (small, "a (3, 7) float64 matrix with a row near -1000"),
        (one, "a (1, 1) matrix"))]


def _jacobian_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for n in (2, 5, 8):
        s = 2 * torch.randn(n, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((stable_softmax(s),), (s,), f"p of length {n}"))
    return cases


def _temperature_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for n, tau in ((4, 0.25), (6, 2.0), (9, 0.7)):
        s = 2 * torch.randn(n, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((s.clone(), tau), (s, tau), f"{n} scores, tau = {tau}"))
    return cases


GRADED = {
    "check_softmax": FunctionExercise("softmax_rows", check_softmax, _softmax_cases,
                                      forbidden=_NO_SOFTMAX),
    "check_jacobian": FunctionExercise("jacobian_from_p", check_jacobian, _jacobian_cases,
                                       forbidden=("softmax_jacobian", "jacobian", "autograd",
                                                  "backward", "grad")),
    "check_temperature": FunctionExercise("tempered_softmax", check_temperature,
                                          _temperature_cases,
                                          forbidden=("temperature_softmax",)),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
