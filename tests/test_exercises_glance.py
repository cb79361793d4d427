"""The glance lab's checker accepts the right answer, on the lab's input and on every hidden
one, and names each typical mistake; in the notebook it applies the grade's rules."""

from __future__ import annotations

import pytest
import torch

from attnbook import Attention
from attnbook.exercises import hidden_cases
from attnbook.exercises.glance import GRADED, check_output_row


def output_row(weights, v, i):
    """The book's solution (Lab 0, Exercise 1)."""
    return weights[i] @ v


@pytest.fixture
def lab():
    """An untrained module on six tokens of width 4: weights (T, T), values and inputs (T, d)."""
    torch.manual_seed(0)
    m = Attention(4, 6).double()
    x = torch.randn(1, 6, 4, dtype=torch.float64)
    with torch.no_grad():
        y, w = m(x, return_weights=True)
        v = m.value(x)
    return y[0], w[0], v[0], x[0]


def test_the_modules_output_is_right(lab):
    y, w, v, x = lab
    for i in range(6):
        assert check_output_row(y[i], w, v, i, x=x).ok
    assert check_output_row(y[3].tolist(), w, v, 3).ok  # a list is accepted
    assert check_output_row(output_row(w.float(), v.float(), 2), w, v, 2).ok  # float32 too


@pytest.mark.parametrize("seed", [0, 1, 2024])
def test_the_solution_passes_every_hidden_case(seed):
    spec = GRADED["check_output_row"]
    for case in hidden_cases(spec, seed):
        fb = spec.check(output_row(*case.call), *case.check_args)
        assert fb.ok, (case.label, fb.message)


def test_hidden_cases_are_causal_weights_of_other_sizes():
    cases = hidden_cases(GRADED["check_output_row"], 7)
    shapes = {tuple(c.call[1].shape) for c in cases}
    assert (1, 3) in shapes and len(shapes) == len(cases)  # T = 1, and no two alike
    for case in cases:
        w = case.call[0]
        assert torch.allclose(w.sum(-1), torch.ones(len(w), dtype=w.dtype))
        assert (w.triu(1) == 0).all()


@pytest.mark.parametrize("make, phrase", [
    (lambda w, v, x: w[:, 3] @ v, "column i"),
    (lambda w, v, x: w[3] @ x, "inputs x"),
    (lambda w, v, x: v[3], "alone"),
    (lambda w, v, x: v.mean(0), "unweighted average"),
    (lambda w, v, x: w[3, :3] @ v[:3], "key i is visible"),
    (lambda w, v, x: w[3, :, None] * v, "not yet added"),
    (lambda w, v, x: (w[3, :, None] * v).sum(-1), "over the features"),
    (lambda w, v, x: w @ v, "every output at once"),
    (lambda w, v, x: w[4] @ v, "row i + 1"),
    (lambda w, v, x: w[2] @ v, "row i - 1"),
])
def test_each_mistake_is_named(lab, make, phrase):
    _, w, v, x = lab
    fb = check_output_row(make(w, v, x), w, v, 3, x=x)
    assert not fb.ok and phrase in fb.message, fb.message


@pytest.mark.parametrize("answer, words", [
    (None, "still empty"), (..., "still empty"), ("abc", "should be a tensor"),
    (torch.zeros(5), "shape (5,)"), ((torch.zeros(4), torch.zeros(4)), "should be a tensor"),
])
def test_bad_input_gets_a_clear_message(lab, answer, words):
    _, w, v, x = lab
    fb = check_output_row(answer, w, v, 3, x=x)
    assert not fb.ok and fb.message.startswith("Not yet") and words in fb.message, fb.message


def _run(source: str) -> dict:
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook import Attention\n"
         "from attnbook.exercises.glance import check_output_row\n"
         "torch.manual_seed(0)\n"
         "attn = Attention(8, 16).double()\n"
         "x = torch.randn(1, 6, 8, dtype=torch.float64)\n"
         "y, w = attn(x, return_weights=True)\n"
         "v = attn.value(x)\n" + source, ns)
    return ns


def test_practice_check_refuses_the_library():
    ns = _run("from attnbook import weighted_sum\n"
              "def output_row(weights, v, i):\n"
              "    return weighted_sum(weights, v)[i]\n"
              "result = check_output_row(output_row(w[0], v[0], 2), w[0], v[0], 2, x=x[0])\n")
    assert ns["result"].message.startswith("Right values, but output_row uses weighted_sum"), \
        ns["result"].message


def test_practice_check_refuses_the_module():
    ns = _run("def output_row(weights, v, i):\n"
              "    return attn(x)[0, i]\n"
              "result = check_output_row(output_row(w[0], v[0], 2), w[0], v[0], 2, x=x[0])\n")
    assert ns["result"].message.startswith("Right values, but output_row uses attn"), \
        ns["result"].message


def test_an_answer_fixed_to_the_labs_input_fails_the_second_input():
    ns = _run("def output_row(weights, v, i):\n"
              "    return weights[2, :3] @ v[:3]\n"
              "result = check_output_row(output_row(w[0], v[0], 2), w[0], v[0], 2, x=x[0])\n")
    assert ns["result"].message.startswith("Right values on the lab's input, but not on a "
                                           "second input"), ns["result"].message


def test_the_right_function_is_correct_in_the_notebook():
    ns = _run("def output_row(weights, v, i):\n"
              "    return sum(weights[i, j] * v[j] for j in range(i + 1))\n"
              "result = check_output_row(output_row(w[0], v[0], 2), w[0], v[0], 2, x=x[0])\n")
    assert ns["result"].ok and ns["result"].message.startswith("Correct"), ns["result"].message
