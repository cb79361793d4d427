"""Checks for the lab "The attention of real models": splitting GPT-NeoX's fused projection.

GPT-NeoX (and Pythia) keep W_q, W_k and W_v in one ``query_key_value`` layer whose rows go head
by head: the d_h rows of head 0's query, then head 0's key, then head 0's value, then head 1's
query, and so on. The reference is computed here from that layout (no call into
``attnbook.convert``), so a grader's pristine copy does not depend on the learner's code.
"""

from __future__ import annotations

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _three(answer):
    """The learner's (W_q, W_k, W_v) stacked into one (3, h * d_h, d) tensor, or a Feedback."""
    if answer is None or answer is Ellipsis:
        return Feedback(False, "Not yet: your split is still empty. Replace the ... with your "
                               "code.")
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        return Feedback(False, "Not yet: return three matrices, (W_q, W_k, W_v), one per "
                               "projection.")
    parts = [torch.as_tensor(p).detach().cpu() for p in answer]
    if len({p.shape for p in parts}) != 1:
        return Feedback(False, "Not yet: W_q, W_k and W_v should have one shape, "
                               f"(n_heads * head_dim, d); got {[tuple(p.shape) for p in parts]}.")
    return torch.stack(parts)


def check_split_qkv(answer, weight: torch.Tensor, n_heads: int, head_dim: int) -> Feedback:
    """Exercise: (W_q, W_k, W_v) from GPT-NeoX's fused ``query_key_value.weight``.

    Shape:
        weight: (3 * n_heads * head_dim, d) -> answer: three (n_heads * head_dim, d) matrices
    """
    given = _three(answer)
    if isinstance(given, Feedback):
        return given
    W = torch.as_tensor(weight).detach().cpu()
    h, d_h, d = n_heads, head_dim, W.size(-1)
    per_head = W.view(h, 3, d_h, d)  # rows: head, then q/k/v, then the head's features
    right = per_head.transpose(0, 1).reshape(3, h * d_h, d)
    blocks = W.view(3, h * d_h, d)  # three blocks of rows, one after the other
    mistakes = {
        "three blocks of rows, one after the other (weight.chunk(3)): that is the layout of "
        "GPT-2's c_attn and of most fused projections, but GPT-NeoX's rows go head by head, "
        "q, k and v of head 0 first": blocks,
        "every third row (a view as (..., 3) with q, k, v interleaved row by row): GPT-NeoX "
        "interleaves whole heads, d_h rows at a time":
            W.view(h, d_h, 3, d).permute(2, 0, 1, 3).reshape(3, h * d_h, d),
        "n_heads and head_dim swapped in the view: the rows are (n_heads, 3, head_dim), heads "
        "outermost": W.view(d_h, 3, h, d).transpose(0, 1).reshape(3, h * d_h, d),
        "the parts in the order (q, v, k); each head's rows are q, then k, then v":
            right[[0, 2, 1]],
        "the parts in the order (k, q, v); each head's rows are q, then k, then v":
            right[[1, 0, 2]],
        "the parts in the order (k, v, q); each head's rows are q, then k, then v":
            right[[1, 2, 0]],
        "the parts in the order (v, q, k); each head's rows are q, then k, then v":
            right[[2, 0, 1]],
        "the parts in the order (v, k, q); each head's rows are q, then k, then v":
            right[[2, 1, 0]],
    }
    return check_tensor(given, right, mistakes, name="your split", atol=0.0, rtol=0.0)


# The exercise as a function, for grading on inputs the learner never saw (scripts/grading).


def _split_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # n_heads != head_dim everywhere but one case, so that a swapped view is caught; d differs
    # from both, so that a transpose is caught.
    for h, d_h, d in ((2, 3, 5), (4, 2, 7), (3, 4, 6), (2, 2, 3), (5, 6, 11)):
        W = torch.randn(3 * h * d_h, d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((W.clone(), h, d_h), (W, h, d_h),
                                f"{h} heads of width {d_h}, d = {d}"))
    return cases


GRADED = {
    # The converter's own split would be the answer.
    "check_split_qkv": FunctionExercise("split_qkv", check_split_qkv, _split_cases,
                                        forbidden=("_split_neox", "from_transformers")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
