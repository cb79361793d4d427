"""Checks for the lab "The whole module at a glance"."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def check_output_row(answer, weights: torch.Tensor, v: torch.Tensor, i: int,
                     x: torch.Tensor | None = None) -> Feedback:
    """Exercise: output of query ``i`` is row ``i`` of the weights times the values,
    ``y_i = sum_j a_ij v_j``.

    Args:
        answer: the learner's output vector.
        weights: the attention weights of one sequence, one row per query.
        v: the value vectors, one row per token.
        i: the query.
        x: the token vectors, where the lab has them (to name a mix of the inputs).

    Shape:
        weights: (T, T), v: (T, d), x: (T, d); answer: (d,)
    """
    weights, v = weights.detach().cpu(), v.detach().cpu()
    T = weights.size(-1)
    expected = weights[i] @ v  # (T,) @ (T, d) -> (d,)
    mistakes = {
        "column i of the weights (who attends to token i), not row i (whom token i attends to)":
            weights[:, i] @ v,
    }
    if x is not None:
        mistakes["a mix of the inputs x instead of the values v"] = weights[i] @ x.detach().cpu()
    mistakes.update({
        "the value vector of token i alone, without the weights": v[i],
        "an unweighted average of every value vector": v.mean(dim=0),
        "the sum over the keys before token i only (j < i): key i is visible to query i too, "
        "so sum over j <= i": weights[i, :i] @ v[:i],
        "the weighted value vectors a_ij v_j, one row per key, not yet added: sum them over "
        "the keys (dim 0), or write the sum as weights[i] @ v": weights[i, :, None] * v,
        "a sum over the features instead of over the keys, shape (T,): y_i is a vector of width "
        "d, the sum of the T vectors a_ij v_j": (weights[i, :, None] * v).sum(dim=-1),
        "every output at once (the whole A V, shape (T, d)): keep row i only": weights @ v,
    })
    if i + 1 < T:
        mistakes["row i + 1: indices start at 0, so token i is row i"] = weights[i + 1] @ v
    if i >= 1:
        mistakes["row i - 1: token i is row i of the weights"] = weights[i - 1] @ v
    return check_tensor(answer, expected, mistakes, name=f"output row {i}")


# The exercise as a function, for grading on inputs the learner never saw (scripts/grading).


def _causal_weights(g: torch.Generator, T: int, scale: float = 1.0,
                    padded: int | None = None) -> torch.Tensor:
    """(T, T) float64 weights of a causal softmax over random scores; key ``padded`` (>= 1),
    if given, is blocked for every query, as padding is."""
    s = scale * torch.randn(T, T, generator=g, dtype=torch.float64)
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    if padded is not None:
        blocked[:, padded] = True  # every row still sees key 0
    return torch.softmax(s.masked_fill(blocked, float("-inf")), dim=-1)


def _output_row_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # i = 0: y_0 = v_0; T = 1; the last token; another width; peaked rows; large values.
    for T, d, i, scale, spread, padded in ((1, 3, 0, 1.0, 1.0, None), (6, 8, 0, 1.0, 1.0, None),
                                           (7, 5, 6, 1.0, 1.0, None), (9, 16, 4, 5.0, 1.0, 1),
                                           (12, 2, 7, 1.0, 100.0, 3)):
        w = _causal_weights(g, T, scale, padded)
        v = spread * torch.randn(T, d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((w.clone(), v.clone(), i), (w, v, i),
                                f"weights of shape ({T}, {T}), values ({T}, {d}), i = {i}"))
    return cases


GRADED = {
    # The module and the library's step 6 compute the output for the learner.
    "check_output_row": FunctionExercise("output_row", check_output_row, _output_row_cases,
                                         forbidden=("weighted_sum", "attend", "attn",
                                                    "Attention")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
