"""Checks for the lab "Generating with a KV cache"."""

from __future__ import annotations

import math

import torch

from . import Feedback, check_number, check_tensor


def check_decode_step(answer, q: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor) -> Feedback:
    """Exercise: the output of one new token from its query and the cached keys and values.

    Shape:
        q: (d,), k_cache: (L, d), v_cache: (L, d) with the new token's key and value last
        -> answer: (d,)
    """
    d = q.size(-1)
    s = k_cache @ q / math.sqrt(d)  # (L,)
    right = torch.softmax(s, dim=-1) @ v_cache
    mistakes = {
        "scores not divided by sqrt(d)": torch.softmax(k_cache @ q, -1) @ v_cache,
        "scores divided by d, not sqrt(d)": torch.softmax(k_cache @ q / d, -1) @ v_cache,
        "the newest value alone: the cache holds every earlier one too": v_cache[-1],
        "the cache without the new token's own key and value":
            torch.softmax(s[:-1], -1) @ v_cache[:-1],
        "an unweighted average of the cached values": v_cache.mean(dim=0),
        "the keys mixed instead of the values": torch.softmax(s, -1) @ k_cache,
    }
    return check_tensor(answer, right, mistakes, name="the new token's output")


def check_cache_bytes(answer, B: int, T: int, d: int, bytes_per_number: int = 4) -> Feedback:
    """Exercise: bytes held by a KV cache of T tokens: keys and values, 2·B·T·d numbers.

    Shape:
        answer: a number
    """
    right = 2 * B * T * d * bytes_per_number
    mistakes = {
        "the keys only: the cache holds the values as well": B * T * d * bytes_per_number,
        "a count of numbers, not bytes": 2 * B * T * d,
        "the (T, T) scores: the cache stores keys and values, never scores":
            B * T * T * bytes_per_number,
        "queries, keys and values: old queries are never needed again":
            3 * B * T * d * bytes_per_number,
        "one sequence only: you left out the batch B": 2 * T * d * bytes_per_number,
    }
    return check_number(answer, right, mistakes, name="the bytes")
