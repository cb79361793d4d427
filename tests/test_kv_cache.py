"""Decoding with a KV cache equals the full forward, token by token."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import random_padding

from attnbook import Attention, AttentionLayer
from attnbook.kv_cache import KVCache, cached_attention, generate


@pytest.mark.parametrize("prompt", [1, 4, 9])
@pytest.mark.parametrize("side", [None, "left"])
def test_token_by_token_equals_full_forward(prompt, side):
    m = AttentionLayer(8, 16).double()
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
    m = AttentionLayer(4, 8)
    x = torch.randn(1, 3, 4)
    pad = torch.tensor([[False, False, True]])
    cache = KVCache.for_module(m, 1)
    y = cached_attention(m, x, cache, pad)
    assert torch.isfinite(y).all() and (y[0, :2] == 0).all()


def test_generate_with_and_without_cache_agree():
    m = AttentionLayer(8, 40).double()
    prompt = torch.randn(2, 5, 8, dtype=torch.float64)
    a = generate(m, prompt, 20)
    b = generate(m, prompt, 20, use_cache=False)
    assert a.shape == (2, 20, 8)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_cache_follows_module_dtype_and_refuses_overflow():
    m = AttentionLayer(4, 5).double()
    cache = KVCache.for_module(m, 2)
    assert cache.k.dtype == torch.float64 and cache.capacity == 5
    cached_attention(m, torch.randn(2, 5, 4, dtype=torch.float64), cache)
    with pytest.raises(ValueError, match="holds 5 tokens"):
        cached_attention(m, torch.randn(2, 1, 4, dtype=torch.float64), cache)


def test_step_costs_one_projection_row():
    """A decoding step projects only the new token: the module sees (B, 1, d) inputs."""
    m = AttentionLayer(4, 10)
    seen = []
    m.query.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[1]))
    cache = KVCache.for_module(m, 1)
    cached_attention(m, torch.randn(1, 6, 4), cache)
    cached_attention(m, torch.randn(1, 1, 4), cache)
    assert seen == [6, 1]


# ---- Issue 12, section 2: per head, per layer, refused when unsupported ----------------------

import torch.nn.functional as F  # noqa: E402

from attnbook import MultiHeadAttention, TinyConfig, TinyModel  # noqa: E402
from attnbook.kv_cache import kv_cache_bytes, window_attention, window_mask  # noqa: E402

HEADED = [lambda: AttentionLayer(8, 16), lambda: MultiHeadAttention(8, 16, 4),
          lambda: MultiHeadAttention(8, 16, 4, n_kv_heads=2),
          lambda: MultiHeadAttention(8, 16, 4, n_kv_heads=1)]
IDS = ["one-head", "multi-head", "grouped-query", "multi-query"]


@pytest.mark.parametrize("pad", [None, "left"])
def test_the_core_module_takes_the_cache_token_by_token(pad):
    """Chapter 12 on the module of chapters 0-8: the cache sees it as its layer (no new draws)."""
    torch.manual_seed(0)
    m = Attention(8, 16).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    mask = None if pad is None else torch.tensor([[False] * 3 + [True] * 6, [True] * 9])
    state = torch.random.get_rng_state()
    cache = KVCache.for_module(m, 2)
    steps = [cached_attention(m, x[:, :4], cache, None if mask is None else mask[:, :4])]
    steps += [cached_attention(m, x[:, t:t + 1], cache, None if mask is None else mask[:, t:t + 1])
              for t in range(4, 9)]
    assert torch.equal(torch.random.get_rng_state(), state)
    want = m(x, mask)
    torch.testing.assert_close(torch.cat(steps, 1), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("pad", [None, "left", "right"])
@pytest.mark.parametrize("chunks", [(9,), (4, 1, 1, 3), (2, 3, 4), (1,) * 9])
def test_cache_step_is_the_layers_step(pad, chunks):
    """Chapter 12's listing (cache_step, the core module's path) computes what the library's
    general step computes for the same weights (AttentionLayer), in every chunking."""
    from attnbook.kv_cache import cache_step

    torch.manual_seed(1)
    m = Attention(8, 16).double()
    layer = AttentionLayer.of(m)
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    real = {None: None, "left": torch.tensor([[False] * 3 + [True] * 6, [True] * 9]),
            "right": torch.tensor([[True] * 6 + [False] * 3, [True] * 9])}[pad]
    mine, general = KVCache.for_module(m, 2), KVCache.for_module(layer, 2)
    start = 0
    for t in chunks:
        piece = slice(start, start + t)
        r = None if real is None else real[:, piece]
        a = cache_step(m, x[:, piece], mine, r)
        b = cached_attention(layer, x[:, piece], general, r)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
        assert a.isfinite().all()
        start += t
    assert torch.equal(mine.real, general.real) and mine.length == general.length


@pytest.mark.parametrize("make", HEADED, ids=IDS)
@pytest.mark.parametrize("side", [None, "left", "right"])
@pytest.mark.parametrize("chunks", [(4, 1, 1, 1, 1, 1), (3, 2, 4), (9,)])
def test_every_module_token_by_token_and_in_chunks(make, side, chunks):
    """Prefill, single steps and chunked prefill all equal one full forward pass."""
    m = make().double()
    B, T = 3, sum(chunks)
    x = torch.randn(B, T, 8, dtype=torch.float64)
    pad = None if side is None else random_padding(B, T, side)
    full = m(x, pad)
    cache = KVCache.for_module(m, B)
    layer = AttentionLayer.of(m)  # the core module is one head of width d
    assert cache.k.shape == (B, layer.n_kv_heads, 16, layer.d_head)
    pieces, start = [], 0
    for t in chunks:
        piece_pad = None if pad is None else pad[:, start : start + t]
        pieces.append(cached_attention(m, x[:, start : start + t], cache, piece_pad))
        start += t
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-10, atol=1e-10)


def test_a_multihead_module_is_no_longer_silently_wrong():
    """The old cache computed single-head attention for a MultiHeadAttention (error 0.98)."""
    m = MultiHeadAttention(8, 40, 4).double()
    prompt = torch.randn(2, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(generate(m, prompt, 10), generate(m, prompt, 10, use_cache=False))


def test_an_unsupported_module_is_refused():
    class Doubled(Attention):
        def forward(self, x, padding_mask=None, **kw):
            return 2 * super().forward(x, padding_mask, **kw)

    m = Doubled(4, 8)
    with pytest.raises(TypeError, match="supports attnbook.Attention or attnbook.AttentionLayer or "
                       "attnbook.MultiHead"):
        KVCache.for_module(m, 1)
    cache = KVCache.for_module(AttentionLayer(4, 8), 1)
    with pytest.raises(TypeError, match="got Doubled"):
        cached_attention(m, torch.randn(1, 2, 4), cache)


def test_sdpa_is_causal_aligns_top_left_but_chunked_prefill_needs_bottom_right():
    """Chapter 12: with fewer queries than keys, is_causal=True lets query i see keys 0..i
    (top-left); a chunk of new queries at positions start..start+t-1 must see keys up to its
    own position (bottom-right), which is what cached_attention passes as a mask."""
    q = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    k, v = (torch.randn(1, 1, 7, 4, dtype=torch.float64) for _ in range(2))
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    allowed_tl = torch.ones(3, 7, dtype=torch.bool).tril()  # query i sees keys 0..i
    torch.testing.assert_close(top_left, F.scaled_dot_product_attention(q, k, v,
                                                                        attn_mask=allowed_tl))
    allowed_br = torch.ones(3, 7, dtype=torch.bool).tril(diagonal=7 - 3)  # keys 0..4+i
    bottom_right = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed_br)
    assert not torch.allclose(top_left, bottom_right)
    # bottom-right is the full causal attention's last three rows
    qf = torch.cat([torch.randn(1, 1, 4, 4, dtype=torch.float64), q], dim=2)
    full = F.scaled_dot_product_attention(qf, k, v, is_causal=True)
    torch.testing.assert_close(full[:, :, 4:], bottom_right)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_tiny_model_generates_the_same_tokens_with_and_without_the_cache(n_kv_heads):
    torch.manual_seed(n_kv_heads)
    cfg = TinyConfig(vocab_size=11, context_length=24, d_model=16, n_heads=4, n_layers=2,
                     n_kv_heads=n_kv_heads)
    model = TinyModel(cfg).double()
    prompt = torch.randint(11, (3, 5))
    with_cache = model.generate(prompt, 19)
    without = model.generate(prompt, 19, use_cache=False)
    assert with_cache.shape == (3, 24)
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache[:, :5], prompt)


def test_tiny_model_step_logits_equal_the_full_forward():
    model = TinyModel(TinyConfig(vocab_size=9, context_length=12, d_model=16)).double()
    idx = torch.randint(9, (2, 12))
    caches = model.new_caches(2)
    assert len(caches) == 2 and caches[0].k.shape == (2, 4, 12, 4)
    logits = [model.step(idx[:, :7], caches)] + [model.step(idx[:, t : t + 1], caches)
                                                 for t in range(7, 12)]
    torch.testing.assert_close(torch.cat(logits, dim=1), model(idx), rtol=1e-10, atol=1e-10)


def test_tiny_model_refuses_to_generate_past_its_context():
    model = TinyModel(TinyConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2))
    with pytest.raises(ValueError, match="context_length=8"):
        model.generate(torch.zeros(1, 4, dtype=torch.long), 5)


def test_cache_bytes_formula_matches_the_buffers():
    """2 · layers · B · h_kv · T · d_h · bytes; grouped-query divides by h / h_kv."""
    for n_kv in (4, 2, 1):
        cfg = TinyConfig(vocab_size=5, context_length=32, d_model=16, n_heads=4, n_layers=3,
                         n_kv_heads=n_kv)
        caches = TinyModel(cfg).new_caches(2)
        assert sum(c.nbytes() for c in caches) == kv_cache_bytes(3, 2, n_kv, 32, 4)
    assert kv_cache_bytes(32, 16, 32, 4096, 128, 2) == 32 * 2**30  # exercise ex-kv-bytes


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_grouped_query_equals_multihead_with_shared_key_value_heads(n_kv_heads):
    """The explicit definition: GQA is multi-head attention whose query heads in a group use
    the same key and value head (the key/value weights repeated per group)."""
    gqa = MultiHeadAttention(8, 10, 4, n_kv_heads=n_kv_heads).double()
    mha = MultiHeadAttention(8, 10, 4).double()
    group = 4 // n_kv_heads
    with torch.no_grad():
        mha.query.weight.copy_(gqa.query.weight)
        mha.out.weight.copy_(gqa.out.weight)
        for name in ("key", "value"):
            w = getattr(gqa, name).weight.view(n_kv_heads, 2, 8)  # (h_kv, d_h, d)
            getattr(mha, name).weight.copy_(w.repeat_interleave(group, dim=0).reshape(8, 8))
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    pad = random_padding(2, 10, "left")
    for fused in (False, True):
        gqa.fused = fused
        torch.testing.assert_close(gqa(x, pad), mha(x, pad), rtol=1e-10, atol=1e-10)
    assert gqa.key.weight.numel() == mha.key.weight.numel() // group


@pytest.mark.parametrize("make", HEADED[:3], ids=IDS[:3])
@pytest.mark.parametrize("window", [1, 3, 6])
@pytest.mark.parametrize("prompt", [2, 5, 8])
def test_sliding_window_cache_equals_banded_attention(make, window, prompt):
    m = make().double()
    B, T = 2, 14
    x = torch.randn(B, T, 8, dtype=torch.float64)
    q, k, v = m.project_heads(x)
    expected = m.merge(window_attention(q, k, v, window))  # explicit definition
    cache = KVCache.for_module(m, B, window=window)
    assert cache.capacity == window  # memory for W tokens, not for the context
    pieces = [cached_attention(m, x[:, :prompt], cache)]
    pieces += [cached_attention(m, x[:, t : t + 1], cache) for t in range(prompt, T)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, rtol=1e-10, atol=1e-10)


def test_window_mask_is_a_band():
    assert torch.equal(~window_mask(4, 2), torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0],
                                                         [0, 1, 1, 0], [0, 0, 1, 1]]).bool())


# ---- Issue 20: the window against the context length, chunks in a window, empty rows --------


def test_window_wider_than_the_context_is_refused_by_name():
    """A window of W slots lets a query see W keys; the module allows context_length."""
    m = AttentionLayer(4, 6)
    with pytest.raises(ValueError, match=r"between 1 and the context length 6.*window=7"):
        KVCache.for_module(m, 1, window=7)
    with pytest.raises(ValueError, match="window=0"):
        KVCache.for_module(m, 1, window=0)
    model = TinyModel(TinyConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2))
    with pytest.raises(ValueError, match="context length 8"):
        model.new_caches(1, window=9)
    assert KVCache.for_module(m, 1, window=6).capacity == 6  # the whole context is allowed


SHORT = [lambda: AttentionLayer(8, 6), lambda: MultiHeadAttention(8, 6, 4),
         lambda: MultiHeadAttention(8, 6, 4, n_kv_heads=2),
         lambda: MultiHeadAttention(8, 6, 4, n_kv_heads=1)]


@pytest.mark.parametrize("make", SHORT, ids=IDS)
@pytest.mark.parametrize("window", [1, 4, 6])
def test_a_window_cache_rolls_past_the_context_length(make, window):
    """A rolling buffer takes any length: each query still sees at most W <= context keys.
    Without a window the same module stops at its context length with a ValueError."""
    m_short = make().double()  # context_length 6, fed 23 tokens
    B, T = 2, 23
    x = torch.randn(B, T, 8, dtype=torch.float64)
    q, k, v = m_short.project_heads(x)
    expected = m_short.merge(window_attention(q, k, v, window))  # (B, T, d) explicit band
    cache = KVCache.for_module(m_short, B, window=window)
    pieces = [cached_attention(m_short, x[:, :5], cache)]
    pieces += [cached_attention(m_short, x[:, t : t + 1], cache) for t in range(5, T)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, rtol=1e-10, atol=1e-10)
    assert cache.length == T and cache.capacity == window
    full = KVCache.for_module(m_short, B)
    cached_attention(m_short, x[:, :6], full)
    with pytest.raises(ValueError, match="holds 6 tokens .*context_length"):
        cached_attention(m_short, x[:, 6:7], full)


def test_tiny_model_with_a_window_stops_only_at_its_position_table():
    torch.manual_seed(0)
    cfg = TinyConfig(vocab_size=7, context_length=8, d_model=8, n_heads=2, n_layers=2)
    with_pos = TinyModel(cfg)
    caches = with_pos.new_caches(1, window=4)
    with_pos.step(torch.zeros(1, 8, dtype=torch.long), caches)
    with pytest.raises(ValueError, match="context_length=8 position vectors"):
        with_pos.step(torch.zeros(1, 1, dtype=torch.long), caches)
    no_pos = TinyModel(TinyConfig(**{**cfg.__dict__, "positions": False})).double()
    idx = torch.randint(7, (2, 20))
    caches = no_pos.new_caches(2, window=4)
    logits = torch.cat([no_pos.step(idx[:, :3], caches)]
                       + [no_pos.step(idx[:, t : t + 1], caches) for t in range(3, 20)], dim=1)
    assert logits.shape == (2, 20, 7) and torch.isfinite(logits).all()
    # the first 8 positions are within the context: equal to the full forward with a band
    for block in no_pos.blocks:
        block.attn.mask.copy_(window_mask(8, 4))
        block.attn.fused = False
    torch.testing.assert_close(logits[:, :8], no_pos(idx[:, :8]), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("make", HEADED, ids=IDS)
@pytest.mark.parametrize("side", [None, "left", "right"])
@pytest.mark.parametrize(("chunks", "window"), [((4, 1, 3, 2, 1, 3), 1), ((2, 5, 7), 3),
                                                ((14,), 6), ((4, 1, 3, 2, 1, 3), 6),
                                                ((2, 5, 7), 16)])
def test_a_window_cache_takes_chunks_and_padding(make, side, chunks, window):
    """Prefill, chunks and steps in a window equal the explicit banded attention."""
    torch.manual_seed(window)
    m = make().double()
    B, T = 3, sum(chunks)
    x = torch.randn(B, T, 8, dtype=torch.float64)
    pad = None if side is None else random_padding(B, T, side)
    q, k, v = m.project_heads(x)
    expected = m.merge(window_attention(q, k, v, window, pad))
    cache = KVCache.for_module(m, B, window=window)
    pieces, start = [], 0
    for t in chunks:
        piece_pad = None if pad is None else pad[:, start : start + t]
        pieces.append(cached_attention(m, x[:, start : start + t], cache, piece_pad))
        start += t
    torch.testing.assert_close(torch.cat(pieces, dim=1), expected, rtol=1e-10, atol=1e-10)


def _kernel_with_nan_on_empty_rows(monkeypatch):
    """Replace SDPA by one that returns NaN for query rows whose bool mask allows no key, as
    GPU kernels have done; the CPU kernel happens to return zeros there."""
    real_sdpa = F.scaled_dot_product_attention
    calls = []

    def sdpa(q, k, v, attn_mask=None, is_causal=False, **kw):
        out = real_sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            allowed = attn_mask.expand(*out.shape[:-1], k.size(-2))
            if is_causal:
                allowed = allowed & torch.ones(allowed.shape[-2:], dtype=torch.bool).tril()
            calls.append(1)
            out = out.masked_fill(~allowed.any(-1, keepdim=True), float("nan"))
        return out

    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    return calls


@pytest.mark.parametrize("make", HEADED, ids=IDS)
@pytest.mark.parametrize("window", [None, 4])
def test_left_padded_prompt_in_chunks_is_finite_under_a_nan_kernel(make, window, monkeypatch):
    """Rows with no visible key go through the library's empty-row rule in the decode and
    chunked-prefill branches: zeros, equal to the full pass, whatever the kernel returns."""
    torch.manual_seed(1)
    m = make().double()
    B, T = 2, 12
    x = torch.randn(B, T, 8, dtype=torch.float64)
    pad = torch.arange(T)[None, :] >= torch.tensor([[6], [3]])  # 6 and 3 padding tokens
    if window is None:
        expected = m(x, pad)
    else:
        q, k, v = m.project_heads(x)
        expected = m.merge(window_attention(q, k, v, window, pad))
    assert (expected[0, :6] == 0).all()
    cache = KVCache.for_module(m, B, window=window)
    # the prefill of a full cache is fused_attention's (its CPU route is pinned in
    # test_fused.py); the hostile kernel covers every branch of the cache itself
    pieces = [cached_attention(m, x[:, :2], cache, pad[:, :2])]
    calls = _kernel_with_nan_on_empty_rows(monkeypatch)
    for a, b in [(2, 5), (5, 6), (6, 9), (9, 10), (10, 11), (11, 12)]:
        pieces.append(cached_attention(m, x[:, a:b], cache, pad[:, a:b]))
    out = torch.cat(pieces, dim=1)
    assert calls and torch.isfinite(out).all()
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_the_nan_kernel_would_break_a_bare_mask():
    """The fake kernel above does return NaN for an all-blocked row (so the test has teeth)."""
    q = torch.randn(1, 1, 2, 4)
    allowed = torch.tensor([[False, False], [True, False]])
    with pytest.MonkeyPatch.context() as mp:
        _kernel_with_nan_on_empty_rows(mp)
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=allowed)
    assert out[0, 0, 0].isnan().all() and torch.isfinite(out[0, 0, 1]).all()


@pytest.mark.parametrize("window", [None, 3])
def test_padded_prompt_then_tokens_without_a_mask_equal_the_full_forward(window):
    """Generation after a left-padded prompt: the new tokens come without a padding mask (they
    are real), so the steps skip the empty-row rule but must still mask the prompt's padding."""
    m = AttentionLayer(8, 16).double()
    B, P, T = 3, 5, 9
    x = torch.randn(B, T, 8, dtype=torch.float64)
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[:, :P] = random_padding(B, P, "left")
    cache = KVCache.for_module(m, B, window=window)
    pieces = [cached_attention(m, x[:, :P], cache, pad[:, :P])]
    assert cache.padded
    pieces += [cached_attention(m, x[:, t : t + 1], cache) for t in range(P, T)]
    if window is None:
        full = m(x, pad)
    else:
        from attnbook.kv_cache import window_attention
        q, k, v = m.project_heads(x)
        full = m.merge(window_attention(q, k, v, window, pad))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-10, atol=1e-10)


def test_a_cache_fed_without_padding_needs_no_key_mask():
    """`padded` records whether any padding mask was appended (one of all True counts): the
    steps of an unpadded generation then call SDPA with no mask at all."""
    m = AttentionLayer(8, 16)
    cache = KVCache.for_module(m, 2)
    cached_attention(m, torch.randn(2, 4, 8), cache)
    assert not cache.padded
    cached_attention(m, torch.randn(2, 1, 8), cache, torch.ones(2, 1, dtype=torch.bool))
    assert cache.padded


def _kv_bad_inputs():
    m, mha = AttentionLayer(8, 16), MultiHeadAttention(8, 16, 4)
    x = torch.randn(2, 3, 8)
    return [
        ("x without a batch axis", lambda: cached_attention(m, x[0], KVCache.for_module(m, 2)),
         ValueError, "3-D"),
        ("another width", lambda: cached_attention(m, x[..., :5], KVCache.for_module(m, 2)),
         ValueError, "d_model=8"),
        ("another batch", lambda: cached_attention(m, x, KVCache.for_module(m, 3)),
         ValueError, "batch of 2"),
        ("a cache made for another module",
         lambda: cached_attention(m, x, KVCache.for_module(mha, 2)), ValueError, "another module"),
        ("a float padding mask",
         lambda: cached_attention(m, x, KVCache.for_module(m, 2), torch.ones(2, 3)),
         TypeError, "torch.bool"),
        ("a padding mask of another length",
         lambda: cached_attention(m, x, KVCache.for_module(m, 2),
                                  torch.ones(2, 4, dtype=torch.bool)), ValueError, "(2, 3)"),
        ("a negative batch", lambda: KVCache.for_module(m, -1), ValueError, "batch"),
        ("a fractional window", lambda: KVCache.for_module(m, 2, window=2.5), TypeError, "window"),
        ("negative steps", lambda: generate(m, x, -1), ValueError, "steps"),
        ("an empty prompt", lambda: generate(m, x[:, :0], 2), ValueError, "no tokens"),
    ]


@pytest.mark.parametrize("case", range(len(_kv_bad_inputs())))
def test_the_cache_names_what_it_expected(case):
    name, call, error, words = _kv_bad_inputs()[case]
    with pytest.raises(error, match=re.escape(words)):
        call()


def test_generating_zero_tokens_returns_an_empty_sequence():
    m = AttentionLayer(8, 16)
    assert generate(m, torch.randn(2, 3, 8), 0).shape == (2, 0, 8)


def test_tiny_model_generates_past_its_context_with_a_window():
    torch.manual_seed(1)
    cfg = TinyConfig(vocab_size=7, context_length=8, d_model=8, n_heads=2, n_layers=2,
                     positions=False)
    model = TinyModel(cfg).double()
    prompt = torch.randint(7, (2, 3))
    seq = model.generate(prompt, 17, window=4)  # 20 tokens, context length 8
    assert seq.shape == (2, 20) and torch.equal(seq[:, :3], prompt)
    caches = model.new_caches(2, window=4)  # the same greedy tokens, step by step
    logits = model.step(prompt, caches)[:, -1]
    for t in range(3, 20):
        assert torch.equal(seq[:, t], logits.argmax(-1))
        logits = model.step(seq[:, t : t + 1], caches)[:, -1]
    with pytest.raises(ValueError, match="use_cache=True"):
        model.generate(prompt, 2, use_cache=False, window=4)
    with_pos = TinyModel(TinyConfig(**{**cfg.__dict__, "positions": True}))
    with pytest.raises(ValueError, match="position vectors"):
        with_pos.generate(prompt, 17, window=4)


# -- the hot path: checks once per generation, the same step (chapter 12, "Against the memory
# bound"; benchmarks/bench_decode.py measures it) ---------------------------------------------

def _state(cache: KVCache) -> tuple:
    return (cache.length, cache.padded, cache.k.clone(), cache.v.clone(), cache.real.clone(),
            cache.positions.clone(), cache.seen.clone())


def _assert_same_state(a: KVCache, b: KVCache) -> None:
    for x, y in zip(_state(a), _state(b)):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
        else:
            assert x == y


@pytest.mark.parametrize("kind", ["one head", "gqa", "rope", "alibi", "window"])
@pytest.mark.parametrize("padded", [False, True])
def test_decode_step_is_cached_attention_without_the_checks(kind, padded):
    from attnbook import MultiHeadAttention
    from attnbook.kv_cache import decode_step

    torch.manual_seed(0)
    m = {"one head": lambda: AttentionLayer(8, 16),
         "gqa": lambda: MultiHeadAttention(8, 16, 4, n_kv_heads=2),
         "rope": lambda: MultiHeadAttention(8, 16, 2, position="rope"),
         "alibi": lambda: MultiHeadAttention(8, 16, 2, position="alibi"),
         "window": lambda: AttentionLayer(8, 16)}[kind]().double()
    window = 3 if kind == "window" else None
    B, T = 2, 9
    x = torch.randn(B, T, 8, dtype=torch.float64)
    pad = random_padding(B, T, "left") if padded else None
    caches = [KVCache.for_module(m, B, window=window) for _ in range(2)]
    for c in caches:
        cached_attention(m, x[:, :4], c, None if pad is None else pad[:, :4])
    for t in range(4, T):
        p = None if pad is None else pad[:, t:t + 1]
        want = cached_attention(m, x[:, t:t + 1], caches[0], p)
        got = decode_step(m, x[:, t:t + 1], caches[1], p)
        assert torch.equal(got, want)
        _assert_same_state(caches[0], caches[1])


def test_a_one_token_step_dispatches_no_arange():
    """The position of one new token without padding is a view of the count of real tokens,
    not an arange and an add (two of the few dozen operations of a step)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Names(TorchDispatchMode):
        names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    m = AttentionLayer(8, 16)
    cache = KVCache.for_module(m, 2)
    with torch.no_grad():
        cached_attention(m, torch.randn(2, 3, 8), cache)
        with Names() as mode:
            cached_attention(m, torch.randn(2, 1, 8), cache)
    assert "arange" not in mode.names and "_scaled_dot_product_flash_attention_for_cpu" in (
        mode.names)
    assert cache.positions[:, :4].tolist() == [[0, 1, 2, 3]] * 2
    assert cache.seen.tolist() == [4, 4]


def test_the_positions_of_one_token_survive_the_next_append():
    """next_positions(None, 1) is a view of ``seen``; append replaces ``seen`` (never writes
    it in place), so positions handed out earlier keep their values."""
    cache = KVCache.empty(2, 8, 4)
    pos = cache.next_positions(None, 1)
    cache.append(torch.zeros(2, 1, 1, 4), torch.zeros(2, 1, 1, 4))
    assert pos.tolist() == [[0], [0]]
    assert cache.next_positions(None, 1).tolist() == [[1], [1]]
    assert cache.next_positions(None, 3).tolist() == [[1, 2, 3]] * 2


def test_generate_still_checks_what_next_input_returns():
    """generate skips the checks only for an input of the previous output's shape and dtype;
    anything else goes through cached_attention and gets its error (or, for a valid chunk of
    two tokens, is attended as before)."""
    m = AttentionLayer(4, 16)
    prompt = torch.randn(2, 3, 4)
    with pytest.raises(TypeError, match="dtype"):
        generate(m, prompt, 2, next_input=lambda y: y.double())
    with pytest.raises(ValueError, match="features"):
        generate(m, prompt, 2, next_input=lambda y: y[..., :3])
    with pytest.raises(TypeError, match="torch.Tensor"):
        generate(m, prompt, 2, next_input=lambda y: y.tolist())
    def twice(y):
        return torch.cat([y, y], dim=1)[:, -2:]  # (B, 2, d): a chunk of two tokens per step

    cache = KVCache.for_module(m, 2)
    with torch.no_grad():
        y = cached_attention(m, prompt, cache)[:, -1:]
        want = []
        for _ in range(2):
            y = cached_attention(m, twice(y), cache)
            want.append(y)
    torch.testing.assert_close(generate(m, prompt, 2, next_input=twice), torch.cat(want, 1),
                               rtol=0, atol=0)
    with pytest.raises(ValueError, match="do not fit"):
        generate(AttentionLayer(4, 4), prompt, 2)


def test_tiny_model_decode_is_step_without_the_checks():
    from attnbook import TinyConfig, TinyModel

    torch.manual_seed(0)
    model = TinyModel(TinyConfig(16, 12, 16, 2)).eval()
    ids = torch.randint(16, (2, 5))
    a, b = model.new_caches(2), model.new_caches(2)
    with torch.no_grad():
        model.step(ids, a)
        model.step(ids, b)
        for t in range(3):
            nxt = torch.full((2, 1), t)
            assert torch.equal(model.step(nxt, a), model.decode(nxt, b))
    for x, y in zip(a, b):
        _assert_same_state(x, y)
    with pytest.raises(ValueError, match="between 0 and vocab_size"):
        model.step(torch.full((2, 1), 16), a)  # the public step still checks


def test_generate_with_the_core_module():
    """generate() on the module of chapters 0-8: cached (cache_step, then the layer's step)
    equals recomputing, and equals the same weights as an AttentionLayer."""
    torch.manual_seed(2)
    m = Attention(8, 16).double()
    prompt = torch.randn(2, 3, 8, dtype=torch.float64)
    cached = generate(m, prompt, 5)
    torch.testing.assert_close(cached, generate(m, prompt, 5, use_cache=False),
                               rtol=0, atol=1e-12)
    torch.testing.assert_close(cached, generate(AttentionLayer.of(m), prompt, 5),
                               rtol=0, atol=1e-13)
