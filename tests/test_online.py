"""Online softmax and tiled attention equal the explicit module, padding and empty rows included."""

from __future__ import annotations

import pytest
import torch
from conftest import random_padding
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import AttentionLayer
from attnbook.online import (
    online_softmax,
    online_softmax_stats,
    tiled_attention,
    tiled_attention_backward,
    tiled_attention_forward,
)
from attnbook.softmax import masked_softmax


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 20), block=st.integers(1, 8), seed=st.integers(0, 10**6))
def test_online_softmax_equals_softmax(n, block, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(3, n, dtype=torch.float64, generator=g) * 10
    torch.testing.assert_close(online_softmax(s, block), torch.softmax(s, -1))
    m, l = online_softmax_stats(s, block)
    torch.testing.assert_close(m, s.amax(-1, keepdim=True))
    torch.testing.assert_close(l, (s - m).exp().sum(-1, keepdim=True))


def test_online_softmax_rows_with_no_visible_score():
    s = torch.randn(3, 7, dtype=torch.float64)
    s[0] = float("-inf")  # an empty row: the naive recurrence gives 0 / 0
    s[1, :5] = float("-inf")  # the first blocks are empty, a later one is not
    blocked = torch.isinf(s)
    out = online_softmax(s, 2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, masked_softmax(s, blocked))
    m, l = online_softmax_stats(s, 2)
    assert m[0].item() == float("-inf") and l[0].item() == 0


def test_online_softmax_huge_scores_do_not_overflow():
    s = torch.tensor([[1000.0, 999.0, -1000.0, 1001.0]])
    torch.testing.assert_close(online_softmax(s, 1), torch.softmax(s, -1))


def _explicit(q, k, v, pad=None):
    return AttentionLayer(q.size(-1), q.size(-2)).to(q.dtype).attend(q, k, v, pad)[0]


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 20), d=st.integers(1, 8),
       block=st.integers(1, 9), side=st.sampled_from(["none", "left", "right"]),
       seed=st.integers(0, 10**6))
def test_tiled_equals_explicit(B, T, d, block, side, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, T, d, dtype=torch.float64, generator=g) for _ in range(3))
    pad = None if side == "none" else random_padding(B, T, side, generator=g)
    out = tiled_attention(q, k, v, pad, block_size=block)
    torch.testing.assert_close(out, _explicit(q, k, v, pad), rtol=1e-10, atol=1e-10)


def test_tiled_on_heads_and_empty_rows_give_zero():
    B, h, T, d_h = 2, 3, 11, 4
    q, k, v = (torch.randn(B, h, T, d_h, dtype=torch.float64) for _ in range(3))
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, :4] = False  # left padding: queries 0..3 of sequence 0 see no real key
    out = tiled_attention(q, k, v, pad, block_size=3)
    assert (out[0, :, :4] == 0).all()
    torch.testing.assert_close(out, _explicit(q, k, v, pad))


def test_tiled_without_causal_mask_is_full_attention():
    q, k, v = (torch.randn(2, 9, 4, dtype=torch.float64) for _ in range(3))
    ref = torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v
    torch.testing.assert_close(tiled_attention(q, k, v, causal=False, block_size=4), ref)


def test_tiled_float32_close_to_float64():
    q, k, v = (torch.randn(2, 70, 16, dtype=torch.float64) for _ in range(3))
    ref = _explicit(q, k, v)
    out = tiled_attention(q.float(), k.float(), v.float(), block_size=16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_custom_backward_gradcheck(causal):
    q, k, v = (torch.randn(2, 2, 7, 3, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    pad = torch.tensor([[False, False, True, True, True, True, True], [True] * 5 + [False] * 2])
    assert torch.autograd.gradcheck(
        lambda a, b, c: tiled_attention(a, b, c, pad, causal=causal, block_size=3), (q, k, v))


@pytest.mark.parametrize("recompute", [True, False])
def test_gradients_equal_explicit(recompute):
    B, T, d = 2, 13, 5
    pad = random_padding(B, T, "left")
    leaves = [torch.randn(B, T, d, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    grad_out = torch.randn(B, T, d, dtype=torch.float64)
    tiled_attention(*leaves, pad, block_size=4, recompute=recompute).backward(grad_out)
    ours = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    _explicit(*leaves, pad).backward(grad_out)
    for a, b in zip(ours, leaves):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b.grad, rtol=1e-10, atol=1e-10)


def test_backward_functions_directly():
    q, k, v = (torch.randn(1, 6, 2, dtype=torch.float64) for _ in range(3))
    out, lse = tiled_attention_forward(q, k, v, None, True, 4)
    assert lse.shape == (1, 6, 1)
    dq, dk, dv = tiled_attention_backward(torch.ones_like(out), q, k, v, out, lse, None, True, 4)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_recompute_saves_no_square_tensor():
    """The custom Function keeps O(T) tensors for backward; plain autograd keeps O(T²)."""
    T, d = 64, 4
    leaves = [torch.randn(1, T, d, requires_grad=True) for _ in range(3)]
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    for recompute, expect_square in [(True, False), (False, True)]:
        saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            tiled_attention(*leaves, block_size=16, recompute=recompute)
        total = sum(saved)
        assert (total >= T * T) == expect_square, (recompute, total)


def _grads(f, leaves, grad_out):
    for t in leaves:
        t.grad = None
    f(*leaves).backward(grad_out)
    return [t.grad.clone() for t in leaves]


@pytest.mark.parametrize("d", [1, 3, 8, 33, 64])
@pytest.mark.parametrize("case", ["T = 1", "first causal row"])
def test_one_visible_key_gradients_are_exact(case, d):
    """A row with one visible key has p = 1, so its dS must be exactly 0 (issue 48).

    dq, dk, dv equal the explicit module's bit for bit in float32 (FlashAttention's reference
    tests, adapted, found dq off by 1.2e-6 at T = 1 where the peer's error is 0).
    """
    T = 1 if case == "T = 1" else 9
    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        leaves = [torch.randn(2, T, d, generator=g).requires_grad_() for _ in range(3)]
        grad_out = torch.randn(2, T, d, generator=g)
        grad_out[:, 1:] = 0  # only the rows with one visible key send a gradient
        ours = _grads(lambda a, b, c: tiled_attention(a, b, c, block_size=4), leaves, grad_out)
        ref = _grads(lambda a, b, c: _explicit(a, b, c), leaves, grad_out)
        for a, b in zip(ours, ref):
            assert torch.equal(a, b)
        assert torch.equal(ours[0], torch.zeros_like(ours[0]))  # dq: the softmax passes nothing
        grad_out = torch.randn(2, T, d, generator=g)  # every row sends one: dq of row 0 is still 0
        dq = _grads(lambda a, b, c: tiled_attention(a, b, c, block_size=4), leaves, grad_out)[0]
        assert torch.equal(dq[:, 0], torch.zeros_like(dq[:, 0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("path", ["plain", "mask_mod plan"])
def test_one_real_key_gives_exactly_zero_dq_and_dk(path, dtype):
    """Padding that leaves one real key: every row puts all its weight on it, wherever it sits
    in the tiles, so dq and dk are exactly 0, in every dtype and on both loops (the chapter's
    and the plan's); dv is the column sum of dout."""
    kw = {"mask_mod": lambda b, h, qi, ki: ki >= 0} if path == "mask_mod plan" else {}
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        T = int(torch.randint(2, 20, (), generator=g))
        d = int(torch.randint(1, 70, (), generator=g))
        block = int(torch.randint(1, 9, (), generator=g))
        j = int(torch.randint(0, T, (), generator=g))
        pad = torch.zeros(2, T, dtype=torch.bool)
        pad[:, j] = True
        q, k, v = (torch.randn(2, T, d, generator=g).to(dtype).requires_grad_() for _ in range(3))
        out = tiled_attention(q, k, v, pad, causal=False, block_size=block, **kw)
        dout = torch.randn(2, T, d, generator=g).to(dtype)
        out.backward(dout)
        assert torch.equal(q.grad, torch.zeros_like(q.grad)), (seed, T, d, block, j)
        assert torch.equal(k.grad, torch.zeros_like(k.grad)), (seed, T, d, block, j)
        dv = torch.zeros(2, T, d)
        dv[:, j] = dout.float().sum(1)  # summed in another order: close, not equal
        torch.testing.assert_close(v.grad, dv.to(dtype))
