"""Options current models need: chosen ALiBi slopes (and, below, partial rotary, rope types)."""

from __future__ import annotations

import pytest
import torch

from attnbook import KVCache, MultiHeadAttention, TinyConfig, TinyModel
from attnbook.kv_cache import cached_attention
from attnbook.positions import alibi_bias_from_positions, alibi_slopes

F64 = torch.float64


def test_alibi_slopes_change_the_bias_and_default_is_the_paper_rule():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 16, 2, position="alibi").double()
    assert m.alibi_slopes is None
    x = torch.randn(1, 6, 8, dtype=F64)
    q = torch.zeros(1, 2, 6, 4, dtype=F64)
    p = torch.arange(6)
    paper = alibi_bias_from_positions(alibi_slopes(2, F64), p, p)
    torch.testing.assert_close(m.alibi(p, p, q), paper)
    before = m(x)
    m2 = MultiHeadAttention(8, 16, 2, position="alibi", alibi_slopes=(2, 1)).double()
    m2.load_state_dict(m.state_dict())
    assert m2.alibi_slopes == (2.0, 1.0)
    assert set(m2.state_dict()) == set(m.state_dict())  # a plain attribute, not a buffer
    bias = m2.alibi(p, p, q)  # (h, T, T)
    assert bias[0, 5, 0] == -10 and bias[1, 5, 0] == -5
    assert not torch.allclose(m2(x), before)
    m2.alibi_slopes = None  # back to the paper's rule: the same module as m
    torch.testing.assert_close(m2(x), before)


def test_alibi_slopes_fused_and_explicit_agree():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 16, 2, position="alibi", alibi_slopes=torch.tensor([0.5, 3.0]),
                           fused=True).double()
    x = torch.randn(2, 7, 8, dtype=F64)
    out, _ = m(x, return_weights=True)  # the explicit path
    torch.testing.assert_close(m(x), out, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("bad", [(1.0,), (1.0, 2.0, 3.0), (1.0, 0.0), (1.0, -2.0),
                                 (1.0, float("inf")), (1.0, float("nan")), (True, 1.0), "ab",
                                 torch.ones(2, 1)])
def test_wrong_alibi_slopes_are_refused_naming_h(bad):
    with pytest.raises(ValueError, match="h = 2"):
        MultiHeadAttention(8, 16, 2, position="alibi", alibi_slopes=bad)
    with pytest.raises(ValueError, match="h = 2"):
        TinyConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2, position="alibi",
                   alibi_slopes=bad)


def test_alibi_slopes_changed_later_are_checked():
    m = MultiHeadAttention(8, 16, 2, position="alibi")
    m.alibi_slopes = (1.0,)  # one slope for two heads would broadcast silently
    with pytest.raises(ValueError, match="h = 2"):
        m(torch.randn(1, 3, 8))


@pytest.mark.parametrize("kind", ["multi", "gqa"])
def test_cached_decoding_matches_full_forward_with_custom_slopes(kind):
    torch.manual_seed(1)
    kv = 2 if kind == "gqa" else None
    m = MultiHeadAttention(8, 16, 4, n_kv_heads=kv, position="alibi",
                           alibi_slopes=(2.0, 1.0, 0.5, 0.25)).double()
    x = torch.randn(2, 9, 8, dtype=F64)
    full = m(x)
    cache = KVCache.for_module(m, 2)
    got = torch.cat([cached_attention(m, x[:, a:b], cache)
                     for a, b in ((0, 4), (4, 6), (6, 7), (7, 8), (8, 9))], dim=1)
    torch.testing.assert_close(got, full, rtol=1e-10, atol=1e-10)


def test_tiny_config_passes_slopes_to_every_block():
    cfg = TinyConfig(vocab_size=7, context_length=12, d_model=8, n_heads=2, position="alibi",
                     alibi_slopes=[2, 1])
    assert cfg.alibi_slopes == (2.0, 1.0)
    torch.manual_seed(0)
    model = TinyModel(cfg)
    assert all(b.attn.alibi_slopes == (2.0, 1.0) for b in model.blocks)
    torch.manual_seed(0)
    plain = TinyModel(TinyConfig(vocab_size=7, context_length=12, d_model=8, n_heads=2,
                                 position="alibi"))
    assert set(plain.state_dict()) == set(model.state_dict())
    idx = torch.randint(0, 7, (1, 10))
    assert not torch.allclose(model(idx), plain(idx))
    torch.manual_seed(3)
    a = model.generate(idx[:, :3], 6, use_cache=True)
    torch.manual_seed(3)
    b = model.generate(idx[:, :3], 6, use_cache=False)
    assert torch.equal(a, b)
