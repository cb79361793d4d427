"""Decoding with a KV cache equals the full forward, token by token."""

from __future__ import annotations

import pytest
import torch
from conftest import random_padding

from attnbook import Attention
from attnbook.kv_cache import KVCache, cached_attention, generate


@pytest.mark.parametrize("prompt", [1, 4, 9])
@pytest.mark.parametrize("side", [None, "left"])
def test_token_by_token_equals_full_forward(prompt, side):
    m = Attention(8, 16).double()
    B, T = 3, 9
    x = torch.randn(B, T, 8, dtype=torch.float64)
    pad = None if side is None else random_padding(B, T, side)
    full = m(x, pad)
    cache = KVCache.for_module(m, B)
    pieces = [cached_attention(m, x[:, :prompt], cache,
                               None if pad is None else pad[:, :prompt])]
    for t in range(prompt, T):
        pieces.append(cached_attention(m, x[:, t : t + 1], cache,
                                       None if pad is None else pad[:, t : t + 1]))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-10, atol=1e-10)
    assert cache.length == T


def test_left_padded_prompt_gives_zero_rows_not_nan():
    m = Attention(4, 8)
    x = torch.randn(1, 3, 4)
    pad = torch.tensor([[False, False, True]])
    cache = KVCache.for_module(m, 1)
    y = cached_attention(m, x, cache, pad)
    assert torch.isfinite(y).all() and (y[0, :2] == 0).all()


def test_generate_with_and_without_cache_agree():
    m = Attention(8, 40).double()
    prompt = torch.randn(2, 5, 8, dtype=torch.float64)
    a = generate(m, prompt, 20)
    b = generate(m, prompt, 20, use_cache=False)
    assert a.shape == (2, 20, 8)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_cache_follows_module_dtype_and_refuses_overflow():
    m = Attention(4, 5).double()
    cache = KVCache.for_module(m, 2)
    assert cache.k.dtype == torch.float64 and cache.capacity == 5
    cached_attention(m, torch.randn(2, 5, 4, dtype=torch.float64), cache)
    with pytest.raises(ValueError, match="holds 5 tokens"):
        cached_attention(m, torch.randn(2, 1, 4, dtype=torch.float64), cache)


def test_step_costs_one_projection_row():
    """A decoding step projects only the new token: the module sees (B, 1, d) inputs."""
    m = Attention(4, 10)
    seen = []
    m.query.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[1]))
    cache = KVCache.for_module(m, 1)
    cached_attention(m, torch.randn(1, 6, 4), cache)
    cached_attention(m, torch.randn(1, 1, 4), cache)
    assert seen == [6, 1]
