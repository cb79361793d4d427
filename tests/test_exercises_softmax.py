"""The softmax lab's checkers accept right answers and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook.exercises.softmax import check_jacobian, check_softmax, check_temperature

SCORES = torch.tensor([[2.0, 1000.0, -2.0],
                       [1.0, 998.0, 3.0],
                       [0.5, 990.0, 1.0],
                       [-1.0, 0.0, 0.5],
                       [0.3, 995.0, -0.2]])  # (T_keys, T_queries); column 1 overflows naively


def _softmax(s, dim=0):
    return torch.softmax(s.double(), dim=dim)


def test_right_softmax_passes_in_float32_and_float64():
    assert check_softmax(_softmax(SCORES), SCORES).ok
    assert check_softmax(_softmax(SCORES).float(), SCORES).ok
    assert check_softmax(_softmax(SCORES.T, dim=-1).T, SCORES).ok  # rows of Q K^T, transposed
    assert "still empty" in check_softmax(..., SCORES).message


def test_softmax_mistakes_are_named():
    s = SCORES.double()
    m = s.amax(0, keepdim=True)
    e = s.exp()
    cases = {
        "normalised over the rows": _softmax(s, dim=-1),
        "weights transposed": _softmax(s).T,
        "forgot to exponentiate": s / s.sum(0, keepdim=True),
        "divided by the column max instead of subtracting": _softmax(s / m),
        "without dividing by the column sum": (s - m).exp(),
        "whole matrix": _softmax(s.flatten()).reshape(s.shape),
        "overflowed": e / e.sum(0, keepdim=True),  # NaN in column 1
        "overflowed ": SCORES.exp() / SCORES.exp().sum(0, keepdim=True),  # float32
    }
    for phrase, answer in cases.items():
        fb = check_softmax(answer, SCORES)
        assert not fb.ok and phrase.strip() in fb.message, (phrase, fb.message)


def test_softmax_overflow_to_zeros_in_float16_is_named():
    scores = torch.tensor([[10.8], [9.8], [7.8]], dtype=torch.float16)
    e = scores.exp()
    naive = e / e.sum(0, keepdim=True)  # the sum overflows: every weight becomes 0
    assert (naive == 0).all()
    fb = check_softmax(naive, scores)
    assert not fb.ok and "overflowed" in fb.message


def test_right_jacobian_passes_and_autograd_agrees():
    s = torch.tensor([1.0, -0.5, 2.0, 0.0], dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), s)
    assert check_jacobian(auto, s).ok


@pytest.mark.parametrize("phrase, make", [
    ("forgot the -p pᵀ term", lambda p: torch.diag(p)),
    ("forgot the diag(p) term", lambda p: -torch.outer(p, p)),
    ("off-diagonal entries -p_i p_j are missing", lambda p: torch.diag(p * (1 - p))),
    ("p_i (1 - p_i) everywhere", lambda p: (p * (1 - p))[:, None].repeat(1, p.numel())),
    ("inner product", lambda p: torch.diag(p) - p @ p),
    ("sign is flipped", lambda p: torch.outer(p, p) - torch.diag(p)),
])
def test_jacobian_mistakes_are_named(phrase, make):
    s = torch.tensor([1.0, -0.5, 2.0, 0.0], dtype=torch.float64)
    fb = check_jacobian(make(torch.softmax(s, -1)), s)
    assert not fb.ok and phrase in fb.message, fb.message


def test_temperature_checker():
    s = torch.tensor([2.0, 1.0, 0.5, -1.0])
    tau = 0.5
    assert check_temperature(torch.softmax(s / tau, -1), s, tau).ok
    p = torch.softmax(s.double(), -1)
    cases = {
        "multiplied the scores": torch.softmax(s * tau, -1),
        "divided the probabilities": p / tau,
        "forgot to divide the scores by τ": p,
        "forgot to divide the scores by τ ": torch.softmax(s.double() - tau, -1),  # shifted
        "without renormalising": p ** (1 / tau),
    }
    for phrase, answer in cases.items():
        fb = check_temperature(answer, s, tau)
        assert not fb.ok and phrase.strip() in fb.message, (phrase, fb.message)


# Practice checks apply the grade's rules (issue 31): method limits and a second input.


def _notebook(code: str) -> dict:
    """Run ``code`` as a notebook cell would (module __main__) and return its namespace."""
    ns = {"__name__": "__main__"}
    exec(code, ns)  # noqa: S102 (the test's own code)
    return ns


SETUP = """
import torch
from attnbook.exercises.softmax import check_softmax, check_jacobian, check_temperature
from attnbook.softmax import softmax_jacobian, stable_softmax, temperature_softmax
S1 = torch.tensor([[2.0, 1000.0, -2.0], [1.0, 998.0, 3.0], [0.5, 990.0, 1.0],
                   [-1.0, 0.0, 0.5], [0.3, 995.0, -0.2]])
s2 = torch.tensor([1.0, -0.5, 2.0, 0.0], dtype=torch.float64)
p2 = stable_softmax(s2)
"""


@pytest.mark.parametrize("body, word", [
    ("return torch.softmax(S, dim=0)", "softmax"),
    ("return stable_softmax(S, dim=0)", "stable_softmax"),
    ("return helper(S)\ndef helper(S):\n    return S.softmax(0)", "softmax"),  # via a helper
    ("return softmax_v2(S.T).T\ndef softmax_v2(S):\n    return S.softmax(-1)",
     "softmax, softmax_v2"),  # the lab's draft, on the transpose
])
def test_practice_check_says_right_values_but_for_a_ruled_out_method(body, word):
    ns = _notebook(SETUP + "def softmax_columns(S):\n    " + body + "\n"
                   "result = check_softmax(softmax_columns(S1), S1)")
    assert not ns["result"].ok
    assert ns["result"].message.startswith(f"Right values, but softmax_columns uses {word}")


def test_practice_checks_catch_autograd_and_temperature_softmax():
    ns = _notebook(SETUP + """
def jacobian_from_p(p):
    return softmax_jacobian(p)
def tempered_softmax(s, tau):
    return temperature_softmax(s, tau)
j = check_jacobian(jacobian_from_p(p2), s2)
t = check_temperature(tempered_softmax(s2, 0.5), s2, 0.5)
""")
    assert "uses softmax_jacobian" in ns["j"].message and not ns["j"].ok
    assert "uses temperature_softmax" in ns["t"].message and not ns["t"].ok


def test_practice_check_calls_the_function_on_a_second_input():
    ns = _notebook(SETUP + """
def softmax_columns(S):
    z = S - S.amax(0)
    return z.exp() / z.exp().sum(0)
right = check_softmax(softmax_columns(S1), S1)
typed = softmax_columns(S1).tolist()
def softmax_columns(S):
    return torch.tensor(typed)
fixed = check_softmax(softmax_columns(S1), S1)
""")
    assert ns["right"].ok and ns["right"].message.startswith("Correct")
    assert not ns["fixed"].ok
    assert ns["fixed"].message.startswith("Right values on the lab's input, but not on a "
                                          "second input")
    # The grader's own copy of the check is the plain one: it judges values only.
    from attnbook.exercises.softmax import GRADED

    assert GRADED["check_softmax"].check(ns["softmax_columns"](ns["S1"]), ns["S1"]).ok


# The common mistakes of issue 31, each named.


def _S1():
    return torch.tensor([[2.0, 1000.0, -2.0], [1.0, 998.0, 3.0], [0.5, 990.0, 1.0],
                         [-1.0, 0.0, 0.5], [0.3, 995.0, -0.2]])


def test_the_global_maximum_instead_of_each_columns_is_named():
    S = _S1()
    z = S - S.max()
    fb = check_softmax(z.exp() / z.exp().sum(0, keepdim=True), S)
    assert not fb.ok and "maximum of the whole matrix" in fb.message, fb.message


@pytest.mark.parametrize("code, words", [
    ("(S - S.amax(-1, keepdim=True)).exp() / (S - S.amax(-1, keepdim=True)).exp().sum(0)",
     "shifted by its row's max but normalised by its column's sum"),
    ("(S - S.amax(0)).exp() / (S - S.amax(0)).exp().sum(-1, keepdim=True)",
     "divided by its row's sum"),
])
def test_the_max_and_the_sum_over_different_axes_are_named(code, words):
    """A row draft half changed: the shift and the sum must run over the same axis."""
    S = _S1().double()
    S[:, 2] -= 200.0  # a query whose scores are far below the others: the row max misleads
    fb = check_softmax(eval(code), S)  # noqa: S307 (the test's own expression)
    assert not fb.ok and words in fb.message, fb.message


def test_keepdim_is_not_needed_over_the_first_axis():
    """(T_k, T_q) minus a (T_q,) vector broadcasts by column: the answer without keepdim is
    right, and the check says so."""
    S = _S1()
    z = S - S.amax(0)
    assert check_softmax(z.exp() / z.exp().sum(0), S).ok
