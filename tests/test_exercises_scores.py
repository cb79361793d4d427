"""The checkers of the scores lab accept right answers, on the lab's inputs and on every hidden
one, name each typical mistake, and apply the grade's rules in the notebook."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook import attention_scores
from attnbook.exercises import hidden_cases
from attnbook.exercises.scores import GRADED, check_cosines, check_last_scores, check_scores


# The book's solutions (Lab 2, Exercises 1 to 3).
def batch_scores(q, k):
    return q.permute(1, 0, 2) @ k.permute(1, 2, 0)


def last_scores(q, k, n):
    return q[len(q) - n:] @ k.T


def cosines(q, k):
    norm_q = q.norm(dim=-1, keepdim=True)
    norm_k = k.norm(dim=-1, keepdim=True)
    return (q @ k.T) / (norm_q * norm_k.T)


SOLUTIONS = {"check_scores": batch_scores, "check_last_scores": last_scores,
             "check_cosines": cosines}


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("seed", [0, 1, 2024])
def test_the_solutions_pass_every_hidden_case(name, seed):
    spec = GRADED[name]
    for case in hidden_cases(spec, seed):
        fb = spec.check(SOLUTIONS[name](*case.call), *case.check_args)
        assert fb.ok, (name, case.label, fb.message)


# Exercise 1: a batch stored sequence first.


@pytest.mark.parametrize("shape", [(6, 2, 4), (5, 1, 3), (4, 4, 4)])
def test_scores_right_answers_pass(shape):
    q, k = torch.randn(shape), torch.randn(shape)
    s = attention_scores(q.transpose(0, 1), k.transpose(0, 1))  # (B, T, T)
    assert check_scores(s, q, k).ok
    assert check_scores(torch.einsum("ibd,jbd->bij", q, k), q, k).ok
    assert "still empty" in check_scores(..., q, k).message


@pytest.mark.parametrize("shape", [(6, 2, 4), (5, 5, 5), (4, 3, 4)])
def test_scores_mistakes_are_named(shape):
    T, B, d = shape
    q, k = torch.randn(shape), torch.randn(shape)
    qb, kb = q.transpose(0, 1), k.transpose(0, 1)
    s = qb @ kb.transpose(-2, -1)
    cases = {
        "sequences of the batch against each other": q @ k.transpose(-2, -1),
        "batch in the middle": s.transpose(0, 1),
        "transposed": kb @ qb.transpose(-2, -1),
        "sqrt(d)": s / math.sqrt(d),
        "divided by d": s / d,
        "elementwise product": q * k,
        "diagonal alone": (q * k).sum(-1),
        "(B, d, d)": qb.transpose(-2, -1) @ kb,
        "queries against themselves": qb @ qb.transpose(-2, -1),
        "keys against themselves": kb @ kb.transpose(-2, -1),
    }
    if d == T:
        cases["forgot to transpose"] = qb @ kb
    for phrase, answer in cases.items():
        if B == 1 and phrase in ("batch in the middle",):
            continue
        fb = check_scores(answer, q, k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_scores_of_a_wrong_shape_are_reported():
    q, k = torch.randn(6, 2, 4), torch.randn(6, 2, 4)
    fb = check_scores(torch.zeros(6, 6), q, k)
    assert not fb.ok and "shape (6, 6)" in fb.message, fb.message


def test_the_dot_T_mistakes_of_the_transpose_exercise():
    """Chapter 2's transpose exercise: `.T` on a batch warns (deprecated) and reverses all dims;
    with (B, T, d) = (2, 5, 3) only the last two dims work."""
    x = torch.randn(2, 5, 3)
    always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)  # PyTorch warns once per process: an earlier `.T` would hide it
    try:
        with pytest.warns(UserWarning, match="deprecated"):
            y = x.T
    finally:
        torch.set_warn_always(always)
    assert y.shape == (3, 5, 2)
    q, k = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    assert (q @ k.transpose(-2, -1)).shape == (2, 5, 5) == (q @ k.mT).shape
    for wrong in (k.transpose(0, 1), k.permute(2, 1, 0)):  # (5, 2, 3); k.T's (3, 5, 2)
        with pytest.raises(RuntimeError):
            q @ wrong


# Exercise 2: the scores of the last n tokens.


@pytest.mark.parametrize("T, n", [(6, 2), (6, 1), (6, 6), (1, 1), (6, 3)])
def test_last_scores_right_answers_pass(T, n):
    q, k = torch.randn(T, 4), torch.randn(T, 4)
    assert check_last_scores(attention_scores(q, k)[T - n:], q, k, n).ok
    assert check_last_scores((q[-n:] @ k.T).tolist(), q, k, n).ok


@pytest.mark.parametrize("make, phrase", [
    (lambda q, k: q[:2] @ k.T, "first n rows"),
    (lambda q, k: k @ q[-2:].T, "the transpose"),
    (lambda q, k: q @ k[-2:].T, "against the last n keys"),
    (lambda q, k: q[-2:] @ k[-2:].T, "keys only"),
    (lambda q, k: q @ k.T, "whole table"),
    (lambda q, k: q[-2:] @ k.T / 2, "sqrt(d)"),
    (lambda q, k: q[-3:] @ k.T, "one row too many"),
    (lambda q, k: q[-1:] @ k.T, "one row too few"),
    (lambda q, k: k @ q[4], "query T - n alone"),
    (lambda q, k: q[2:] @ k.T, "q[n:]"),
])
def test_last_scores_mistakes_are_named(make, phrase):
    q, k = torch.randn(6, 4), torch.randn(6, 4)
    fb = check_last_scores(make(q, k), q, k, 2)
    assert not fb.ok and phrase in fb.message, fb.message


# Exercise 3: the cosines, square and not.


@pytest.mark.parametrize("Tq, Tk", [(6, 6), (2, 7), (9, 3)])
def test_cosines_right_answers_pass(Tq, Tk):
    q, k = torch.randn(Tq, 4, dtype=torch.float64), torch.randn(Tk, 4, dtype=torch.float64)
    cos = torch.nn.functional.cosine_similarity(q[:, None, :], k[None, :, :], dim=-1)
    assert check_cosines(cos, q, k).ok


@pytest.mark.parametrize("Tq, Tk", [(6, 6), (2, 7)])
def test_cosines_mistakes_are_named(Tq, Tk):
    q, k = torch.randn(Tq, 4, dtype=torch.float64), torch.randn(Tk, 4, dtype=torch.float64)
    cos = cosines(q, k)
    s = q @ k.T
    nq, nk = q.norm(dim=-1), k.norm(dim=-1)
    cases = {
        "raw scores": s,
        "|q_i| only": s / nq[:, None],
        "|k_j| only": s / nk[None, :],
        "whole matrices": s / (q.norm() * k.norm()),
        "squared lengths": s / (nq[:, None] ** 2 * nk[None, :] ** 2),
        "cosines transposed": cos.T,
    }
    if Tq == Tk:
        cases["along columns"] = s / (nk[:, None] * nq[None, :])
        cases["without keepdim=True"] = s / (nq * nk)
    for phrase, answer in cases.items():
        fb = check_cosines(answer, q, k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


# In the notebook: the grade's rules.


def _run(source: str) -> dict:
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook import attention_scores\n"
         "from attnbook.exercises.scores import check_cosines, check_last_scores, "
         "check_scores\n"
         "torch.manual_seed(0)\n"
         "q_tb, k_tb = torch.randn(6, 2, 4, dtype=torch.float64), "
         "torch.randn(6, 2, 4, dtype=torch.float64)\n"
         "q1, k1 = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)"
         "\n" + source, ns)
    return ns


def test_practice_checks_refuse_the_library():
    ns = _run("def batch_scores(q, k):\n"
              "    return attention_scores(q.transpose(0, 1), k.transpose(0, 1))\n"
              "def last_scores(q, k, n):\n"
              "    return attention_scores(q, k)[-n:]\n"
              "def cosines(q, k):\n"
              "    return torch.nn.functional.cosine_similarity(q[:, None], k[None], dim=-1)\n"
              "first = check_scores(batch_scores(q_tb, k_tb), q_tb, k_tb)\n"
              "second = check_last_scores(last_scores(q1, k1, 2), q1, k1, 2)\n"
              "third = check_cosines(cosines(q1, k1), q1, k1)\n")
    assert ns["first"].message.startswith("Right values, but batch_scores uses "
                                          "attention_scores"), ns["first"].message
    assert ns["second"].message.startswith("Right values, but last_scores uses "
                                           "attention_scores"), ns["second"].message
    assert ns["third"].message.startswith("Right values, but cosines uses cosine_similarity"), \
        ns["third"].message


def test_answers_fixed_to_the_labs_input_fail_the_second_input():
    ns = _run("def batch_scores(q, k):\n"
              "    return torch.stack([q[:, b] @ k[:, b].T for b in range(2)])\n"
              "def last_scores(q, k, n):\n"
              "    return q[4:] @ k.T\n"
              "def cosines(q, k):\n"
              "    n = q.norm(dim=-1)\n"
              "    return (q @ k.T) / (n[:, None] * k.norm(dim=-1))\n"
              "first = check_scores(batch_scores(q_tb, k_tb), q_tb, k_tb)\n"
              "second = check_last_scores(last_scores(q1, k1, 2), q1, k1, 2)\n"
              "third = check_cosines(cosines(q1, k1), q1, k1)\n")
    for name in ("first", "second"):
        assert ns[name].message.startswith("Right values on the lab's input, but not on a "
                                           "second input"), ns[name].message
    assert ns["third"].ok, ns["third"].message  # written for any shape: right everywhere


def test_the_right_functions_are_correct_in_the_notebook():
    ns = _run("def batch_scores(q, k):\n"
              "    return torch.einsum('ibd,jbd->bij', q, k)\n"
              "def last_scores(q, k, n):\n"
              "    return (q[-n:, None, :] * k[None, :, :]).sum(-1)\n"
              "def cosines(q, k):\n"
              "    qn = q / q.norm(dim=1, keepdim=True)\n"
              "    kn = k / k.norm(dim=1, keepdim=True)\n"
              "    return qn @ kn.T\n"
              "first = check_scores(batch_scores(q_tb, k_tb), q_tb, k_tb)\n"
              "second = check_last_scores(last_scores(q1, k1, 2), q1, k1, 2)\n"
              "third = check_cosines(cosines(q1, k1), q1, k1)\n")
    for name in ("first", "second", "third"):
        assert ns[name].ok and ns[name].message.startswith("Correct"), ns[name].message
