"""Checks for the lab "Online softmax and tiled attention"."""

from __future__ import annotations

import torch

from . import Feedback, check_tensor


def merge_stats(m1, l1, m2, l2):
    """The right merge of two partial softmax states (m, l) over disjoint sets of scores."""
    m = torch.maximum(m1, m2)
    shift = m.masked_fill(m == float("-inf"), 0.0)
    return m, l1 * torch.exp(m1 - shift) + l2 * torch.exp(m2 - shift)


def check_merged_sum(answer, m1: torch.Tensor, l1: torch.Tensor, m2: torch.Tensor,
                     l2: torch.Tensor) -> Feedback:
    """Exercise: the merged sum of exponentials l, relative to the merged maximum.

    Shape:
        m1, l1, m2, l2: (n,) -> answer: (n,)
    """
    m, right = merge_stats(m1, l1, m2, l2)
    mistakes = {
        "l1 + l2: each sum must first be rescaled to the common maximum": l1 + l2,
        "a rescale by exp(m - m_i) instead of exp(m_i - m) (the sign is flipped)":
            l1 * torch.exp(m - m1) + l2 * torch.exp(m - m2),
        "only the first sum rescaled": l1 * torch.exp(m1 - m) + l2,
        "only the second sum rescaled": l1 + l2 * torch.exp(m2 - m),
        "the sum relative to 0, exp(m1) l1 + exp(m2) l2, not to the maximum":
            l1 * torch.exp(m1) + l2 * torch.exp(m2),
    }
    return check_tensor(answer, right, mistakes, name="the merged sum l")


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
