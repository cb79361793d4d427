"""Checks for the lab "Online softmax and tiled attention"."""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def merge_stats(m1, l1, m2, l2):
    """The right merge of two partial softmax states (m, l) over disjoint sets of scores."""
    m = torch.maximum(m1, m2)
    shift = m.masked_fill(m == float("-inf"), 0.0)
    return m, l1 * torch.exp(m1 - shift) + l2 * torch.exp(m2 - shift)


def _shift(m: torch.Tensor) -> torch.Tensor:
    """The maximum to shift by, 0 where it is -inf (a row with no visible key so far)."""
    return m.masked_fill(m == float("-inf"), 0.0)


def check_merged_sum(answer, m1: torch.Tensor, l1: torch.Tensor, m2: torch.Tensor,
                     l2: torch.Tensor, m3: torch.Tensor, l3: torch.Tensor) -> Feedback:
    """Exercise: the sum of exponentials l of a whole row from three blocks' (m_b, l_b),
    relative to the row's maximum max(m1, m2, m3); 0 for a row with no visible key.

    Shape:
        m1, l1, m2, l2, m3, l3: (n, 1) -> answer: (n, 1)
    """
    ms, ls = (m1, m2, m3), (l1, l2, l3)
    m = torch.maximum(torch.maximum(m1, m2), m3)
    shift = _shift(m)
    right = sum(l_b * torch.exp(m_b - shift) for m_b, l_b in zip(ms, ls))
    m12, l12 = merge_stats(m1, l1, m2, l2)
    mistakes = {
        "l1 + l2 + l3: each sum must first be rescaled to the common maximum": l1 + l2 + l3,
        "a rescale by exp(m - m_b) instead of exp(m_b - m) (the sign is flipped)":
            sum(l_b * torch.exp(shift - m_b) for m_b, l_b in zip(ms, ls)),
        "the first two merged (relative to max(m1, m2)), then l3 added as it is: both "
        "partial sums must be rescaled to the maximum of all three, m = max(m12, m3)":
            l12 + l3,
        "the first two merged, but the third left out": l12,
        "the sum relative to 0, exp(m1) l1 + exp(m2) l2 + exp(m3) l3, not to the maximum":
            sum(l_b * torch.exp(m_b) for m_b, l_b in zip(ms, ls)),
    }
    for b in range(3):  # one block's sum left as it is, the other two rescaled
        mistakes[f"block {b + 1}'s sum not rescaled: every l_b needs its exp(m_b - m)"] = sum(
            l_b if c == b else l_b * torch.exp(m_b - shift)
            for c, (m_b, l_b) in enumerate(zip(ms, ls)))
    feedback = check_tensor(answer, right, mistakes, name="the merged sum l")
    try:
        a = torch.as_tensor(answer).detach().cpu()
    except (TypeError, ValueError, RuntimeError):
        return feedback
    if not feedback.ok and "looks like" not in feedback.message:
        for mistake, wrong in mistakes.items():  # a mistake that gives NaN on an empty block
            if a.shape == wrong.shape and torch.allclose(a.double(), wrong.double(), atol=1e-4,
                                                         rtol=1e-4, equal_nan=True):
                # (Concatenated, not an f-string: the course guide lists the mistakes above.)
                return Feedback(False, "Not yet: the merged sum l looks like " + mistake + ".")
    empty = (m == float("-inf")).cpu()
    if (not feedback.ok and a.shape == right.shape and empty.any()
            and torch.isnan(a[empty]).all() and not torch.isnan(a[~empty]).any()):
        return Feedback(False, "Not yet: NaN in the rows where every block is empty (all three "
                               "m_b are -inf): exp(-inf - (-inf)) is NaN. Shift by 0 where the "
                               "maximum is -inf, as the library does; the sum of such a row "
                               "is 0.")
    return feedback


def check_merged_output(answer, o1: torch.Tensor, m1: torch.Tensor, l1: torch.Tensor,
                        o2: torch.Tensor, m2: torch.Tensor, l2: torch.Tensor) -> Feedback:
    """Exercise: the output of attention over two key blocks from each block's normalised output.

    Shape:
        o1, o2: (n, d); m1, l1, m2, l2: (n, 1) -> answer: (n, d)
    """
    m, l = merge_stats(m1, l1, m2, l2)
    w1, w2 = l1 * torch.exp(m1 - m), l2 * torch.exp(m2 - m)  # each block's share of the mass
    right = (w1 * o1 + w2 * o2) / l
    mistakes = {
        "the plain average (o1 + o2) / 2: blocks carry different amounts of weight":
            (o1 + o2) / 2,
        "o1 + o2: the two outputs are averages, not sums": o1 + o2,
        "weights l1 and l2 without rescaling to the common maximum":
            (l1 * o1 + l2 * o2) / (l1 + l2),
        "the unnormalised mix: divide by the merged sum l": w1 * o1 + w2 * o2,
        "the ℓ factors left out: o1 and o2 are each already divided by their own ℓ, so a "
        "block's weight is ℓ_b exp(m_b - m), not exp(m_b - m) alone":
            (torch.exp(m1 - m) * o1 + torch.exp(m2 - m) * o2)
            / (torch.exp(m1 - m) + torch.exp(m2 - m)),
        "the ℓ factors left out of the numerator (o_b exp(m_b - m), divided by l): o1 and o2 "
        "are already divided by their own ℓ, so multiply each by its ℓ_b again":
            (torch.exp(m1 - m) * o1 + torch.exp(m2 - m) * o2) / l,
    }
    return check_tensor(answer, right, mistakes, name="the merged output")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _blocks(g: torch.Generator, n: int, sizes: tuple[int, ...], scale: float):
    """Scores (n, sum(sizes)) and each block's (m, l, normalised output) with random values."""
    s = scale * torch.randn(n, sum(sizes), generator=g, dtype=torch.float64)
    v = torch.randn(sum(sizes), 3, generator=g, dtype=torch.float64)
    parts, start = [], 0
    for size in sizes:
        blk = slice(start, start + size)
        m = s[:, blk].amax(-1, keepdim=True)
        e = (s[:, blk] - m).exp()
        parts.append((m, e.sum(-1, keepdim=True), (e / e.sum(-1, keepdim=True)) @ v[blk]))
        start += size
    return parts


def _empty(m: torch.Tensor, l: torch.Tensor, rows) -> tuple[torch.Tensor, torch.Tensor]:
    """Make ``rows`` of one block see no key: m = -inf, l = 0."""
    m, l = m.clone(), l.clone()
    m[rows], l[rows] = float("-inf"), 0.0
    return m, l


def _sum_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for n, sizes, scale in ((4, (3, 2, 5), 3.0), (2, (1, 1, 1), 20.0), (5, (4, 4, 4), 1.0)):
        (m1, l1, _), (m2, l2, _), (m3, l3, _) = _blocks(g, n, sizes, scale)
        args = (m1, l1, m2, l2, m3, l3)
        cases.append(HiddenCase(tuple(a.clone() for a in args), args,
                                f"{n} rows, blocks of {sizes[0]}, {sizes[1]} and {sizes[2]} keys"))
    # Masked blocks: row 0 sees nothing in block 2, row 1 nothing at all.
    (m1, l1, _), (m2, l2, _), (m3, l3, _) = _blocks(g, 3, (2, 3, 2), 2.0)
    m1, l1 = _empty(m1, l1, [1])
    m2, l2 = _empty(m2, l2, [0, 1])
    m3, l3 = _empty(m3, l3, [1])
    args = (m1, l1, m2, l2, m3, l3)
    cases.append(HiddenCase(tuple(a.clone() for a in args), args,
                            "3 rows, one with an empty block and one with no visible key"))
    return cases


def _output_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for n, sizes, scale in ((3, (4, 4), 3.0), (2, (1, 6), 10.0), (5, (5, 2), 1.0)):
        (m1, l1, o1), (m2, l2, o2) = _blocks(g, n, sizes, scale)
        args = (o1, m1, l1, o2, m2, l2)
        cases.append(HiddenCase(tuple(a.clone() for a in args), args,
                                f"{n} rows, blocks of {sizes[0]} and {sizes[1]} keys"))
    return cases


_NO_MERGE = ("merge_stats", "merge_partials", "merge_steps", "online_softmax_stats",
             "online_softmax", "tiled_attention")

GRADED = {
    "check_merged_sum": FunctionExercise("merged_sum", check_merged_sum, _sum_cases,
                                         forbidden=_NO_MERGE),
    "check_merged_output": FunctionExercise("merged_output", check_merged_output,
                                            _output_cases, forbidden=_NO_MERGE),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
