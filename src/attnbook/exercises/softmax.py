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
    """Exercise: the softmax of each column of ``scores``, the scores laid out transposed (one
    column per query, as ``K Q^T`` computes them), computed so that it cannot overflow.

    Shape:
        scores: (T_keys, T_queries); answer: (T_keys, T_queries), each column summing to 1
    """
    s = scores.detach().double().cpu()
    expected = stable_softmax(s, dim=0)
    # The naive formula in the dtype the learner had, and in float64 in case they upcast.
    for naive in (_naive_softmax(scores.detach().cpu(), dim=0), _naive_softmax(s, dim=0)):
        if not torch.isfinite(naive).all() or not torch.allclose(naive, expected.to(naive.dtype)):
            if _matches_with_nan(answer, naive):
                return Feedback(False, "Not yet: the softmax looks like the result of the naive "
                                       "formula exp(s) / sum exp(s), which overflowed: exp of a "
                                       "large score is inf and inf / inf = NaN (or a sum of inf "
                                       "turns every weight into 0). Subtract each column's max "
                                       "first.")
    # Mistakes whose result holds NaN or inf (0 / 0, exp overflow): compared NaN for NaN.
    flat = s - s.amax()  # the whole matrix's maximum: columns far below it underflow to 0 / 0
    by_row = s - s.amax(dim=-1, keepdim=True)  # each row's max: a draft for rows, half changed
    by_column = s - s.amax(dim=0, keepdim=True)
    with_nan = {
        "each entry shifted by the maximum of the whole matrix, not by its own column's: a "
        "column far below that maximum underflows to exp(...) = 0 everywhere and 0 / 0 = NaN. "
        "Take each column's max: St.amax(dim=0, keepdim=True)":
            flat.exp() / flat.exp().sum(0, keepdim=True),
        "each entry shifted by its row's max but normalised by its column's sum: the shift "
        "cancels only if it is the same for every entry of a column (one query's scores), so "
        "take the max over the same axis as the sum, dim=0":
            by_row.exp() / by_row.exp().sum(0, keepdim=True),
        "each entry shifted by its column's max but divided by its row's sum: sum over the "
        "same axis as the max, dim=0, so that each column (one query's weights) sums to one":
            by_column.exp() / by_column.exp().sum(-1, keepdim=True),
    }
    if not _matches_with_nan(answer, expected):
        for mistake, wrong in with_nan.items():
            if _matches_with_nan(answer, wrong):
                return Feedback(False, f"Not yet: {mistake}.")
    col_max = s.amax(dim=0, keepdim=True)  # (1, T_queries)
    mistakes = {
        "it was normalised over the rows (each row sums to one), as for Q K^T: here one query's "
        "scores are a column, so normalise over dim=0": stable_softmax(s, dim=-1),
        "the weights transposed, (T_queries, T_keys): return them in the layout of St, one "
        "column per query": expected.T,
        "you forgot to exponentiate: the scores divided by their column sum":
            s / s.sum(0, keepdim=True),
        "you divided by the column max instead of subtracting it: exp(s / max) normalised":
            stable_softmax(s / col_max, dim=0),
        "exp(s - max) without dividing by the column sum: the columns do not sum to one":
            (s - col_max).exp(),
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
               "log_softmax", "softmax_v1", "softmax_v2", "Softmax", "logsumexp")


def _softmax_cases(g: torch.Generator) -> list[HiddenCase]:
    big = 3 * torch.randn(5, 4, generator=g)  # float32, as in the lab: one column near 1000
    big[:, 1] += 1000.0
    small = torch.randn(7, 3, generator=g, dtype=torch.float64)
    small[:, 2] -= 1000.0  # every exponential underflows in the naive formula
    square = 2 * torch.randn(6, 6, generator=g, dtype=torch.float64)  # rows and columns agree
    one = torch.randn(1, 1, generator=g, dtype=torch.float64)
    return [HiddenCase((S.clone(),), (S,), label) for S, label in (
        (big, "a (5, 4) float32 matrix with a column near 1000"),
        (small, "a (7, 3) float64 matrix with a column near -1000"),
        (square, "a (6, 6) matrix"),
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
    "check_softmax": FunctionExercise("softmax_columns", check_softmax, _softmax_cases,
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
