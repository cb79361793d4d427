"""Checks for the lab "The cost of attention", and the measuring tools of Part III's labs."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _check_count(answer, right: int, mistakes: dict[str, int], name: str) -> Feedback:
    """An exact count (bytes, FLOPs), compared in float64, which holds every such count up to
    2**53 exactly; a tensor answer must hold one number."""
    if isinstance(answer, torch.Tensor) and answer.numel() != 1:
        return Feedback(False, f"Not yet: {name} should be one number, got a tensor of shape "
                               f"{tuple(answer.shape)}.")
    if isinstance(answer, torch.Tensor):
        answer = answer.reshape(())
    if isinstance(answer, (tuple, list)):
        return Feedback(False, f"Not yet: {name} should be one number, got a "
                               f"{type(answer).__name__} of {len(answer)} items.")
    number = lambda v: torch.tensor(float(v), dtype=torch.float64)  # noqa: E731
    return check_tensor(answer, number(right), {k: number(v) for k, v in mistakes.items()},
                        name=name, atol=0.0, rtol=1e-12)


def check_score_bytes(answer, B: int, h: int, T: int, bytes_per_number: int) -> Feedback:
    """Exercise: bytes of the multi-head scores, shape (B, h, T, T): B·h·T²·bytes_per_number.

    Shape:
        answer: a number
    """
    right = B * h * T * T * bytes_per_number
    mistakes = {
        "the scores of one head: each of the h heads has its own (T, T) matrix, so the bytes "
        "grow with h (the FLOPs do not, because the heads split d, not T)":
            B * T * T * bytes_per_number,
        "the bytes divided among the heads: the heads split the width d, but each head's "
        "(T, T) matrix is whole": B * T * T * bytes_per_number // h,
        "the bytes of one sequence: you left out the batch B": h * T * T * bytes_per_number,
        "a count of numbers, not bytes (multiply by the bytes per number)": B * h * T * T,
        "float32's 4 bytes per number: use bytes_per_number (2 for float16 and bfloat16)":
            B * h * T * T * 4,
        "bits, not bytes (a byte is 8 bits)": 8 * right,
        "only the lower triangle: the explicit module stores the whole square":
            B * h * T * (T + 1) // 2 * bytes_per_number,
    }
    return _check_count(answer, right, mistakes, "the bytes")


def check_score_flops(answer, B: int, T: int, d: int) -> Feedback:
    """Exercise: FLOPs of Q Kᵀ when only the pairs a query may see are computed (key j at or
    before query i, the diagonal included): B·T(T+1)/2 dot products of 2·d FLOPs, B·T·(T+1)·d.

    Shape:
        answer: a number
    """
    right = B * T * (T + 1) * d
    mistakes = {
        "the whole square, 2·B·T²·d, as the explicit module computes it: count only the pairs "
        "j <= i, T(T+1)/2 per sequence": 2 * B * T * T * d,
        "T²/2 pairs per sequence, the half square (or the whole square's multiplications "
        "only): the pairs j <= i are T(T+1)/2, the diagonal's T included, 2·d FLOPs each":
            B * T * T * d,
        "the pairs j < i: the diagonal is visible too (query i sees its own key), "
        "T(T+1)/2 pairs": B * T * (T - 1) * d,
        "multiplications only: each term also has an addition, so count 2 FLOPs":
            B * T * (T + 1) // 2 * d,
        "one sequence only: you left out the batch B": T * (T + 1) * d,
        "both products, Q Kᵀ and A V: the exercise asks for Q Kᵀ alone": 2 * B * T * (T + 1) * d,
        "the projections' cost 2·B·T·d², not the scores'": 2 * B * T * d * d,
    }
    return _check_count(answer, right, mistakes, "the FLOPs")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _bytes_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase(c, c, f"B = {c[0]}, h = {c[1]}, T = {c[2]}, bytes_per_number = {c[3]}")
            for c in ((1, 1, 1, 4), (2, 8, 1000, 2), (3, 1, 7, 8), (1, 12, 4096, 1),
                      (4, 32, 8192, 2))]


def _flops_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase(c, c, f"B = {c[0]}, T = {c[1]}, d = {c[2]}")
            for c in ((1, 1, 1), (2, 7, 3), (3, 5, 16), (4, 1000, 64), (1, 8191, 128))]


GRADED = {
    # The lab's own drafts count the one-head, whole-square case: the exercises ask for another.
    "check_score_bytes": FunctionExercise("score_bytes", check_score_bytes, _bytes_cases,
                                          forbidden=("score_bytes_v1", "LiveTensorBytes")),
    "check_score_flops": FunctionExercise("score_flops", check_score_flops, _flops_cases,
                                          forbidden=("score_flops_v1", "product_flops",
                                                     "projection_flops")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())


# The measuring tools live in attnbook.lab.measure; re-exported here for the labs of Part III.
from ..lab.measure import (  # noqa: E402, F401
    LiveTensorBytes,
    best_time,
    compare,
    conditions,
    fresh_pages,
    keep_freed_memory,
)
