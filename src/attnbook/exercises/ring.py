"""Checks for the lab "Ring attention"."""

from __future__ import annotations

import torch

from ..online import _finite
from ..ring import visible_scores
from . import Feedback, check_number, check_tensor


def check_source_rank(answer, rank: int, step: int, world: int) -> Feedback:
    """Exercise: whose key/value shard does ``rank`` hold at ``step`` (step 0: its own)?"""
    mistakes = {
        "the ring turning the wrong way: shards go to rank + 1, so they come from rank - 1":
            (rank + step) % world,
        "rank - step without wrapping around the ring (take it modulo the world size)":
            rank - step,
        "an off-by-one: at step 0 a rank works on its own shard": (rank - step - 1) % world,
    }
    mistakes = {k: v for k, v in mistakes.items() if v != (rank - step) % world}
    return check_number(answer, (rank - step) % world, mistakes, name="the source rank")


def merge_steps(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """The right output from each step's normalised output and log-sum-exp (empty rows: 0)."""
    m = lses.amax(dim=0)  # (..., 1) the largest log-sum-exp of each row
    w = torch.exp(lses - _finite(m))  # (P, ..., 1) each step's share, 0 for an empty step
    total = w.sum(dim=0)
    return (w * outs).sum(dim=0) / total.masked_fill(total == 0, 1.0)


def check_ring_output(answer, outs: torch.Tensor, lses: torch.Tensor) -> Feedback:
    """Exercise: one rank's output from the P partial results (out_t, lse_t) of its ring steps.

    Shape:
        outs: (P, n, d), lses: (P, n, 1) -> answer: (n, d)
    """
    right = merge_steps(outs, lses)
    mistakes = {
        "the plain average of the steps: each step must weigh by its share exp(lse_t)":
            outs.mean(dim=0),
        "the sum of the steps' outputs: they are averages, weigh them by exp(lse_t) / sum":
            outs.sum(dim=0),
        "weights lse_t instead of exp(lse_t)": (lses * outs).sum(0) / lses.sum(0),
        "only the last step's output: the earlier steps must be merged in": outs[-1],
        "only the own shard (step 0): the other shards were never merged": outs[0],
    }
    if isinstance(answer, torch.Tensor) and answer.shape == right.shape \
            and torch.isnan(answer).any() and not torch.isnan(right).any():
        return Feedback(False, "Not yet: the merged output has NaN on a row that saw no key "
                               "(0 / 0): divide by 1 where the total weight is 0.")
    return check_tensor(answer, right, mistakes, name="the merged output", atol=1e-9, rtol=1e-9)


def check_contiguous_work(answer, T: int, world: int) -> Feedback:
    """Exercise: the scores each rank computes with the contiguous layout (causal).

    Args:
        answer: a list (or tensor) of ``world`` counts, one per rank.
    """
    right = visible_scores(T, world, "contiguous")
    c = T // (2 * world)  # the exercise takes T a multiple of 2P
    mistakes = {
        "the zigzag layout's counts: contiguous ranks hold chunks 2r and 2r + 1":
            torch.tensor(visible_scores(T, world, "zigzag"), dtype=torch.float64),
        "a chunk with itself counted without its diagonal: a query sees its own key (j = i)":
            torch.tensor(right, dtype=torch.float64) - 2 * c,
        "a chunk with itself counted whole: the keys after the query are masked":
            torch.tensor(right, dtype=torch.float64) + c * (c - 1),
        "every rank given T * T / (2P) scores: that is the average, not each rank's share":
            torch.full((world,), T * T / (2 * world), dtype=torch.float64),
    }
    try:
        answer = torch.as_tensor(answer, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        pass
    return check_tensor(answer, torch.tensor(right, dtype=torch.float64), mistakes,
                        name="the scores per rank", atol=0.0, rtol=1e-12)
