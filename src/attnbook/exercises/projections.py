"""Checks for the lab "Tokens as vectors: queries, keys and values" (step 1, the projections)."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def check_query_matrix(answer, in_proj_weight: torch.Tensor) -> Feedback:
    """Exercise: the book's W_q (so that Q = X W_q) read off a packed weight, as
    ``nn.MultiheadAttention`` stores it: the query, key and value layers' weights, (out, in)
    each, stacked along the rows, query first.

    Args:
        answer: the learner's matrix.
        in_proj_weight: the packed weight; rows 0 .. d - 1 are the query layer's (out, in) weight.

    Shape:
        in_proj_weight: (3d, d); answer: (d, d)
    """
    w = in_proj_weight.detach().cpu()
    d = w.size(-1)
    wq, wk, wv = w[:d], w[d:2 * d], w[2 * d:]  # (d, d) each, as stored: (out, in)
    mistakes = {
        "the query block as stored, (out, in): nn.Linear computes x @ weight.T, so the book's "
        "W_q is the block transposed": wq,
        "the key's matrix: the query's rows come first, rows 0 .. d - 1": wk.T,
        "the key's block as stored: take rows 0 .. d - 1, then transpose": wk,
        "the value's matrix: the query's rows come first, rows 0 .. d - 1": wv.T,
        "every third row (rows 0, 3, 6, ...): the three weights are stacked one block after "
        "the other, not interleaved; the query's are rows 0 .. d - 1": w[0::3].T,
        "the whole packed weight, (3d, d): keep the query's d rows": w,
        "the whole packed weight transposed, (d, 3d): keep the query's d columns of it": w.T,
    }
    return check_tensor(answer, wq.T, mistakes, name="W_q")


def check_queries(answer, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> Feedback:
    """Exercise: the output of a projection with a bias, as ``nn.Linear(d, out)`` computes it,
    ``x @ weight.T + bias``, from its stored weight and bias.

    Args:
        answer: the learner's queries.
        x: token vectors.
        weight: the layer's weight as stored, (out, in).
        bias: the layer's bias.

    Shape:
        x: (T, d) or (B, T, d), weight: (out, d), bias: (out,); answer: (T, out) or (B, T, out)
    """
    x, weight, bias = (t.detach().cpu() for t in (x, weight, bias))
    product = x @ weight.T  # (..., T, out)
    expected = product + bias
    mistakes = {
        "the product without the bias: nn.Linear adds the bias after the product, "
        "x @ weight.T + bias": product,
        "the bias subtracted: it is added": product - bias,
        "the result transposed (one column per token): keep one row per token, (..., T, out)":
            expected.transpose(-2, -1),
        "the bias added twice": product + 2 * bias,
    }
    if weight.size(0) == weight.size(1):  # only then does x @ weight run at all
        mistakes.update({
            "you used the weight as stored (out, in); nn.Linear multiplies by its transpose, "
            "x @ weight.T": x @ weight + bias,
            "the weight as stored and no bias: x @ weight.T + bias": x @ weight,
            "the bias added to x before the product, (x + bias) @ weight.T: it is added to the "
            "product": (x + bias) @ weight.T,
            "the token vectors plus the bias: the product with the weight is missing": x + bias,
        })
    return check_tensor(answer, expected, mistakes, name="the layer's output")


def check_parameter_count(answer, d_model: int, context_length: int,
                          bias: bool = False) -> Feedback:
    """Exercise: the number of learned parameters of ``Attention(d_model, context_length)``, with
    ``bias=True`` in its three projections if ``bias``.

    Three d x d matrices, 3 d^2, plus a bias of d entries each when ``bias``: 3 d^2 + 3 d. The
    causal mask is a buffer, not a parameter.
    """
    d, L = int(d_model), int(context_length)
    b = 3 * d if bias else 0
    mistakes = {}
    if bias:
        mistakes.update({
            "the bias left out: with bias=True each of the three layers also has d bias "
            "entries, 3d^2 + 3d": 3 * d * d,
            "one bias for the three layers (3d^2 + d): each layer has its own bias of d "
            "entries": 3 * d * d + d,
            "a bias of d^2 entries per layer: a bias has one entry per output, d": 6 * d * d,
            "a bias of one number per layer (3d^2 + 3): a bias has one entry per output, d":
                3 * d * d + 3,
        })
    else:
        mistakes["three matrices plus a bias each (3d^2 + 3d): here the projections are built "
                 "with bias=False"] = 3 * d * d + 3 * d
    mistakes.update({
        "you counted the causal mask (context_length^2 entries): it is a buffer, not a "
        "parameter, and is never trained": 3 * d * d + b + L * L,
        "the count of one layer: there are three, query, key and value": d * d + b // 3,
        "four layers: this module has no output projection W_o": 4 * d * d + 4 * (b // 3),
        "3d, three times d: each matrix is d x d, so it holds d^2 numbers, not d": 3 * d + b,
    })
    expected = 3 * d * d + b
    return check_tensor(answer, torch.tensor(expected),
                        {k: torch.tensor(v) for k, v in mistakes.items()},
                        name="the parameter count", atol=0.5, rtol=0)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _query_matrix_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for d in (1, 2, 5, 8, 16):  # d = 4 is the lab's; d = 1 has no transpose to get wrong
        w = torch.randn(3 * d, d, generator=g, dtype=torch.float64) / d**0.5
        cases.append(HiddenCase((w.clone(),), (w,), f"a packed weight of shape ({3 * d}, {d})"))
    return cases


def _queries_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # A single token; one sequence (T, d); square layers (where x @ weight runs); a batch; a
    # wide layer; a bias far from 0.
    for x_shape, out, spread in (((1, 1, 4), 1, 1.0), ((5, 3), 4, 1.0), ((2, 7, 6), 6, 1.0),
                                 ((3, 8), 16, 1.0), ((2, 4, 5), 5, 100.0)):
        x = torch.randn(*x_shape, generator=g, dtype=torch.float64)
        w = torch.randn(out, x_shape[-1], generator=g, dtype=torch.float64)
        b = spread * torch.randn(out, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((x.clone(), w.clone(), b.clone()), (x, w, b),
                                f"x of shape {x_shape}, weight ({out}, {x_shape[-1]}), "
                                f"bias ({out},)"))
    return cases


def _parameter_count_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase((d, L, bias), (d, L, bias),
                       f"d_model = {d}, context_length = {L}, bias = {bias}")
            for d, L, bias in ((1, 1, False), (768, 1024, False), (64, 128, True),
                               (12, 3, True), (4096, 2048, False))]


GRADED = {
    "check_query_matrix": FunctionExercise("query_matrix", check_query_matrix,
                                           _query_matrix_cases),
    # The layer, or torch's own linear map, computes it for the learner.
    "check_queries": FunctionExercise("queries", check_queries, _queries_cases,
                                      forbidden=("linear", "Linear", "addmm", "bilinear")),
    "check_parameter_count": FunctionExercise("parameter_count", check_parameter_count,
                                              _parameter_count_cases,
                                              forbidden=("parameters", "numel", "Attention",
                                                         "Linear")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
