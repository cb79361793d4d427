"""Checks for the lab "From one head to many": the heads of a packed query-key-value tensor, the
scores of grouped-query attention, and its parameter count."""

from __future__ import annotations

import math

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_number, check_tensor, practise


def _three_tensors(answer) -> bool:
    return (isinstance(answer, (tuple, list)) and len(answer) == 3
            and all(isinstance(a, torch.Tensor) for a in answer))


def check_split_heads(answer, qkv: torch.Tensor, n_heads: int) -> Feedback:
    """Exercise: cut a packed (B, T, 3d) tensor [Q | K | V] (as ``in_proj_weight`` stacks
    W_q, W_k, W_v) into the queries, keys and values of h heads of contiguous width d_h,
    stacked as (3, B, h, T, d_h).

    Shape:
        qkv: (B, T, 3d); answer: (3, B, h, T, d_h)
    """
    if _three_tensors(answer):
        return Feedback(False, "Not yet: you returned three separate tensors; stack them into "
                               "one (3, B, h, T, d_h) tensor (torch.stack), queries first.")
    qkv = qkv.detach().cpu()
    B, T, width = qkv.shape
    d = width // 3
    h, d_h = n_heads, d // n_heads
    parts = qkv.view(B, T, 3, h, d_h)
    expected = parts.permute(2, 0, 3, 1, 4)
    mistakes = {
        "heads interleaved, as if each head held its own q, k and v side by side (view(B, T, "
        "h, 3, d_h)): the packed tensor is [Q | K | V], all d query features first, so view "
        "it as (B, T, 3, h, d_h)":
            qkv.view(B, T, h, 3, d_h).permute(3, 0, 2, 1, 4),
        "(3, B, T, h, d_h): the head dimension must come before the tokens":
            parts.permute(2, 0, 1, 3, 4),
        "a direct .view(3, B, h, T, d_h) (or reshape), which mixes tokens, heads and parts: "
        "view as (B, T, 3, h, d_h) first, then move the axes (permute)":
            qkv.reshape(3, B, h, T, d_h),
        "heads that take every h-th feature (view(B, T, 3, d_h, h)); each head gets a "
        "contiguous slice of d_h features":
            qkv.view(B, T, 3, d_h, h).permute(2, 0, 4, 1, 3),
        "the packed tensor split into h heads as one, (B, h, T, 3d / h): first cut it into "
        "Q, K and V (d features each), then each of them into h heads":
            qkv.view(B, T, h, 3 * d_h).transpose(1, 2),
        "the queries only: return all three, stacked as (3, B, h, T, d_h)":
            expected[0],
    }
    return check_tensor(answer, expected, mistakes, name="the split tensor")


def check_head_scores(answer, q: torch.Tensor, k: torch.Tensor, n_heads: int,
                      n_kv_heads: int) -> Feedback:
    """Exercise: the scaled scores Q_a K_g^T / sqrt(d_h) of grouped-query attention, before
    masking: query head a uses key head g = a // (h / h_kv), consecutive query heads sharing
    one key head.

    Shape:
        q: (B, T, h·d_h), k: (B, T, h_kv·d_h); answer: (B, h, T, T)
    """
    q, k = q.detach().cpu().double(), k.detach().cpu().double()
    B, T, d = q.shape
    h, h_kv = n_heads, n_kv_heads
    d_h, group = d // h, h // h_kv
    qh = q.view(B, T, h, d_h).transpose(1, 2)  # (B, h, T, d_h)
    kh = k.view(B, T, h_kv, d_h).transpose(1, 2)  # (B, h_kv, T, d_h)
    raw = qh @ kh.repeat_interleave(group, dim=1).transpose(-2, -1)  # (B, h, T, T)
    root = math.sqrt(d_h)
    mistakes = {
        "key heads handed out in turn (repeat, tile or expand on a new first axis: query head "
        "a uses key head a % h_kv): a group is h / h_kv consecutive query heads, so query head "
        "a uses key head a // (h / h_kv) (repeat_interleave)":
            qh @ kh.repeat(1, group, 1, 1).transpose(-2, -1) / root,
        "scores divided by sqrt(d_model); each head's dot products have only d_h terms, "
        "so divide by sqrt(d_h)": raw / math.sqrt(d),
        "unscaled scores: divide by sqrt(d_h)": raw,
        "transposed scores (K Q^T): rows must be queries, columns keys":
            raw.transpose(-2, -1) / root,
    }
    keys_width = ("scores divided by the square root of the keys' width h_kv·d_h; a head's "
                  "dot products have d_h terms, so divide by sqrt(d_h)")
    if h_kv == d_h > 1:  # sqrt(h_kv·d_h) = d_h: one number, two possible slips
        mistakes["scores divided by d_h, or by the square root of the keys' width h_kv·d_h "
                 "(the same number here): divide by sqrt(d_h)"] = raw / d_h
    else:
        mistakes["scores divided by d_h, not sqrt(d_h)"] = raw / d_h
        if h_kv > 1:
            mistakes[keys_width] = raw / math.sqrt(h_kv * d_h)
    return check_tensor(answer, raw / root, mistakes, name="the score tensor")


def check_parameter_count(answer, d_model: int, n_heads: int, n_kv_heads: int) -> Feedback:
    """Exercise: learned parameters of MultiHeadAttention(d_model, ..., n_heads, n_kv_heads=...)
    (no biases): W_q and W_o are d x d, W_k and W_v d x h_kv·d_h."""
    d, h, h_kv = d_model, n_heads, n_kv_heads
    d_h = d // h
    kv = h_kv * d_h  # the width of the keys and of the values
    mistakes = {
        "4 d^2, the count of multi-head attention: with n_kv_heads key/value heads, W_k and "
        "W_v have only n_kv_heads · d_h columns each": 4 * d * d,
        "key/value heads of width d (W_k, W_v of d x n_kv_heads·d): every head, query or "
        "key/value, has width d_h = d / h": 2 * d * d + 2 * d * h_kv * d,
        "no output projection W_o (d x d)": d * d + 2 * d * kv,
        "W_q shrunk as well: the queries keep all h heads (d x d); only the keys and values "
        "are shared": d * d + 3 * d * kv,
        "only one of W_k and W_v shrunk: both the keys and the values have n_kv_heads heads":
            3 * d * d + d * kv,
        "the group size h / h_kv in place of the number of key/value heads h_kv":
            2 * d * d + 2 * d * d_h * (h // h_kv),
        "d_h x d_h slices: a head's slice of a projection is d x d_h (it reads all d input "
        "features), not d_h x d_h": (h + 2 * h_kv) * d_h * d_h + d * d,
    }
    return check_number(answer, 2 * d * d + 2 * d * kv, mistakes, name="the parameter count")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _split_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # h = 1: one head; d_h = 1; T = 1; a width far from the lab's.
    for B, T, d, h in ((1, 1, 4, 1), (2, 5, 6, 3), (1, 4, 8, 8), (3, 2, 12, 2), (2, 7, 32, 4)):
        qkv = torch.randn(B, T, 3 * d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((qkv.clone(), h), (qkv, h),
                                f"qkv of shape ({B}, {T}, {3 * d}), h = {h}"))
    return cases


def _scores_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # h_kv = h: multi-head; h_kv = 1: multi-query; T = 1; other widths.
    for B, T, h, h_kv, d_h in ((1, 1, 2, 1, 3), (2, 5, 4, 4, 2), (1, 6, 6, 2, 4),
                               (2, 3, 8, 1, 2), (1, 9, 8, 4, 8)):
        q = torch.randn(B, T, h * d_h, generator=g, dtype=torch.float64)
        k = torch.randn(B, T, h_kv * d_h, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((q.clone(), k.clone(), h, h_kv), (q, k, h, h_kv),
                                f"T = {T}, h = {h}, h_kv = {h_kv}, d_h = {d_h}"))
    return cases


def _count_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase((d, h, h_kv), (d, h, h_kv), f"d = {d}, h = {h}, h_kv = {h_kv}")
            for d, h, h_kv in ((8, 1, 1), (64, 8, 8), (64, 8, 1), (96, 12, 4), (512, 32, 8),
                               (4, 4, 2))]


GRADED = {
    # The module would split, score and count for the learner: the exercises ask for the view,
    # the grouping and the shapes themselves.
    "check_split_heads": FunctionExercise("split_qkv_heads", check_split_heads, _split_cases,
                                          forbidden=("split_heads", "project_heads",
                                                     "MultiHeadAttention")),
    "check_head_scores": FunctionExercise("gqa_scores", check_head_scores, _scores_cases,
                                          forbidden=("scaled_dot_product_attention",
                                                     "multihead_sdpa", "attend",
                                                     "project_heads", "MultiHeadAttention")),
    "check_parameter_count": FunctionExercise("parameter_count", check_parameter_count,
                                              _count_cases,
                                              forbidden=("parameters", "numel",
                                                         "num_parameters", "n_parameters",
                                                         "MultiHeadAttention")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
