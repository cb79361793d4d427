"""The checkers of the lab "Scaling by √d" accept right answers and name each typical mistake;
the exercises are functions graded on hidden inputs (issue 31)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import book_solutions

from attnbook.exercises import hidden_cases
from attnbook.exercises.scaling import (
    GRADED,
    check_dot_variance,
    check_entropy,
    check_scaled_scores,
)

SOLUTIONS = book_solutions("03_scaling")


def test_the_lab_has_the_three_functions():
    assert {c: f.__name__ for c, f in SOLUTIONS.items()} == {
        c: spec.function for c, spec in GRADED.items()}


@pytest.mark.parametrize("check", sorted(GRADED))
@pytest.mark.parametrize("seed", [0, 1, 7, 2024])
def test_the_books_solution_passes_every_hidden_case(check, seed):
    spec = GRADED[check]
    for case in hidden_cases(spec, seed):
        fb = spec.check(SOLUTIONS[check](*case.call), *case.check_args)
        assert fb.ok, (case.label, fb.message)


# Exercise 1: head_scores(q, k, h), q (T_q, d_model), k (T_k, d_model), as in the lab.

H, T, D = 4, 6, 32  # d_h = 8: every wrong divisor differs from the right one


@pytest.fixture
def unsplit():
    g = torch.Generator().manual_seed(3)
    return (torch.randn(T, D, generator=g, dtype=torch.float64),
            torch.randn(T, D, generator=g, dtype=torch.float64))


def _heads(x):
    return x.reshape(x.size(0), H, D // H).transpose(0, 1)  # (h, T, d_h)


def test_head_scores_right_answers(unsplit):
    q, k = unsplit
    right = SOLUTIONS["check_scaled_scores"](q, k, H)
    assert check_scaled_scores(right, q, k, H).message == "Correct: your score matrix matches."
    assert check_scaled_scores(right.float(), q, k, H).ok
    assert check_scaled_scores(right.tolist(), q, k, H).ok
    # the library's own split gives the same heads
    from attnbook.multihead import MultiHeadAttention

    m = MultiHeadAttention(D, context_length=T, n_heads=H)
    split = m.split_heads(q[None])[0]
    assert torch.equal(split, _heads(q))


@pytest.mark.parametrize("make, phrase", [
    (lambda q, k: _heads(q) @ _heads(k).transpose(1, 2), "forgot to scale"),
    (lambda q, k: _heads(q) @ _heads(k).transpose(1, 2) / 8, "divided by d = 8, not by √d"),
    (lambda q, k: _heads(q) @ _heads(k).transpose(1, 2) * math.sqrt(8), "multiplied by √d"),
    (lambda q, k: _heads(k) @ _heads(q).transpose(1, 2) / math.sqrt(8), "transposed"),
    (lambda q, k: _heads(q) @ _heads(k).transpose(1, 2) / math.sqrt(32),
     "√d_model = √32 instead of the head width"),
    (lambda q, k: _heads(q) @ _heads(k).transpose(1, 2) / 32, "divided by d_model = 32"),
    (lambda q, k: _heads(q) @ _heads(k).transpose(1, 2) / math.sqrt(T), "√T"),
    (lambda q, k: q @ k.T / math.sqrt(32), "one head over the whole width (shape"),
    (lambda q, k: q @ k.T / math.sqrt(8), "one head over the whole width, divided by √d_h"),
    (lambda q, k: q.reshape(H, T, 8) @ k.reshape(H, T, 8).transpose(1, 2) / math.sqrt(8),
     "heads mixed with the tokens"),
    (lambda q, k: q.reshape(T, 8, H).permute(2, 0, 1) @ k.reshape(T, 8, H).permute(2, 1, 0)
     / math.sqrt(8), "every h-th column"),
])
def test_head_scores_name_each_mistake(unsplit, make, phrase):
    q, k = unsplit
    fb = check_scaled_scores(make(q, k), q, k, H)
    assert not fb.ok and phrase in fb.message, fb.message


@pytest.mark.parametrize("answer, phrase", [
    (None, "still empty"), (..., "still empty"), ([1.0, 2.0], "has shape (2,)"),
    ("scores", "should be a tensor"), (torch.zeros(H, T, T, dtype=torch.int64), "differs"),
])
def test_head_scores_bad_input_is_told_not_raised(unsplit, answer, phrase):
    q, k = unsplit
    fb = check_scaled_scores(answer, q, k, H)
    assert not fb.ok and phrase in fb.message, fb.message
    pair = torch.zeros(H, T, T), torch.zeros(H, T, T, dtype=torch.int64)
    assert not check_scaled_scores(pair, q, k, H).ok


def test_head_scores_cross_attention_lengths():
    q, k = torch.randn(3, 12, dtype=torch.float64), torch.randn(5, 12, dtype=torch.float64)
    right = SOLUTIONS["check_scaled_scores"](q, k, 3)
    assert right.shape == (3, 3, 5) and check_scaled_scores(right, q, k, 3).ok
    fb = check_scaled_scores(right.transpose(1, 2), q, k, 3)
    assert not fb.ok and "transposed" in fb.message


def test_scaled_scores_older_edition_without_h():
    """An older edition's exercise (q, k already split, answer checked by value) is still
    checked: its release has its own copy, but the call stays valid."""
    q, k = torch.randn(4, 5, 8), torch.randn(4, 5, 8)
    raw = q @ k.transpose(-2, -1)
    assert check_scaled_scores(raw / math.sqrt(8), q, k).ok
    assert "√d_model = √32" in check_scaled_scores(raw / math.sqrt(32), q, k).message
    q1, k1 = torch.randn(5, 8), torch.randn(5, 8)
    assert check_scaled_scores(q1 @ k1.T / math.sqrt(8), q1, k1).ok
    assert "d_model" not in check_scaled_scores(q1 @ k1.T / math.sqrt(40), q1, k1).message


# Exercise 2: score_variance(q, k), the variance of all n·m scores.


@pytest.fixture
def pairs():
    g = torch.Generator().manual_seed(5)
    return (torch.randn(300, 16, generator=g, dtype=torch.float64),
            torch.randn(200, 16, generator=g, dtype=torch.float64))


def test_score_variance_right_answers(pairs):
    q, k = pairs
    scores = q @ k.T
    assert check_dot_variance(scores.var(), q, k).message == "Correct: your variance matches."
    population = check_dot_variance(scores.var(correction=0), q, k)
    assert population.ok  # the difference is below the tolerance here
    assert check_dot_variance(float(scores.var()), q, k).ok
    # On a small input the population variance is told apart and accepted.
    small_q, small_k = q[:2, :3], k[:3, :3]
    s = small_q @ small_k.T
    fb = check_dot_variance(s.var(correction=0), small_q, small_k)
    assert fb.ok and "divided by N" in fb.message


@pytest.mark.parametrize("make, phrase", [
    (lambda q, k: (q @ k.T).mean(), "the mean of the scores"),
    (lambda q, k: (q @ k.T).std(), "standard deviation"),
    (lambda q, k: torch.tensor(16.0), "the theorem's prediction d,"),
    (lambda q, k: 16 * q.var() * k.var(), "d·Var(q)·Var(k)"),
    (lambda q, k: (q @ k.T / 4).var(), "scaled scores"),
    (lambda q, k: (q[:, None] * k[None]).var(), "single products"),
    (lambda q, k: (q @ k.T).var(dim=-1), "each query's row"),
    (lambda q, k: (q @ k.T).var(dim=0), "each key's column"),
    (lambda q, k: (q[:200] * k).sum(-1).var(), "paired dot products"),
    (lambda q, k: q.var(), "entries of q"),
])
def test_score_variance_names_each_mistake(pairs, make, phrase):
    q, k = pairs
    fb = check_dot_variance(make(q, k), q, k)
    assert not fb.ok and phrase in fb.message, fb.message


def test_score_variance_theorem_is_not_the_answer_on_hidden_inputs():
    """The hidden inputs have entries of variance other than 1: returning d fails there."""
    for case in hidden_cases(GRADED["check_dot_variance"], 0):
        q, k = case.call
        if "(5, 3)" in case.label:
            fb = check_dot_variance(torch.tensor(float(q.size(-1))), *case.check_args)
            assert not fb.ok and "theorem's prediction d" in fb.message, fb.message
            break
    else:
        raise AssertionError("no hidden case with entries of variance other than 1")


@pytest.mark.parametrize("answer", [None, ..., [1.0, 2.0], "16", (torch.tensor(1.0), 3)])
def test_score_variance_bad_input_is_told_not_raised(pairs, answer):
    q, k = pairs
    fb = check_dot_variance(answer, q, k)
    assert not fb.ok and fb.message.startswith("Not yet")


# Exercise 3: row_entropy(scores), with -inf at masked keys.


@pytest.fixture
def masked():
    from attnbook.lab.saturation import score_rows

    seen = torch.tensor([[4], [8], [12], [16]])
    s = score_rows(64, 4, 16, "none", seed=11)
    return s.masked_fill(torch.arange(16) >= seen, -math.inf)


def test_row_entropy_right_answers(masked):
    from attnbook.lab.saturation import entropy

    p = torch.softmax(masked, dim=-1)
    right = SOLUTIONS["check_entropy"](masked)
    assert torch.allclose(right, entropy(p))
    assert check_entropy(right, masked).ok
    assert check_entropy(torch.special.entr(p).sum(-1), masked).ok
    assert check_entropy((-torch.xlogy(p, p).sum(-1)).tolist(), masked).ok


def test_row_entropy_names_each_mistake(masked):
    s = masked
    p = torch.softmax(s, dim=-1)
    right = -torch.xlogy(p, p).sum(-1)
    unmasked = torch.softmax(s.nan_to_num(neginf=0.0), dim=-1)
    cases = {
        "bits": right / math.log(2),
        "minus sign": -right,
        "left out the weights": -p.log().sum(-1),
        "over all n keys": torch.full((4,), math.log(16)),
        "number of visible keys": torch.tensor([4.0, 8, 12, 16]).log(),
        "min-entropy": -p.amax(-1).log(),
        "wrong dimension": -torch.xlogy(torch.softmax(s, 0), torch.softmax(s, 0)).sum(-1),
        "masked keys counted": -torch.xlogy(unmasked, unmasked).sum(-1),
        "0 · (-inf) = NaN": -(p * p.log()).sum(-1),
        "torch.xlogy": -(p * torch.log_softmax(s, -1)).sum(-1),
        "log of the raw": -(s.exp() * s.log()).sum(-1),
    }
    for phrase, answer in cases.items():
        fb = check_entropy(answer, s)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_entropy_without_a_mask_as_in_an_older_edition():
    scores = torch.randn(3, 6) * 2
    p = torch.softmax(scores, dim=-1)
    right = -(p * p.log()).sum(-1)
    assert check_entropy(right, scores).ok
    fb = check_entropy(-(scores * scores.log()).sum(-1), scores)
    assert not fb.ok and "raw scores" in fb.message


@pytest.mark.parametrize("answer", [None, ..., [1.0], "x", (torch.zeros(4), torch.zeros(4))])
def test_row_entropy_bad_input_is_told_not_raised(masked, answer):
    fb = check_entropy(answer, masked)
    assert not fb.ok and fb.message.startswith("Not yet")


# The practice checks apply the grade's rules (issue 31 §1).


def _run(source: str) -> dict:
    ns = {"__name__": "__main__"}
    exec(source, ns)  # noqa: S102 (the test's own code)
    return ns


PRELUDE = ("import math, torch\n"
           "from attnbook.exercises.scaling import check_scaled_scores, check_dot_variance, "
           "check_entropy\n"
           "g = torch.Generator().manual_seed(0)\n"
           "q = torch.randn(6, 32, generator=g, dtype=torch.float64)\n"
           "k = torch.randn(6, 32, generator=g, dtype=torch.float64)\n"
           "qs = torch.randn(300, 16, generator=g, dtype=torch.float64)\n"
           "ks = torch.randn(200, 16, generator=g, dtype=torch.float64)\n"
           "s = torch.randn(4, 16, generator=g, dtype=torch.float64)\n"
           "s = s.masked_fill(torch.arange(16) >= torch.tensor([[4], [8], [12], [16]]), "
           "-math.inf)\n")


def test_practice_checks_refuse_the_librarys_functions():
    ns = _run(PRELUDE + (
        "from attnbook import attention_scores, scale_scores\n"
        "from attnbook.lab.saturation import entropy\n"
        "def head_scores(q, k, h):\n"
        "    T, D = q.shape\n"
        "    split = lambda x: x.reshape(x.size(0), h, D // h).transpose(0, 1)\n"
        "    return scale_scores(attention_scores(split(q), split(k)), D // h)\n"
        "def score_variance(q, k):\n"
        "    return attention_scores(q, k).var()\n"
        "def row_entropy(scores):\n"
        "    return entropy(torch.softmax(scores, dim=-1))\n"
        "first = check_scaled_scores(head_scores(q, k, 4), q, k, 4)\n"
        "second = check_dot_variance(score_variance(qs, ks), qs, ks)\n"
        "third = check_entropy(row_entropy(s), s)\n"))
    assert ns["first"].message.startswith("Right values, but head_scores uses "
                                          "attention_scores, scale_scores"), ns["first"].message
    assert ns["second"].message.startswith("Right values, but score_variance uses "
                                           "attention_scores"), ns["second"].message
    assert ns["third"].message.startswith("Right values, but row_entropy uses entropy"), ns[
        "third"].message


def test_practice_checks_accept_the_right_functions():
    ns = _run(PRELUDE + (
        "def head_scores(q, k, h):\n"
        "    d_h = q.size(-1) // h\n"
        "    qh = q.unflatten(-1, (h, d_h)).permute(1, 0, 2)\n"
        "    kh = k.unflatten(-1, (h, d_h)).permute(1, 2, 0)\n"
        "    return torch.matmul(qh, kh) * d_h ** -0.5\n"
        "def score_variance(q, k):\n"
        "    return torch.einsum('id,jd->ij', q, k).var()\n"
        "def row_entropy(scores):\n"
        "    p = scores.softmax(-1)\n"
        "    return torch.special.entr(p).sum(-1)\n"
        "first = check_scaled_scores(head_scores(q, k, 4), q, k, 4)\n"
        "second = check_dot_variance(score_variance(qs, ks), qs, ks)\n"
        "third = check_entropy(row_entropy(s), s)\n"))
    for key in ("first", "second", "third"):
        assert ns[key].message.startswith("Correct"), ns[key].message


def test_functions_fixed_to_the_labs_input_fail_the_second_input():
    ns = _run(PRELUDE + (
        "def head_scores(q, k, h):\n"
        "    return q.reshape(6, 4, 8).transpose(0, 1) @ k.reshape(6, 4, 8).permute(1, 2, 0) "
        "/ 8 ** 0.5\n"
        "def score_variance(q, k):\n"
        "    return (q @ k.T).var() if q.size(0) == 300 else torch.tensor(16.0)\n"
        "def row_entropy(scores):\n"
        "    p = scores.softmax(-1)\n"
        "    return -torch.xlogy(p, p).sum(-1) if scores.shape == (4, 16) else torch.zeros(4)\n"
        "first = check_scaled_scores(head_scores(q, k, 4), q, k, 4)\n"
        "second = check_dot_variance(score_variance(qs, ks), qs, ks)\n"
        "third = check_entropy(row_entropy(s), s)\n"))
    for key in ("first", "second", "third"):
        assert ns[key].message.startswith("Right values on the lab's input, but not on a "
                                          "second input"), ns[key].message
