"""Position ids on the cached path, mask_mod on MultiHeadAttention, and the refusals of what was
silently wrong (issue 37, section 3)."""

from __future__ import annotations

import pytest
import torch

from attnbook import AttentionLayer, KVCache, MultiHeadAttention, TinyConfig, TinyModel
from attnbook.kv_cache import cached_attention

F64 = torch.float64
CHUNKS = ((0, 4), (4, 7), (7, 8), (8, 9), (9, 11))  # prefill, a chunk, single steps


def module(kind, position, **kw):
    torch.manual_seed(1)
    if kind == "single":
        return AttentionLayer(8, 16, position=position, **kw).double()
    if kind == "gqa":
        return MultiHeadAttention(8, 16, 4, n_kv_heads=2, position=position, **kw).double()
    return MultiHeadAttention(8, 16, 2, position=position, **kw).double()


def packed_ids(B):
    """Position ids that restart per document (a packed row) and do not count real tokens."""
    rows = [[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3], [5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5]]
    return torch.tensor(rows[:B])


def run_cached(m, x, cache, pos, pm=None, chunks=CHUNKS):
    outs = []
    for a, b in chunks:
        p = pos[..., a:b]
        outs.append(cached_attention(m, x[:, a:b], cache, None if pm is None else pm[:, a:b],
                                     positions=p))
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("kind", ["single", "multi", "gqa"])
@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("shape", ["(B, t)", "(t,)"])
def test_cached_positions_equal_full_forward(kind, position, shape):
    m = module(kind, position)
    x = torch.randn(2, 11, 8, dtype=F64)
    pos = packed_ids(2) if shape == "(B, t)" else packed_ids(1)[0]
    full = m(x, positions=pos)
    cache = KVCache.for_module(m, 2)
    got = run_cached(m, x, cache, pos)
    torch.testing.assert_close(got, full, rtol=1e-10, atol=1e-10)
    assert cache.positions[:, :11].tolist() == pos.expand(2, 11).tolist()  # stored
    # the ids matter: the default positions give another result
    assert not torch.allclose(full, m(x), atol=1e-6)


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_cached_positions_with_padding_and_window(position):
    m = module("gqa", position)
    x = torch.randn(2, 11, 8, dtype=F64)
    pm = torch.ones(2, 11, dtype=torch.bool)
    pm[0, :2] = False
    pos = packed_ids(2)
    full = m(x, pm, positions=pos)
    got = run_cached(m, x, KVCache.for_module(m, 2), pos, pm)
    torch.testing.assert_close(got[pm], full[pm], rtol=1e-10, atol=1e-10)
    # a window as wide as the sequence sees what the full cache sees
    got_w = run_cached(m, x, KVCache.for_module(m, 2, window=16), pos, pm)
    torch.testing.assert_close(got_w[pm], full[pm], rtol=1e-10, atol=1e-10)


def test_a_step_without_ids_continues_after_the_last_given_id():
    m = module("multi", "rope")
    x = torch.randn(2, 6, 8, dtype=F64)
    cache = KVCache.for_module(m, 2)
    cached_attention(m, x[:, :5], cache, positions=torch.tensor([3, 4, 0, 1, 2]))
    assert cache.seen.tolist() == [3, 3]
    last = cached_attention(m, x[:, 5:], cache)  # default: id 3
    full = m(x, positions=torch.tensor([3, 4, 0, 1, 2, 3]))
    torch.testing.assert_close(last, full[:, 5:], rtol=1e-10, atol=1e-10)
    # with padding: the last REAL new token's id + 1 (pads do not move it)
    cache = KVCache.for_module(m, 1)
    pm = torch.tensor([[True, True, False]])
    cached_attention(m, x[:1, :3], cache, pm, positions=torch.tensor([7, 8, 0]))
    assert cache.seen.tolist() == [9]


@pytest.mark.parametrize("bad, error, match", [
    (torch.tensor([0.0, 1.0, 2.0]), TypeError, "integers"),
    (torch.tensor([True, False, True]), TypeError, "integers"),
    ([0, 1, 2], TypeError, "torch.Tensor"),
    (torch.arange(4), ValueError, r"\(t,\) = \(3,\)"),
    (torch.zeros(3, 3, dtype=torch.long), ValueError, r"\(B, t\) = \(2, 3\)"),
    (torch.tensor([0, -1, 2]), ValueError, ">= 0"),
])
def test_cached_positions_refused_naming_what_was_expected(bad, error, match):
    m = module("multi", "rope")
    cache = KVCache.for_module(m, 2)
    with pytest.raises(error, match=match):
        cached_attention(m, torch.randn(2, 3, 8, dtype=F64), cache, positions=bad)
    assert cache.length == 0  # refused before anything was stored


@pytest.mark.parametrize("position", ["rope", "alibi", "learned", "sinusoidal"])
def test_tiny_model_steps_with_positions_equal_forward(position):
    torch.manual_seed(0)
    cfg = TinyConfig(vocab_size=11, context_length=16, d_model=8, n_heads=2, n_kv_heads=1,
                     position=position)
    model = TinyModel(cfg).double().eval()
    idx = torch.randint(0, 11, (2, 11))
    pos = packed_ids(2)
    full = model(idx, positions=pos)
    caches = model.new_caches(2)
    got = torch.cat([model.step(idx[:, a:b], caches, positions=pos[:, a:b])
                     for a, b in CHUNKS], dim=1)
    torch.testing.assert_close(got, full, rtol=1e-9, atol=1e-9)


def test_tiny_model_positions_refused():
    model = TinyModel(TinyConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2))
    idx = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=">= 0"):
        model(idx, positions=torch.tensor([0, -1, 1]))
    with pytest.raises(ValueError, match=r"\(T,\) = \(3,\)"):
        model(idx, positions=torch.arange(4))
    with pytest.raises(TypeError, match="integers"):
        model.step(idx, model.new_caches(1), positions=torch.zeros(3))
    with pytest.raises(ValueError, match="context_length=8"):
        model.step(idx, model.new_caches(1), positions=torch.tensor([0, 1, 8]))


# --- mask_mod on MultiHeadAttention.forward ------------------------------------------------

def test_mha_mask_mod_equals_attention_with_one_head():
    from attnbook.masks import sliding_window_mod

    torch.manual_seed(0)
    one = AttentionLayer(8, 16).double()
    mha = MultiHeadAttention(8, 16, 1).double()
    for name in ("query", "key", "value"):
        getattr(mha, name).weight.data.copy_(getattr(one, name).weight)
    mha.out.weight.data.copy_(torch.eye(8, dtype=F64))
    x = torch.randn(2, 9, 8, dtype=F64)
    pm = torch.ones(2, 9, dtype=torch.bool)
    pm[1, :2] = False
    mod = sliding_window_mod(3)
    want = one(x, pm, mask_mod=mod)
    torch.testing.assert_close(mha(x, pm, mask_mod=mod), want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(want, one(x, pm))  # the mask_mod changed something


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("kv", [None, 2])
def test_mha_mask_mod_equals_an_explicit_mask(fused, kv):
    from attnbook.masks import document_mod
    from attnbook.softmax import masked_softmax

    torch.manual_seed(0)
    m = MultiHeadAttention(8, 16, 4, n_kv_heads=kv, fused=fused, position="rope").double()
    x = torch.randn(2, 10, 8, dtype=F64)
    pm = torch.ones(2, 10, dtype=torch.bool)
    pm[0, 7] = False
    ids = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])

    def per_head(b, h, q_idx, kv_idx):  # head 0 also sees only the last 2 keys: per-head
        return (h != 0) | (q_idx - kv_idx < 2)

    from attnbook.masks import and_mods
    mod = and_mods(document_mod(ids), per_head)
    got, w = m(x, pm, mask_mod=mod, return_weights=True)
    torch.testing.assert_close(m(x, pm, mask_mod=mod), got, rtol=1e-12, atol=1e-12)
    # the explicit mask, built by hand: causal, real keys, same document, head 0's window
    i, j = torch.arange(10)[:, None], torch.arange(10)[None, :]
    allowed = (j <= i) & (ids[:, None] == ids[None, :])  # (T, T)
    allowed = allowed[None, None] & pm[:, None, None, :]  # (B, 1, T, T)
    heads = torch.arange(4)[None, :, None, None]
    allowed = allowed & ((heads != 0) | (i - j < 2))  # (B, h, T, T)
    q, k, v = m.project_heads(x)
    q, k, _ = m.with_positions(q, k, pm)
    if kv:
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    s = q @ k.transpose(-2, -1) / m.d_head ** 0.5
    weights = masked_softmax(s, ~allowed)
    torch.testing.assert_close(w, weights, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, m.merge(weights @ v), rtol=1e-12, atol=1e-12)


# --- refusals ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: AttentionLayer(8, 16),
                                  lambda: MultiHeadAttention(8, 16, 2),
                                  lambda: MultiHeadAttention(8, 16, 2, fused=True)])
def test_prefix_mod_refused_where_the_causal_mask_is_anded_in(make):
    from attnbook.masks import and_mods, padding_mod, prefix_mod

    m = make()
    x = torch.randn(1, 8, 8)
    with pytest.raises(ValueError, match="plain causal attention") as err:
        m(x, mask_mod=prefix_mod(4))
    assert "prefix would be lost" in str(err.value) and "flex_attention" in str(err.value)
    combined = and_mods(prefix_mod(4), padding_mod(torch.ones(1, 8, dtype=torch.bool)))
    with pytest.raises(ValueError, match="prefix"):
        m(x, mask_mod=combined)  # a combination that keeps the prefix is refused too
    # prefix_mod(0) and prefix_mod(1) are the causal mask itself: nothing is lost, accepted
    for n in (0, 1):
        torch.testing.assert_close(m(x, mask_mod=prefix_mod(n)), m(x))


def test_prefix_mod_still_works_where_nothing_ands_causal_in():
    from attnbook.masks import materialize, prefix_mod
    from attnbook.online import tiled_attention

    grid = materialize(prefix_mod(3), 5, 5)[0, 0]
    assert grid[0, 2] and not grid[0, 3] and grid[4].all()  # query 0 sees the whole prefix
    q, k, v = (torch.randn(1, 1, 6, 4, dtype=F64) for _ in range(3))
    out = tiled_attention(q, k, v, mask_mod=prefix_mod(3), causal=False, block_size=2)
    s = (q @ k.transpose(-2, -1) / 2).masked_fill(~materialize(prefix_mod(3), 6, 6),
                                                  float("-inf"))
    torch.testing.assert_close(out, s.softmax(-1) @ v)


def test_alibi_without_a_causal_mask_warns_and_the_symmetric_form_does_not():
    from attnbook.masks import (
        causal_mod,
        materialize,
        prefix_mod,
        sliding_window_mod,
        symmetric_alibi_mod,
    )
    from attnbook.online import tiled_attention
    from attnbook.positions import alibi_score_mod, alibi_slopes

    slopes = alibi_slopes(2, F64)
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=F64) for _ in range(3))
    alibi = alibi_score_mod(slopes)
    for mask_mod in (None, prefix_mod(3)):  # later keys visible: ALiBi favours them
        with pytest.warns(UserWarning, match="later keys are favoured"):
            tiled_attention(q, k, v, mask_mod=mask_mod, score_mod=alibi, causal=False,
                            block_size=2)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # causal, or a causal mask_mod, or symmetric: silent
        tiled_attention(q, k, v, score_mod=alibi, block_size=2)
        for mod in (causal_mod, sliding_window_mod(3)):
            tiled_attention(q, k, v, mask_mod=mod, score_mod=alibi, causal=False, block_size=2)
        out = tiled_attention(q, k, v, score_mod=symmetric_alibi_mod(slopes), causal=False,
                              block_size=2)
    # the symmetric form: -m_h |i - j| both ways, equal to ALiBi on and below the diagonal
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    bias = -slopes[:, None, None] * (i - j).abs()  # (h, T, T)
    s = q @ k.transpose(-2, -1) / 2 + bias
    torch.testing.assert_close(out, s.softmax(-1) @ v, rtol=1e-12, atol=1e-12)
    assert bias[0, 0, 5] < 0  # a key 5 ahead is penalised, not favoured
    assert materialize(causal_mod, 2, 2)[0, 0].tolist() == [[True, False], [True, True]]
    with pytest.raises(ValueError, match="one slope per head"):
        symmetric_alibi_mod(torch.ones(2, 2))


# --- partial rotary and rope types through the modules -------------------------------------

@pytest.mark.parametrize("bad", [0, 3, 10, -2, 2.0, True, "4"])
def test_wrong_rotary_dim_refused_naming_d_head(bad):
    with pytest.raises(ValueError, match="d_head = 4"):
        MultiHeadAttention(8, 16, 2, position="rope", rotary_dim=bad)
    with pytest.raises(ValueError, match="d_head = 4"):
        TinyConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2, position="rope",
                   rotary_dim=bad)
    m = MultiHeadAttention(8, 16, 2, position="rope")
    m.rotary_dim = bad  # a plain attribute, checked where it is used
    with pytest.raises(ValueError, match="d_head = 4"):
        m(torch.randn(1, 3, 8))


def test_rotary_dim_needs_rope():
    with pytest.raises(ValueError, match="position='rope'"):
        AttentionLayer(8, 16, position="alibi", rotary_dim=4)
    with pytest.raises(ValueError, match="position='rope'"):
        TinyConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2, rotary_dim=2)


def test_partial_rotary_through_the_module_turns_only_the_first_features():
    """rotary_dim reaches apply_rope: the module equals one that rotates q[..., :r], k[..., :r]."""
    from attnbook.positions import apply_rope

    torch.manual_seed(0)
    m = MultiHeadAttention(16, 8, 2, position="rope", rotary_dim=4).double()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    q, k, v = (m.split_heads(f(x)) for f in (m.query, m.key, m.value))  # (1, 2, 5, 8)
    pos = torch.arange(5)
    q = torch.cat([apply_rope(q[..., :4], pos), q[..., 4:]], dim=-1)
    k = torch.cat([apply_rope(k[..., :4], pos), k[..., 4:]], dim=-1)
    s = (q @ k.mT) / 8 ** 0.5
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    want = m.out_proj(m.merge_heads(s.softmax(-1) @ v)) if hasattr(m, "out_proj") else None
    got = m(x)
    assert got.shape == (1, 5, 16)
    if want is not None:
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    full = MultiHeadAttention(16, 8, 2, position="rope").double()
    full.load_state_dict(m.state_dict())
    assert not torch.allclose(full(x), got)  # rotating all 8 features is another model
