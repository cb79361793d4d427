"""Shapes the fused and tiled paths refuse, with messages that name them, and the ones they take.

Causal attention with T_q != T_k needs an alignment of the diagonal (SDPA's ``is_causal`` is
top-left, FlashAttention's bottom-right); both paths refuse to guess, where they used to give
silently different answers. Grouped-query attention (h_kv < h) runs forward and backward.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbook import AttentionLayer
from attnbook.fused import fused_attention
from attnbook.online import tiled_attention


def _qkv(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, dtype=torch.float64, generator=g) for s in shapes]


@pytest.mark.parametrize("T_q, T_k", [(3, 7), (7, 3)])
@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_fused_rejects_different_query_and_key_lengths(T_q, T_k, heads, padded):
    lead = (2, 2) if heads else (2,)
    q, k = _qkv((*lead, T_q, 4), (*lead, T_k, 4))
    pad = torch.ones(2, T_k, dtype=torch.bool) if padded else None
    with pytest.raises(ValueError, match=rf"T_q = {T_q} .* T_k = {T_k}.*cached_attention"):
        fused_attention(q, k, k, pad)


@pytest.mark.parametrize("T_q, T_k", [(3, 7), (7, 3)])
def test_tiled_causal_rejects_different_query_and_key_lengths(T_q, T_k):
    q, k = _qkv((2, T_q, 4), (2, T_k, 4))
    with pytest.raises(ValueError, match=rf"causal=True.*T_q = {T_q} \(q \(2, {T_q}, 4\)\)"):
        tiled_attention(q, k, k, block_size=2)


@pytest.mark.parametrize("T_q, T_k", [(3, 11), (11, 3)])
def test_tiled_cross_attention_uses_every_key(T_q, T_k):
    """Not causal, T_q != T_k: every query sees every real key, forward and backward."""
    q, k, v = (t.requires_grad_() for t in _qkv((2, 2, T_q, 4), (2, 2, T_k, 4), (2, 2, T_k, 5)))
    pad = torch.ones(2, T_k, dtype=torch.bool)
    pad[1, -2:] = False  # the last two keys of sequence 1 are padding
    s = (q @ k.transpose(-2, -1) / math.sqrt(4)).masked_fill(~pad[:, None, None, :], -math.inf)
    ref = torch.softmax(s, -1) @ v  # (2, 2, T_q, 5), an independent reference
    dout = torch.randn_like(ref)
    g_ref = torch.autograd.grad(ref, (q, k, v), dout)
    for recompute in (True, False):
        out = tiled_attention(q, k, v, pad, causal=False, block_size=2, recompute=recompute)
        torch.testing.assert_close(out, ref)
        for g, r in zip(torch.autograd.grad(out, (q, k, v), dout), g_ref):
            torch.testing.assert_close(g, r)


def test_tiled_rejects_mismatched_keys_values_and_padding():
    q, k, v = _qkv((2, 6, 4), (2, 6, 4), (2, 5, 4))
    with pytest.raises(ValueError, match=r"k and v must hold the same keys.*v \(2, 5, 4\)"):
        tiled_attention(q, k, v, causal=False)
    with pytest.raises(ValueError, match=r"padding_mask must be \(B, T_k\) = \(2, 6\).*\(2, 5\)"):
        tiled_attention(q, k, k, torch.ones(2, 5, dtype=torch.bool))


@pytest.mark.parametrize("h_kv", [1, 2])
@pytest.mark.parametrize("recompute", [True, False])
def test_tiled_grouped_query_forward_and_backward(h_kv, recompute):
    """h = 4 query heads share h_kv key/value heads; equal to the explicit module, gradients too."""
    B, h, T, d = 2, 4, 9, 3
    q, k, v = (t.requires_grad_() for t in _qkv((B, h, T, d), (B, h_kv, T, d), (B, h_kv, T, d)))
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, :2] = False  # left padding: two empty rows
    ref = AttentionLayer(d, T).double().attend(q, k, v, pad, fused=False)[0]  # repeats K, V itself
    dout = torch.randn_like(ref)
    g_ref = torch.autograd.grad(ref, (q, k, v), dout)
    out = tiled_attention(q, k, v, pad, block_size=4, recompute=recompute)
    torch.testing.assert_close(out, ref)
    g = torch.autograd.grad(out, (q, k, v), dout)  # raised for h_kv = 1 before (broadcast)
    for name, a, r in zip("qkv", g, g_ref):
        assert a.shape == r.shape, name  # dk, dv come back with h_kv heads
        torch.testing.assert_close(a, r)


def test_tiled_rejects_heads_that_do_not_group():
    q, k = _qkv((1, 4, 5, 3), (1, 3, 5, 3))
    with pytest.raises(ValueError, match=r"h = 4 must be a multiple of .* h_kv = 3"):
        tiled_attention(q, k, k)
