"""RoPE and ALiBi with the KV cache and in the tiny model: cached steps equal recomputing."""

from __future__ import annotations

import pytest
import torch

from attnbook import AttentionLayer, KVCache, MultiHeadAttention, TinyConfig, TinyModel
from attnbook.kv_cache import cached_attention, window_attention
from attnbook.positions import alibi_bias_from_positions, alibi_slopes, apply_rope, sinusoidal_table

F64 = torch.float64


def module(kind, position):
    torch.manual_seed(1)
    if kind == "single":
        return AttentionLayer(8, 16, position=position).double()
    if kind == "gqa":
        return MultiHeadAttention(8, 16, 4, n_kv_heads=2, position=position).double()
    return MultiHeadAttention(8, 16, 2, position=position).double()


@pytest.mark.parametrize("kind", ["single", "multi", "gqa"])
@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("padded", [False, True])
def test_cache_equals_recompute(kind, position, padded):
    m = module(kind, position)
    x = torch.randn(2, 11, 8, dtype=F64)
    pm = torch.ones(2, 11, dtype=torch.bool)
    if padded:
        pm[0, :3] = False  # left padding
        pm[1, 5] = False  # and a pad in the middle
    full = m(x, pm if padded else None)
    cache = KVCache.for_module(m, 2)
    outs = []
    for a, b in ((0, 4), (4, 7), (7, 8), (8, 9), (9, 11)):  # prefill, a chunk, single steps
        outs.append(cached_attention(m, x[:, a:b], cache, pm[:, a:b] if padded else None))
    got = torch.cat(outs, dim=1)
    torch.testing.assert_close(got[pm], full[pm], rtol=1e-10, atol=1e-10)
    # positions skip the pads: token 3 of the left-padded row is that sequence's position 0
    if padded:
        assert cache.positions[0, :5].tolist() == [0, 0, 0, 0, 1]
        assert cache.positions[1, 4:8].tolist() == [4, 4, 5, 6]


def test_cache_keeps_keys_rotated():
    m = module("multi", "rope")
    x = torch.randn(1, 5, 8, dtype=F64)
    cache = KVCache.for_module(m, 1)
    cached_attention(m, x, cache)
    k = m.split_heads(m.key(x))  # (1, h, 5, d_h) before rotation
    torch.testing.assert_close(cache.k[:, :, :5], apply_rope(k, torch.arange(5)))


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_sliding_window_cache_uses_absolute_positions(position):
    m = module("gqa", position)
    W, T = 4, 23  # longer than the module's context length 16: the window allows it
    x = torch.randn(2, T, 8, dtype=F64)
    cache = KVCache.for_module(m, 2, window=W)
    outs = [cached_attention(m, x[:, :6], cache)]
    outs += [cached_attention(m, x[:, i:i + 1], cache) for i in range(6, 20)]
    outs.append(cached_attention(m, x[:, 20:], cache))
    got = torch.cat(outs, dim=1)
    q, k, v = m.project_heads(x)
    pos = torch.arange(T)
    bias = None
    if position == "rope":
        q, k = apply_rope(q, pos), apply_rope(k, pos)
    else:
        bias = alibi_bias_from_positions(alibi_slopes(4, F64), pos, pos)  # (h, T, T)
    expected = m.merge(window_attention(q, k, v, W, bias=bias))
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert sorted(cache.positions[0].tolist()) == [19, 20, 21, 22]


@pytest.mark.parametrize("position", ["rope", "alibi", "sinusoidal", "none", "learned"])
def test_generate_gives_the_same_tokens_with_and_without_the_cache(position):
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(11, 24, 16, 2, n_layers=2, position=position))
    prompt = torch.randint(0, 11, (3, 5))
    a = model.generate(prompt, 15, use_cache=True)
    b = model.generate(prompt, 15, use_cache=False)
    assert torch.equal(a, b)
    assert len(set(a[:, 5:].flatten().tolist())) > 1  # not a constant, which would prove little


def test_a_rope_model_generates_past_its_context_with_a_window():
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(11, 8, 16, 2, n_layers=1, position="rope"))
    out = model.generate(torch.randint(0, 11, (1, 3)), 20, window=8)
    assert out.shape == (1, 23)
    learned = TinyModel(TinyConfig(11, 8, 16, 2, n_layers=1))
    with pytest.raises(ValueError, match="context_length=8 .*position vectors"):
        learned.generate(torch.randint(0, 11, (1, 3)), 20, window=8)
    with pytest.raises(ValueError, match="context_length=8 position vectors"):
        learned(torch.zeros(1, 4, dtype=torch.long), positions=torch.arange(6, 10))


def test_config_position_and_the_old_flag():
    assert TinyConfig(5, 8).position == "learned"
    assert TinyConfig(5, 8, positions=True).position == "learned"
    off = TinyConfig(5, 8, positions=False)
    assert off.position == "none" and off.positions is None
    assert TinyModel(off).positions is None
    keys = set(TinyModel(TinyConfig(5, 8, 16, 2)).state_dict())
    assert "positions.weight" in keys
    for scheme in ("rope", "alibi", "sinusoidal", "none"):  # no table, nothing else new
        assert set(TinyModel(TinyConfig(5, 8, 16, 2, position=scheme)).state_dict()) == \
            keys - {"positions.weight"}
    with pytest.raises(ValueError, match="position must be one of"):
        TinyConfig(5, 8, position="rotary")
    assert TinyConfig(5, 8, position="none", positions=True).position == "learned"
    with pytest.raises(ValueError, match="give position='rope' alone"):
        TinyConfig(5, 8, positions=False, position="rope")
    with pytest.raises(ValueError, match="scaling must be None"):
        TinyConfig(5, 8, position="rope", rope_scaling=("linear", 2))
    m = TinyModel(TinyConfig(5, 8, 16, 2, position="rope", rope_scaling=("ntk", 2)))
    assert all(b.attn.position == "rope" and b.attn.rope_scaling == ("ntk", 2) for b in m.blocks)


def test_sinusoidal_model_adds_the_table_and_positions_reach_every_layer():
    torch.manual_seed(0)
    m = TinyModel(TinyConfig(7, 8, 16, 2, n_layers=1, position="sinusoidal"))
    idx = torch.randint(0, 7, (2, 6))
    torch.testing.assert_close(m.embed(idx), m.tokens(idx) + sinusoidal_table(6, 16))
    r = TinyModel(TinyConfig(7, 8, 16, 2, n_layers=2, position="rope"))
    torch.testing.assert_close(r(idx, positions=torch.arange(6) + 100), r(idx), rtol=1e-4,
                               atol=1e-4)  # only distances matter
    assert not torch.allclose(r(idx, positions=torch.arange(6) * 2), r(idx), atol=1e-4)
