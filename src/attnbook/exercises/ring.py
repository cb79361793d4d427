"""Checks for the lab "Ring attention": where a shard is at a step, the merge of the ring's
steps, and the causal work per rank of the contiguous layout."""

from __future__ import annotations

import math

import torch

from ..online import _finite
from ..ring import visible_scores
from . import Feedback, FunctionExercise, HiddenCase, check_number, check_tensor, practise


def check_holder_rank(answer, owner: int, step: int, world: int) -> Feedback:
    """Exercise: which rank holds rank ``owner``'s key/value shard at ``step`` (step 0: the owner
    itself)? Shards move from rank r to rank r + 1 after every step, so (owner + step) mod P."""
    right = (owner + step) % world
    mistakes = {
        "the rank whose shard the owner holds, (owner - step) mod P (the table above read "
        "along a row): the shards move to rank + 1, so the owner's shard is step places "
        "further on, at owner + step":
            (owner - step) % world,
        "owner + step without wrapping around the ring: take it modulo the world size P":
            owner + step,
        "owner - step without wrapping around, and the ring turning the wrong way: shards "
        "move to rank + 1, and the rank is taken modulo P":
            owner - step,
        "an off-by-one, (owner + step + 1) mod P: at step 0 the shard is still on its owner":
            (owner + step + 1) % world,
        "an off-by-one, (owner + step - 1) mod P: the shard moves once after every step, so "
        "at step t it has moved t times":
            (owner + step - 1) % world,
        "the owner itself: the shard leaves its owner after step 0 and goes around the ring":
            owner,
    }
    seen = {right}
    kept = {}
    for text, value in mistakes.items():  # a mistake that gives the right number is no mistake
        if value not in seen:
            kept[text] = value
            seen.add(value)
    return check_number(answer, right, kept, name="the holder's rank")


def merge_steps(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """The right output from each step's normalised output and log-sum-exp (empty rows: 0)."""
    m = lses.amax(dim=0)  # (..., 1) the largest log-sum-exp of each row
    w = torch.exp(lses - _finite(m))  # (P, ..., 1) each step's share, 0 for an empty step
    total = w.sum(dim=0)
    return (w * outs).sum(dim=0) / total.masked_fill(total == 0, 1.0)


def check_ring_output(answer, outs: torch.Tensor, lses: torch.Tensor) -> Feedback:
    """Exercise: one rank's output from the P partial results (out_t, lse_t) of its ring steps;
    0 on a row that saw no key at any step.

    Shape:
        outs: (P, n, d), lses: (P, n, 1) -> answer: (n, d)
    """
    outs, lses = outs.detach().cpu(), lses.detach().cpu()
    right = merge_steps(outs, lses)
    shift = _finite(lses.amax(dim=0))
    w = torch.exp(lses - shift)  # (P, n, 1) each step's share, relative to the row's largest
    total = w.sum(dim=0)
    mistakes = {
        "the plain average of the steps: each step must weigh by its share exp(lse_t)":
            outs.mean(dim=0),
        "the sum of the steps' outputs: they are averages, weigh them by exp(lse_t) / sum":
            outs.sum(dim=0),
        "weights lse_t instead of exp(lse_t)":
            (_finite(lses) * outs).sum(0) / _finite(lses).sum(0).masked_fill(
                _finite(lses).sum(0) == 0, 1.0),
        "the weighted sum not divided by the total weight: sum_t exp(lse_t - m) out_t must be "
        "divided by sum_t exp(lse_t - m)":
            (w * outs).sum(dim=0),
        "weights normalised over the queries (dim 1), not over the steps (dim 0): each query "
        "weighs its own P steps":
            (torch.softmax(lses, dim=1).nan_to_num(0.0) * outs).sum(dim=0),
        "exp(lse_t) without subtracting the row's largest lse_t first: it underflows to 0 "
        "(or overflows to inf) when the log-sum-exps are far from 0, as they are for large "
        "scores. Shift by each row's max lse_t, as the online softmax does":
            (torch.exp(lses) * outs).sum(0) / torch.exp(lses).sum(0).masked_fill(
                torch.exp(lses).sum(0) == 0, 1.0),
        "only the last step's output: the earlier steps must be merged in": outs[-1],
        "only the own shard (step 0): the other shards were never merged": outs[0],
    }
    mistakes = {k: v for k, v in mistakes.items()
                if not torch.allclose(v, right, atol=1e-6, rtol=1e-6)}
    if isinstance(answer, (tuple, list)) and len(answer) == 2 \
            and all(isinstance(a, torch.Tensor) for a in answer):
        return Feedback(False, "Not yet: this is a pair of tensors (an output and a "
                               "log-sum-exp?): return the merged output alone, shape "
                               f"{tuple(right.shape)}.")
    if isinstance(answer, torch.Tensor) and answer.shape == right.shape \
            and not torch.isfinite(answer).all() and torch.isfinite(right).all():
        bad = ~torch.isfinite(answer).all(dim=-1, keepdim=True)  # (n, 1) rows with NaN or inf
        empty = total == 0  # (n, 1) rows that saw no key at any step
        if (bad & ~empty).any() and lses[torch.isfinite(lses)].abs().max() > 700:
            return Feedback(False, "Not yet: the merged output has NaN or inf on rows that saw "
                                   "keys: exp(lse_t) overflows for a log-sum-exp this large "
                                   "(float64 overflows past exp(709)). Subtract each row's "
                                   "largest lse_t before exp, as the online softmax does.")
        if bad[empty].all() and not bad[~empty].any():
            return Feedback(False, "Not yet: the merged output has NaN on a row that saw no key "
                                   "(0 / 0): divide by 1 where the total weight is 0, and shift "
                                   "by 0 where every lse_t is -inf.")
    return check_tensor(answer, right, mistakes, name="the merged output", atol=1e-6,
                        rtol=1e-6)


def _chunk_sizes(T: int, world: int) -> list[int]:
    """Real tokens in each of the 2P chunks: c = ceil(T / 2P) each, the padding excluded."""
    c = math.ceil(T / (2 * world))
    return [max(0, min(c, T - a * c)) for a in range(2 * world)]


def check_contiguous_work(answer, T: int, world: int) -> Feedback:
    """Exercise: the causal scores each rank computes with the contiguous layout, for any T: the
    sequence is padded at the end to 2P chunks of c = ceil(T / 2P) tokens, and scores of padded
    tokens are not counted.

    Args:
        answer: a list (or tensor) of ``world`` counts, one per rank.
    """
    right = torch.tensor(visible_scores(T, world, "contiguous"), dtype=torch.float64)
    sizes = _chunk_sizes(T, world)
    c = math.ceil(T / (2 * world))
    own = torch.tensor([sizes[2 * r] + sizes[2 * r + 1] for r in range(world)],
                       dtype=torch.float64)  # each rank's real tokens
    # (the -1 and +1 keep a chunk of one token, whose triangle is its diagonal, apart)
    triangles = torch.tensor([sum(s * (s - 1) // 2 for s in sizes[2 * r:2 * r + 2])
                              for r in range(world)], dtype=torch.float64)
    floor_c = T // (2 * world)
    mistakes = {
        "the zigzag layout's counts (about equal for every rank): contiguous ranks hold "
        "chunks 2r and 2r + 1, so their work grows with r":
            torch.tensor(visible_scores(T, world, "zigzag"), dtype=torch.float64),
        "a chunk with itself counted without its diagonal: a query sees its own key (j = i)":
            right - own,
        "a chunk with itself counted whole: the keys after the query are masked":
            right + triangles,
        "the padded tokens counted: the chunks hold c = ceil(T / 2P) places, but the last "
        "ones hold fewer real tokens (T - a·c for chunk a, at least 0)":
            torch.tensor(visible_scores(2 * world * c, world, "contiguous"),
                         dtype=torch.float64),
        "chunks of floor(T / 2P) tokens: the tokens past the last whole chunk were left out. "
        "Pad instead: c = ceil(T / 2P), the last chunks shorter":
            torch.tensor(visible_scores(2 * world * floor_c, world, "contiguous")
                         if floor_c else [0] * world, dtype=torch.float64),
        "every key counted (no causal mask): a query sees only the keys at or before it":
            torch.tensor(visible_scores(T, world, "contiguous", causal=False),
                         dtype=torch.float64),
        "the ranks in reverse order: rank 0 holds the first chunks, whose queries see the "
        "fewest keys":
            right.flip(0),
        "every rank given the average, T (T + 1) / 2 / P: that is the mean, not each rank's "
        "share":
            torch.full((world,), T * (T + 1) / 2 / world, dtype=torch.float64),
        "every rank given T * T / (2P): that is about the average, not each rank's share":
            torch.full((world,), T * T / (2 * world), dtype=torch.float64),
    }
    mistakes = {k: v for k, v in mistakes.items() if not torch.equal(v, right)}
    try:
        answer = torch.as_tensor(answer, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        pass
    return check_tensor(answer, right, mistakes, name="the scores per rank", atol=0.0,
                        rtol=1e-12)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _holder_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # P = 1: always rank 0; a step that wraps; the last step; a ring far larger than the lab's.
    for owner, step, world in ((0, 0, 1), (2, 3, 4), (5, 1, 6), (3, 6, 7), (0, 0, 5),
                               (12, 9, 16)):
        cases.append(HiddenCase((owner, step, world), (owner, step, world),
                                f"owner = {owner}, step = {step}, P = {world}"))
    return cases


def _ring_steps(g: torch.Generator, P: int, n: int, d: int, keys: int, offset: float = 0.0,
               empty_rows: tuple[int, ...] = (), empty_steps: tuple[tuple[int, int], ...] = ()):
    """Each of P steps' (normalised output, log-sum-exp) of n queries over ``keys`` keys, with
    random scores (plus ``offset``); ``empty_rows`` see no key at any step, ``empty_steps``
    lists (step, row) pairs that see no key of that step's shard.

    Shape:
        -> outs: (P, n, d), lses: (P, n, 1)
    """
    s = torch.randn(P, n, keys, generator=g, dtype=torch.float64) + offset
    v = torch.randn(P, keys, d, generator=g, dtype=torch.float64)
    visible = torch.rand(P, n, keys, generator=g) < 0.7
    visible[..., 0] = True  # at least one key, unless emptied below
    for row in empty_rows:
        visible[:, row] = False
    for step, row in empty_steps:
        visible[step, row] = False
    s = s.masked_fill(~visible, float("-inf"))
    lses = torch.logsumexp(s, dim=-1, keepdim=True)  # (P, n, 1), -inf where nothing is seen
    w = torch.exp(s - _finite(lses))  # (P, n, keys)
    outs = w @ v  # (P, n, d), 0 where nothing is seen
    return outs, lses


def _ring_output_cases(g: torch.Generator) -> list[HiddenCase]:
    specs = [  # (P, n, d, keys, offset, empty rows, empty (step, row) pairs, label)
        (1, 3, 2, 4, 0.0, (), (), "one step (P = 1)"),
        (2, 4, 3, 5, 0.0, (2,), ((0, 1),), "2 steps, a row with no key, a step empty for one row"),
        (5, 3, 4, 3, 2.0, (0,), ((4, 1), (0, 2), (1, 2)), "5 steps, empty rows and steps"),
        (4, 6, 2, 4, 900.0, (), ((3, 5),), "4 steps, log-sum-exps near 900"),
        (3, 1, 5, 6, -900.0, (), (), "3 steps, one query, log-sum-exps near -900"),
    ]
    cases = []
    for P, n, d, keys, offset, rows, steps, label in specs:
        outs, lses = _ring_steps(g, P, n, d, keys, offset, rows, steps)
        cases.append(HiddenCase((outs.clone(), lses.clone()), (outs, lses),
                                f"outs of shape {tuple(outs.shape)}: {label}"))
    return cases


def _work_cases(g: torch.Generator) -> list[HiddenCase]:
    # One token; one rank; T a multiple of 2P; chunks left empty by the padding; odd lengths.
    return [HiddenCase((T, P), (T, P), f"T = {T}, P = {P}")
            for T, P in ((1, 1), (9, 1), (64, 4), (13, 2), (5, 4), (100, 3), (1000, 8))]


_NO_LIBRARY_MERGE = ("merge_steps", "merge_block", "merge_stats", "merge_partials",
                     "fold_shard", "finish_state", "new_state", "simulate_ring")

GRADED = {
    "check_holder_rank": FunctionExercise("holder_rank", check_holder_rank, _holder_cases),
    "check_ring_output": FunctionExercise("merge_ring_steps", check_ring_output,
                                          _ring_output_cases, forbidden=_NO_LIBRARY_MERGE),
    "check_contiguous_work": FunctionExercise("contiguous_work", check_contiguous_work,
                                              _work_cases,
                                              forbidden=("visible_scores", "trace_ring",
                                                         "simulate_ring", "spawn_ring")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
