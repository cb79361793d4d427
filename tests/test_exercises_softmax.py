"""The softmax lab's checkers accept right answers and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook.exercises.softmax import check_jacobian, check_softmax, check_temperature

SCORES = torch.tensor([[2.0, 1.0, 0.5, -1.0],
                       [0.3, -0.2, 1.5, 0.0],
                       [1000.0, 998.0, 990.0, 0.0],
                       [-2.0, 3.0, 1.0, 0.5]])  # (T, T); row 2 overflows the naive formula


def _softmax(s, dim=-1):
    return torch.softmax(s.double(), dim=dim)


def test_right_softmax_passes_in_float32_and_float64():
    assert check_softmax(_softmax(SCORES), SCORES).ok
    assert check_softmax(_softmax(SCORES).float(), SCORES).ok
    assert "still empty" in check_softmax(..., SCORES).message


def test_softmax_mistakes_are_named():
    s = SCORES.double()
    m = s.amax(-1, keepdim=True)
    e = s.exp()
    cases = {
        "wrong dimension": _softmax(s, dim=0),
        "forgot to exponentiate": s / s.sum(-1, keepdim=True),
        "divided by the row max instead of subtracting": _softmax(s / m),
        "without dividing by the row sum": (s - m).exp(),
        "whole matrix": _softmax(s.flatten()).reshape(4, 4),
        "overflowed": e / e.sum(-1, keepdim=True),  # NaN in row 2
        "overflowed ": SCORES.exp() / SCORES.exp().sum(-1, keepdim=True),  # float32
    }
    for phrase, answer in cases.items():
        fb = check_softmax(answer, SCORES)
        assert not fb.ok and phrase.strip() in fb.message, (phrase, fb.message)


def test_softmax_overflow_to_zeros_in_float16_is_named():
    scores = torch.tensor([[10.8, 9.8, 7.8]], dtype=torch.float16)
    e = scores.exp()
    naive = e / e.sum(-1, keepdim=True)  # the sum overflows: every weight becomes 0
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
