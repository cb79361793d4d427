"""Checkers of the lab "Generating with a KV cache"."""

import math

import torch

from attnbook.exercises.kv import check_cache_bytes, check_decode_step


def test_decode_step_checker():
    torch.manual_seed(2)
    q, K, V = torch.randn(4), torch.randn(6, 4), torch.randn(6, 4)
    right = torch.softmax(K @ q / 2.0, -1) @ V
    assert check_decode_step(right, q, K, V).ok
    cases = {
        "sqrt(d)": torch.softmax(K @ q, -1) @ V,
        "newest value alone": V[-1],
        "without the new token": torch.softmax(K[:-1] @ q / math.sqrt(4), -1) @ V[:-1],
        "keys mixed": torch.softmax(K @ q / 2.0, -1) @ K,
    }
    for phrase, answer in cases.items():
        fb = check_decode_step(answer, q, K, V)
        assert not fb.ok and phrase in fb.message, fb.message


def test_cache_bytes_checker():
    B, T, d = 3, 512, 64
    assert check_cache_bytes(2 * B * T * d * 4, B, T, d).ok
    for answer, phrase in [(B * T * d * 4, "keys only"), (B * T * T * 4, "scores"),
                           (3 * B * T * d * 4, "old queries"), (2 * T * d * 4, "batch B")]:
        fb = check_cache_bytes(answer, B, T, d)
        assert not fb.ok and phrase in fb.message, fb.message
