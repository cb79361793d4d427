"""Checks for the lab "The cost of attention", and the measuring tools of Part III's labs."""

from __future__ import annotations

from . import Feedback, check_number


def check_score_bytes(answer, B: int, T: int, bytes_per_number: int = 4) -> Feedback:
    """Exercise: bytes of the (B, T, T) score matrix, B·T²·bytes_per_number.

    Shape:
        answer: a number
    """
    right = B * T * T * bytes_per_number
    mistakes = {
        "the bytes of one sequence: you left out the batch B": T * T * bytes_per_number,
        "a count of numbers, not bytes (multiply by the bytes per number)": B * T * T,
        "bits, not bytes (a byte is 8 bits)": 8 * right,
        "only the lower triangle: the explicit module stores the whole square":
            B * T * (T + 1) // 2 * bytes_per_number,
    }
    return check_number(answer, right, mistakes, "the bytes")


def check_score_flops(answer, B: int, T: int, d: int) -> Feedback:
    """Exercise: FLOPs of Q Kᵀ for the full (T, T) matrix, 2·B·T²·d (a multiply and an add).

    Shape:
        answer: a number
    """
    right = 2 * B * T * T * d
    mistakes = {
        "multiplications only: each also has an addition, so count 2 FLOPs": B * T * T * d,
        "one sequence only: you left out the batch B": 2 * T * T * d,
        "the projections' cost 2·B·T·d², not the scores' 2·B·T²·d": 2 * B * T * d * d,
        "the causal half: the explicit module computes the whole square": B * T * T * d,
        "T·d, as if each query met one key": 2 * B * T * d,
    }
    return check_number(answer, right, mistakes, "the FLOPs")


# The measuring tools live in attnbook.measure; re-exported here for the labs of Part III.
from ..measure import (  # noqa: E402, F401
    LiveTensorBytes,
    best_time,
    compare,
    conditions,
    fresh_pages,
    keep_freed_memory,
)
