"""Checks for the lab "Generating with a KV cache": the outputs of a chunk of new tokens from
the cache, and the bytes a sliding-window cache holds."""

from __future__ import annotations

import math

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_number, check_tensor, practise


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocked: torch.Tensor | None,
            scale: float, fill: float = float("-inf")) -> torch.Tensor:
    """softmax(q k^T / scale, blocked entries filled) v, in float64: (t, d), (L, d) -> (t, d_v)."""
    s = q.double() @ k.double().T / scale
    if blocked is not None:
        s = s.masked_fill(blocked, fill)
    return torch.softmax(s, dim=-1) @ v.double()


def check_decode_step(answer, q_new: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor) -> Feedback:
    """Exercise: the outputs of ``t`` new tokens fed at once (a chunk of the prompt, or one
    generated token when t = 1) from their queries and the cache, whose last ``t`` keys and
    values are the new tokens' own. New query i sits at position L - t + i and sees keys
    0 .. L - t + i: the causal triangle aligned bottom-right.

    Shape:
        q_new: (t, d), k_cache: (L, d), v_cache: (L, d_v) -> answer: (t, d_v)
    """
    q, k, v = (a.detach().cpu() for a in (q_new, k_cache, v_cache))
    t, d = q.shape
    L = k.size(0)
    rows = torch.ones(t, L, dtype=torch.bool)
    blocked = rows.triu(diagonal=L - t + 1)  # key j after new query i's position
    root = math.sqrt(d)
    right = _attend(q, k, v, blocked, root)
    mistakes = {
        "SDPA's is_causal=True, the triangle aligned top-left (new query i sees keys 0 .. i "
        "only): the new tokens come after the L - t cached ones, so query i sees keys "
        "0 .. L - t + i; shift the diagonal by L - t":
            _attend(q, k, v, rows.triu(diagonal=1), root),
        "no mask: with several new tokens, each must not see the new tokens after it "
        "(block key j > L - t + i)":
            _attend(q, k, v, None, root),
        "a mask one diagonal too low: it blocks each new token from its own key (diagonal "
        "L - t + 1 in triu, not L - t)":
            _attend(q, k, v, rows.triu(diagonal=L - t), root),
        "a mask one diagonal too high: each new token sees the next new token (triu with "
        "diagonal L - t + 1, not L - t + 2)":
            _attend(q, k, v, rows.triu(diagonal=L - t + 2), root),
        "scores not divided by sqrt(d)": _attend(q, k, v, blocked, 1.0),
        "scores divided by d, not sqrt(d)": _attend(q, k, v, blocked, float(d)),
        "blocked scores filled with 0, not -inf: exp(0) still gives them weight":
            _attend(q, k, v, blocked, root, fill=0.0),
        "an unweighted average of the values each query may see: weight them by the "
        "softmax of the scores":
            (~blocked).double() / (~blocked).sum(-1, keepdim=True) @ v.double(),
    }
    if t < L:
        mistakes["attention over the new tokens' own keys and values only: the new queries "
                 "also see every cached key (the cache holds L keys, the new tokens last)"] = \
            _attend(q, k[-t:], v[-t:], rows[:, :t].triu(diagonal=1), root)
        mistakes["attention over the cached keys only, without the new tokens' own keys and "
                 "values: they are the last t rows of the cache"] = \
            _attend(q, k[:L - t], v[:L - t], None, root)
    if k.shape == v.shape:
        mistakes["the keys mixed instead of the values: multiply the weights by v_cache"] = \
            _attend(q, k, k, blocked, root)
    weights = torch.softmax((q.double() @ k.double().T / root).masked_fill(
        blocked, float("-inf")), dim=-1)
    mistakes["the attention weights, shape (t, L): multiply them by v_cache"] = weights
    return check_tensor(answer, right, mistakes, name="the output of the new tokens")


def check_cache_bytes(answer, B: int, T: int, d: int, n_layers: int, window: int,
                      bytes_per_number: int) -> Feedback:
    """Exercise: bytes of the keys and values a sliding-window cache holds after ``T`` tokens:
    each of ``n_layers`` layers keeps the last min(T, window) tokens' keys and values,
    2·n_layers·B·min(T, window)·d numbers of ``bytes_per_number`` bytes.

    Shape:
        answer: a number
    """
    kept = min(T, window)
    per = bytes_per_number

    def size(tokens, layers=n_layers, batch=B, parts=2, nbytes=per):
        return parts * layers * batch * tokens * d * nbytes

    right = size(kept)
    mistakes = {
        "a cache of all T tokens: with a sliding window each layer keeps only the last "
        "window tokens' keys and values (min(T, window) of them)": size(T),
        "window tokens even when fewer have arrived: after T < window tokens the cache holds "
        "T of them, so min(T, window)": size(window),
        "one layer only: every layer keeps its own keys and values (times n_layers)":
            size(kept, layers=1),
        "the keys only: the cache holds the values as well (times 2)": size(kept, parts=1),
        "a count of numbers, not bytes: multiply by bytes_per_number": size(kept, nbytes=1),
        "queries, keys and values: old queries are never needed again": size(kept, parts=3),
        "one sequence only: you left out the batch B": size(kept, batch=1),
        "a window one token too wide (window + 1): the window of W keys already includes "
        "the newest token's own": size(min(T, window + 1)),
    }
    return check_number(answer, right, mistakes, name="the byte count")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _decode_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # t = 1: one generated token; t = L: a whole prompt with nothing cached; d_v != d.
    for t, L, d, d_v, scale in ((1, 1, 3, 3, 1.0), (1, 6, 4, 4, 1.0), (3, 3, 2, 2, 1.0),
                                (2, 9, 8, 5, 2.0), (5, 12, 16, 16, 1.0)):
        q = scale * torch.randn(t, d, generator=g, dtype=torch.float64)
        k = torch.randn(L, d, generator=g, dtype=torch.float64)
        v = torch.randn(L, d_v, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((q.clone(), k.clone(), v.clone()), (q, k, v),
                                f"t = {t} new token{'s' * (t > 1)}, L = {L} keys, d = {d}, "
                                f"values of width {d_v}"))
    return cases


def _bytes_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for B, T, d, layers, window, nbytes in ((1, 1, 8, 1, 4, 4), (2, 10, 16, 3, 4, 2),
                                            (4, 3, 64, 2, 8, 4), (8, 4096, 128, 32, 4096, 2),
                                            (5, 1000, 96, 6, 256, 8)):
        args = (B, T, d, layers, window, nbytes)
        cases.append(HiddenCase(args, args, f"B = {B}, T = {T}, d = {d}, {layers} layers, "
                                            f"window {window}, {nbytes} bytes per number"))
    return cases


GRADED = {
    # The library and SDPA would do the masking and the weighted sum: the exercise asks for the
    # bottom-right mask and the attention themselves.
    "check_decode_step": FunctionExercise(
        "new_token_outputs", check_decode_step, _decode_cases,
        forbidden=("scaled_dot_product_attention", "cached_attention", "attend", "decode_step",
                   "causal_mask", "mask", "window_mask", "window_attention",
                   "masked_softmax")),
    "check_cache_bytes": FunctionExercise("cache_bytes", check_cache_bytes, _bytes_cases,
                                          forbidden=("kv_cache_bytes", "nbytes", "KVCache")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
