"""The checkers of the lab "Scaling by √d" accept right answers and name each typical mistake."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.exercises.scaling import check_dot_variance, check_entropy, check_scaled_scores


@pytest.fixture
def heads():
    h, T, d_h = 4, 5, 8  # d_model = 32: every wrong divisor differs from the right one
    return torch.randn(h, T, d_h), torch.randn(h, T, d_h)


def test_scaled_scores_right_answer(heads):
    q, k = heads
    fb = check_scaled_scores(q @ k.transpose(-2, -1) / math.sqrt(8), q, k)
    assert fb.ok and fb.message.startswith("Correct")
    assert check_scaled_scores((q @ k.transpose(-2, -1) / math.sqrt(8))[None], q[None], k[None])


def test_scaled_scores_name_each_mistake(heads):
    q, k = heads
    raw = q @ k.transpose(-2, -1)
    cases = {
        "forgot to scale": raw,
        "divided by d = 8, not by √d": raw / 8,
        "multiplied by √d": raw * math.sqrt(8),
        "transposed": raw.transpose(-2, -1) / math.sqrt(8),
        "√d_model = √32 instead of the head width": raw / math.sqrt(32),
        "divided by d_model = 32": raw / 32,
        "√T": raw / math.sqrt(5),
    }
    for phrase, answer in cases.items():
        fb = check_scaled_scores(answer, q, k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_scaled_scores_single_head_and_empty():
    q, k = torch.randn(5, 8), torch.randn(5, 8)
    assert check_scaled_scores(q @ k.T / math.sqrt(8), q, k).ok
    assert "d_model" not in check_scaled_scores(q @ k.T / math.sqrt(40), q, k).message
    assert "still empty" in check_scaled_scores(..., q, k).message


def test_dot_variance():
    q, k = torch.randn(2000, 16), torch.randn(2000, 16)
    dots = (q * k).sum(-1)
    assert check_dot_variance(dots.var(), q, k).ok
    population = check_dot_variance(dots.var(correction=0), q, k)
    assert population.ok and "n - 1" in population.message
    cases = {
        "the mean of q·k": dots.mean(),
        "standard deviation": dots.std(),
        "single products": (q * k).var(),
        "scaled scores": (dots / 4).var(),
        "entries of q": q.var(),
    }
    for phrase, answer in cases.items():
        fb = check_dot_variance(answer, q, k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)
    assert "still empty" in check_dot_variance(..., q, k).message


def test_entropy():
    scores = torch.randn(3, 6) * 2
    p = torch.softmax(scores, dim=-1)
    right = -(p * p.log()).sum(-1)
    assert check_entropy(right, scores).ok
    assert check_entropy(torch.special.entr(p).sum(-1), scores).ok
    cases = {
        "bits": right / math.log(2),
        "minus sign": -right,
        "left out the weights": -p.log().sum(-1),
        "uniform": torch.full((3,), math.log(6)),
        "min-entropy": -p.amax(-1).log(),
        "wrong dimension": -(torch.softmax(scores, 0) * torch.log_softmax(scores, 0)).sum(-1),
        "raw scores": -(scores * scores.log()).sum(-1),
    }
    for phrase, answer in cases.items():
        fb = check_entropy(answer, scores)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)
