"""Checkers of the lab "Generating with a KV cache": right answers pass on every hidden case,
each typical mistake is named, and the practice checks apply the grade's rules."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook import Attention
from attnbook.exercises import hidden_cases
from attnbook.exercises.kv import GRADED, check_cache_bytes, check_decode_step
from attnbook.kv_cache import KVCache, cached_attention, kv_cache_bytes


def new_token_outputs(q_new, K_cache, V_cache):
    """The lab's solution: t new queries over L keys, the causal triangle bottom-right."""
    t, L = q_new.size(0), K_cache.size(0)
    scores = q_new @ K_cache.T / q_new.size(-1) ** 0.5
    later = torch.ones(t, L, dtype=torch.bool).triu(diagonal=L - t + 1)
    return torch.softmax(scores.masked_fill(later, float("-inf")), dim=-1) @ V_cache


def sdpa_outputs(q_new, K_cache, V_cache):
    """Another right answer: SDPA with the bottom-right mask (True = may attend)."""
    t, L = q_new.size(0), K_cache.size(0)
    allowed = torch.ones(t, L, dtype=torch.bool).tril(diagonal=L - t)
    return torch.nn.functional.scaled_dot_product_attention(q_new, K_cache, V_cache,
                                                            attn_mask=allowed)


def cache_bytes(B, T, d, n_layers, window, bytes_per_number):
    return 2 * n_layers * B * min(T, window) * d * bytes_per_number


@pytest.mark.parametrize("seed", [0, 1, 7, 2024])
def test_right_answers_pass_every_hidden_case(seed):
    for name, solve in (("check_decode_step", new_token_outputs),
                        ("check_decode_step", sdpa_outputs),
                        ("check_cache_bytes", cache_bytes)):
        spec = GRADED[name]
        for case in hidden_cases(spec, seed):
            fb = spec.check(solve(*case.call), *case.check_args)
            assert fb.ok, (name, case.label, fb.message)


def test_the_checker_agrees_with_the_library_cache():
    """The right answer is what cached_attention computes for a chunk of 3 new tokens after 4."""
    torch.manual_seed(0)
    m = Attention(4, 16).double()
    x = torch.randn(1, 7, 4, dtype=torch.float64)
    cache = KVCache.for_module(m, batch=1)
    cached_attention(m, x[:, :4], cache)
    with torch.no_grad():
        out = cached_attention(m, x[:, 4:], cache)[0]  # (3, d): outputs of the new tokens
        q, k, v = m.query(x)[0, 4:], m.key(x)[0], m.value(x)[0]
    assert check_decode_step(out, q, k, v).ok
    assert torch.allclose(new_token_outputs(q, k, v), out)


@pytest.fixture
def chunk():
    torch.manual_seed(2)
    return (torch.randn(3, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64),
            torch.randn(7, 4, dtype=torch.float64))


def _masked(q, K, V, blocked, scale=2.0, fill=float("-inf")):
    s = q @ K.T / scale
    if blocked is not None:
        s = s.masked_fill(blocked, fill)
    return torch.softmax(s, -1) @ V


ONES = torch.ones(3, 7, dtype=torch.bool)


@pytest.mark.parametrize("make, phrase", [
    (lambda q, K, V: _masked(q, K, V, ONES.triu(1)), "is_causal=True"),
    (lambda q, K, V: _masked(q, K, V, None), "no mask"),
    (lambda q, K, V: _masked(q, K, V, ONES.triu(4)), "blocks each new token from its own key"),
    (lambda q, K, V: _masked(q, K, V, ONES.triu(6)), "sees the next new token"),
    (lambda q, K, V: _masked(q, K, V, ONES.triu(5), scale=1.0), "not divided by sqrt(d)"),
    (lambda q, K, V: _masked(q, K, V, ONES.triu(5), scale=4.0), "divided by d, not sqrt(d)"),
    (lambda q, K, V: _masked(q, K, V, ONES.triu(5), fill=0.0), "filled with 0"),
    (lambda q, K, V: _masked(q, K[-3:], V[-3:], ONES[:, :3].triu(1)), "new tokens' own keys"),
    (lambda q, K, V: _masked(q, K[:4], V[:4], None), "cached keys only"),
    (lambda q, K, V: _masked(q, K, K, ONES.triu(5)), "keys mixed"),
    (lambda q, K, V: (~ONES.triu(5)).double() / (~ONES.triu(5)).sum(-1, keepdim=True) @ V,
     "unweighted average"),
    (lambda q, K, V: torch.softmax((q @ K.T / 2).masked_fill(ONES.triu(5), float("-inf")), -1),
     "attention weights"),
])
def test_decode_step_mistakes_are_named(chunk, make, phrase):
    fb = check_decode_step(make(*chunk), *chunk)
    assert not fb.ok and phrase in fb.message, fb.message


@pytest.mark.parametrize("answer, phrase", [
    (None, "still empty"), (..., "still empty"), ([1.0, 2.0], "shape"),
    (torch.zeros(3, 5), "shape"), ("abc", "should be a tensor"),
])
def test_decode_step_bad_input_is_told_not_raised(chunk, answer, phrase):
    fb = check_decode_step(answer, *chunk)
    assert not fb.ok and phrase in fb.message, fb.message
    pair = torch.max(_masked(*chunk, ONES.triu(5)), dim=-1)  # a (values, indices) pair
    assert not check_decode_step(pair, *chunk).ok


def test_decode_step_float32_answer_passes(chunk):
    assert check_decode_step(new_token_outputs(*chunk).float(), *chunk).ok


B, T, d, LAYERS, W, NB = 3, 512, 64, 8, 128, 4


def test_cache_bytes_right_answer_and_the_library():
    right = cache_bytes(B, T, d, LAYERS, W, NB)
    assert right == kv_cache_bytes(LAYERS, B, 1, W, d, NB)
    assert check_cache_bytes(right, B, T, d, LAYERS, W, NB).ok
    assert check_cache_bytes(float(right), B, T, d, LAYERS, W, NB).ok
    assert check_cache_bytes(torch.tensor(right), B, T, d, LAYERS, W, NB).ok
    # a cache that has seen fewer tokens than its window holds them all
    assert check_cache_bytes(cache_bytes(2, 10, 8, 1, 16, 2), 2, 10, 8, 1, 16, 2).ok


@pytest.mark.parametrize("answer, phrase", [
    (2 * LAYERS * B * T * d * NB, "all T tokens"),
    (LAYERS * B * W * d * NB, "keys only"),
    (2 * B * W * d * NB, "one layer only"),
    (2 * LAYERS * B * W * d, "count of numbers"),
    (3 * LAYERS * B * W * d * NB, "old queries"),
    (2 * LAYERS * W * d * NB, "batch B"),
    (2 * LAYERS * B * (W + 1) * d * NB, "one token too wide"),
    (None, "still empty"),
    ("786432", "should be a tensor"),
])
def test_cache_bytes_mistakes_are_named(answer, phrase):
    fb = check_cache_bytes(answer, B, T, d, LAYERS, W, NB)
    assert not fb.ok and phrase in fb.message, fb.message


def test_cache_bytes_window_counted_before_it_fills():
    """T < window: the cache holds T tokens, not window of them."""
    fb = check_cache_bytes(2 * 1 * 2 * 16 * 8 * 2, 2, 10, 8, 1, 16, 2)
    assert not fb.ok and "fewer have arrived" in fb.message, fb.message


def test_practice_checks_refuse_the_librarys_helpers():
    """Issue 31: in the notebook the check applies the grade's method limits."""
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from torch.nn.functional import scaled_dot_product_attention\n"
         "from attnbook.kv_cache import kv_cache_bytes\n"
         "from attnbook.exercises.kv import check_decode_step, check_cache_bytes\n"
         "def new_token_outputs(q, K, V):\n"
         "    t, L = q.size(0), K.size(0)\n"
         "    ok = torch.ones(t, L, dtype=torch.bool).tril(L - t)\n"
         "    return scaled_dot_product_attention(q, K, V, attn_mask=ok)\n"
         "def cache_bytes(B, T, d, n_layers, window, bytes_per_number):\n"
         "    return kv_cache_bytes(n_layers, B, 1, min(T, window), d, bytes_per_number)\n"
         "q, K, V = (torch.randn(n, 4, dtype=torch.float64) for n in (3, 7, 7))\n"
         "first = check_decode_step(new_token_outputs(q, K, V), q, K, V)\n"
         "second = check_cache_bytes(cache_bytes(3, 512, 64, 8, 128, 4), 3, 512, 64, 8, 128, 4)\n",
         ns)
    assert ns["first"].message.startswith("Right values, but new_token_outputs uses "
                                          "scaled_dot_product_attention"), ns["first"].message
    assert ns["second"].message.startswith("Right values, but cache_bytes uses kv_cache_bytes"), \
        ns["second"].message


def test_answers_fixed_to_the_labs_input_fail_the_second_input():
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.kv import check_decode_step, check_cache_bytes\n"
         "def new_token_outputs(q, K, V):\n"
         "    s = (q @ K.T / 2).masked_fill(torch.ones(3, 7, dtype=torch.bool).triu(5), "
         "float('-inf'))\n"
         "    return torch.softmax(s, -1) @ V\n"
         "def cache_bytes(B, T, d, n_layers, window, bytes_per_number):\n"
         "    return 1572864\n"
         "q, K, V = (torch.randn(n, 4, dtype=torch.float64) for n in (3, 7, 7))\n"
         "first = check_decode_step(new_token_outputs(q, K, V), q, K, V)\n"
         "second = check_cache_bytes(cache_bytes(3, 512, 64, 8, 128, 4), 3, 512, 64, 8, 128, 4)\n",
         ns)
    for verdict in (ns["first"], ns["second"]):
        assert verdict.message.startswith("Right values on the lab's input, but not on a "
                                          "second input"), verdict.message


def test_one_new_token_is_the_plain_decoding_step():
    """t = 1: the chunk is one generated token, which sees every key (no mask needed)."""
    torch.manual_seed(3)
    q, K, V = torch.randn(1, 8, dtype=torch.float64), torch.randn(5, 8), torch.randn(5, 8)
    K, V = K.double(), V.double()
    plain = torch.softmax(K @ q[0] / math.sqrt(8), -1) @ V
    assert check_decode_step(plain[None], q, K, V).ok
