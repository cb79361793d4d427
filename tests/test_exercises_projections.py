"""The checkers of the projections lab accept right answers, on the lab's inputs and on every
hidden one, name each typical mistake, and apply the grade's rules in the notebook."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnbook import Attention
from attnbook.exercises import hidden_cases
from attnbook.exercises.projections import (
    GRADED,
    check_parameter_count,
    check_queries,
    check_query_matrix,
)


# The book's solutions (Lab 1, Exercises 1 to 3).
def query_matrix(in_proj_weight):
    d = in_proj_weight.shape[1]
    return in_proj_weight[:d].T


def queries(x, weight, bias):
    return x @ weight.T + bias


def parameter_count(d_model, context_length, bias):
    return 3 * (d_model**2 + (d_model if bias else 0))


SOLUTIONS = {"check_query_matrix": query_matrix, "check_queries": queries,
             "check_parameter_count": parameter_count}


@pytest.mark.parametrize("name", sorted(SOLUTIONS))
@pytest.mark.parametrize("seed", [0, 1, 2024])
def test_the_solutions_pass_every_hidden_case(name, seed):
    spec = GRADED[name]
    for case in hidden_cases(spec, seed):
        fb = spec.check(SOLUTIONS[name](*case.call), *case.check_args)
        assert fb.ok, (name, case.label, fb.message)


# Exercise 1: W_q from nn.MultiheadAttention's packed weight.


@pytest.fixture
def packed():
    torch.manual_seed(0)
    return nn.MultiheadAttention(4, num_heads=1, bias=False).double().in_proj_weight.detach()


def test_query_matrix_is_what_multihead_attention_computes(packed):
    """x @ W_q is the first d outputs of the packed layer, as nn.MultiheadAttention uses them."""
    x = torch.randn(6, 4, dtype=torch.float64)
    wq = query_matrix(packed)
    assert check_query_matrix(wq, packed).ok
    assert check_query_matrix(packed.T[:, :4].numpy(), packed).ok  # NumPy, another way
    assert torch.allclose(x @ wq, nn.functional.linear(x, packed)[:, :4])
    assert "still empty" in check_query_matrix(..., packed).message


@pytest.mark.parametrize("make, phrase", [
    (lambda w: w[:4], "as stored"),
    (lambda w: w[4:8].T, "key's matrix"),
    (lambda w: w[4:8], "key's block as stored"),
    (lambda w: w[8:].T, "value's matrix"),
    (lambda w: w[0::3].T, "not interleaved"),
    (lambda w: w, "whole packed weight, (3d, d)"),
    (lambda w: w.T, "whole packed weight transposed"),
    (lambda w: torch.zeros(4, 3), "shape (4, 3)"),
])
def test_query_matrix_mistakes_are_named(packed, make, phrase):
    fb = check_query_matrix(make(packed), packed)
    assert not fb.ok and phrase in fb.message, fb.message


# Exercise 2: a projection with a bias.


@pytest.mark.parametrize("shape, out", [((6, 4), 4), ((2, 6, 4), 4), ((1, 3, 4), 2)])
def test_queries_right_answers_pass(shape, out):
    layer = nn.Linear(4, out).double()
    x = torch.randn(shape, dtype=torch.float64)
    assert check_queries(layer(x), x, layer.weight, layer.bias).ok
    assert check_queries(queries(x, layer.weight, layer.bias).tolist(), x, layer.weight,
                         layer.bias).ok


@pytest.mark.parametrize("make, phrase", [
    (lambda x, w, b: x @ w.T, "without the bias"),
    (lambda x, w, b: x @ w.T - b, "subtracted"),
    (lambda x, w, b: (x @ w.T + b).transpose(-2, -1), "transposed"),
    (lambda x, w, b: x @ w.T + 2 * b, "added twice"),
    (lambda x, w, b: x @ w + b, "weight as stored"),
    (lambda x, w, b: x @ w, "weight as stored and no bias"),
    (lambda x, w, b: (x + b) @ w.T, "before the product"),
    (lambda x, w, b: x + b, "product with the weight is missing"),
])
def test_queries_mistakes_are_named(make, phrase):
    layer = nn.Linear(4, 4).double()
    x = torch.randn(2, 6, 4, dtype=torch.float64)
    w, b = layer.weight.detach(), layer.bias.detach()
    fb = check_queries(make(x, w, b), x, w, b)
    assert not fb.ok and phrase in fb.message, fb.message


def test_queries_on_a_narrow_layer_name_the_missing_bias_and_report_shapes():
    layer = nn.Linear(4, 2).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    w, b = layer.weight.detach(), layer.bias.detach()
    assert "without the bias" in check_queries(x @ w.T, x, w, b).message
    fb = check_queries(torch.zeros(1, 3, 4), x, w, b)
    assert not fb.ok and "shape (1, 3, 4)" in fb.message, fb.message
    assert "still empty" in check_queries(None, x, w, b).message


# Exercise 3: the parameter count, with and without biases.


@pytest.mark.parametrize("d, L, bias", [(12, 20, False), (12, 20, True), (1, 1, False)])
def test_parameter_count_matches_real_modules(d, L, bias):
    m = Attention(d, L)
    counted = sum(p.numel() for p in m.parameters())
    assert counted == 3 * d * d
    assert m.mask.numel() == L * L and "mask" not in dict(m.named_parameters())
    if bias:
        counted = 3 * sum(p.numel() for p in nn.Linear(d, d).parameters())
    assert check_parameter_count(counted, d, L, bias).ok
    assert check_parameter_count(torch.tensor(counted), d, L, bias).ok


@pytest.mark.parametrize(("answer", "bias", "phrase"), [
    (3 * 64 * 64 + 3 * 64, False, "bias=False"),
    (3 * 64 * 64 + 128 * 128, False, "buffer"),
    (64 * 64, False, "one layer"),
    (4 * 64 * 64, False, "no output projection"),
    (3 * 64, False, "three times d"),
    (3 * 64 * 64, True, "the bias left out"),
    (3 * 64 * 64 + 64, True, "one bias for the three layers"),
    (6 * 64 * 64, True, "a bias of d^2"),
    (3 * 64 * 64 + 3, True, "one number per layer"),
    (3 * 64 * 64 + 3 * 64 + 128 * 128, True, "buffer"),
    (4 * 64 * 64 + 4 * 64, True, "no output projection"),
])
def test_parameter_count_mistakes(answer, bias, phrase):
    fb = check_parameter_count(answer, 64, 128, bias)
    assert not fb.ok and phrase in fb.message, fb.message
    assert "differs" in check_parameter_count(12345, 64, 128, bias).message


# In the notebook: the grade's rules.


def _run(source: str) -> dict:
    ns = {"__name__": "__main__"}
    exec("import torch\nfrom torch import nn\n"  # noqa: S102 (the test's own code)
         "from attnbook import Attention\n"
         "from attnbook.exercises.projections import (check_parameter_count, check_queries,\n"
         "    check_query_matrix)\n"
         "torch.manual_seed(0)\n"
         "x2 = torch.randn(1, 3, 4, dtype=torch.float64)\n"
         "query_b = nn.Linear(4, 2).double()\n"
         "packed = nn.MultiheadAttention(4, 1, bias=False).double().in_proj_weight.detach()\n"
         + source, ns)
    return ns


def test_practice_checks_refuse_the_layer_and_a_real_module():
    ns = _run("def queries(x, weight, bias):\n"
              "    return nn.functional.linear(x, weight, bias)\n"
              "def parameter_count(d_model, context_length, bias):\n"
              "    return sum(p.numel() for p in Attention(d_model, context_length).parameters())"
              " + (3 * d_model if bias else 0)\n"
              "first = check_queries(queries(x2, query_b.weight, query_b.bias), x2,"
              " query_b.weight, query_b.bias)\n"
              "second = check_parameter_count(parameter_count(8, 16, True), 8, 16, True)\n")
    assert ns["first"].message.startswith("Right values, but queries uses linear"), \
        ns["first"].message
    assert ns["second"].message.startswith("Right values, but parameter_count uses "
                                           "Attention, numel, parameters"), ns["second"].message


def test_answers_fixed_to_the_labs_input_fail_the_second_input():
    ns = _run("def query_matrix(in_proj_weight):\n"
              "    return in_proj_weight[:4].T\n"
              "def parameter_count(d_model, context_length, bias):\n"
              "    return 1771776\n"
              "first = check_query_matrix(query_matrix(packed), packed)\n"
              "second = check_parameter_count(parameter_count(768, 1024, True), 768, 1024, True)\n")
    for name in ("first", "second"):
        assert ns[name].message.startswith("Right values on the lab's input, but not on a "
                                           "second input"), ns[name].message


def test_the_right_functions_are_correct_in_the_notebook():
    ns = _run("def query_matrix(in_proj_weight):\n"
              "    q, k, v = in_proj_weight.chunk(3)\n"
              "    return q.T\n"
              "def queries(x, weight, bias):\n"
              "    return torch.einsum('...td,od->...to', x, weight) + bias\n"
              "def parameter_count(d_model, context_length, bias):\n"
              "    return 3 * d_model * (d_model + int(bias))\n"
              "first = check_query_matrix(query_matrix(packed), packed)\n"
              "second = check_queries(queries(x2, query_b.weight, query_b.bias), x2,"
              " query_b.weight, query_b.bias)\n"
              "third = check_parameter_count(parameter_count(768, 1024, True), 768, 1024, True)\n")
    for name in ("first", "second", "third"):
        assert ns[name].ok and ns[name].message.startswith("Correct"), ns[name].message
