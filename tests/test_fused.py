"""The fused path (SDPA) equals the explicit one: padding, empty rows, dtypes, gradients."""

from __future__ import annotations

import pytest
import torch
from conftest import random_padding

from attnbook import AttentionLayer
from attnbook.fused import empty_rows, fused_attention, sdpa_mask


def _pair(d=8, context=16, dtype=torch.float64):
    explicit = AttentionLayer(d, context).to(dtype)
    fused = AttentionLayer(d, context, fused=True).to(dtype)
    fused.load_state_dict(explicit.state_dict())
    return explicit, fused


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("side", [None, "right", "left"])
@pytest.mark.parametrize("seed", range(3))
def test_fused_equals_explicit(dtype, tol, side, seed):
    torch.manual_seed(seed)
    explicit, fused = _pair(dtype=dtype)
    B, T = 3, 13
    x = torch.randn(B, T, 8, dtype=dtype)
    pad = None if side is None else random_padding(B, T, side)
    torch.testing.assert_close(fused(x, pad), explicit(x, pad), rtol=tol, atol=tol)


def test_empty_rows_are_zero_with_zero_gradients():
    explicit, fused = _pair()
    x = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False, False, True, True, True, True], [False] * 6])
    out = fused(x, pad)
    assert (out[0, :2] == 0).all() and (out[1] == 0).all()
    g = torch.randn_like(out)
    out.backward(g)
    ours = [x.grad.clone()] + [p.grad.clone() for p in fused.parameters()]
    x.grad = None
    explicit(x, pad).backward(g)
    theirs = [x.grad] + [p.grad for p in explicit.parameters()]
    for a, b in zip(ours, theirs):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("side", [None, "left"])
def test_gradcheck_fused(side):
    _, fused = _pair(d=3, context=5)
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    pad = None if side is None else torch.tensor([[False, True, True, True, True],
                                                 [True, True, True, False, False]])
    assert torch.autograd.gradcheck(lambda t: fused(t, pad), (x,))


def test_fused_on_heads_matches_explicit_attend():
    explicit, fused = _pair()
    B, h, T, d_h = 2, 4, 9, 2
    q, k, v = (torch.randn(B, h, T, d_h, dtype=torch.float64) for _ in range(3))
    pad = random_padding(B, T, "left")
    out, weights = fused.attend(q, k, v, pad)
    ref, _ = explicit.attend(q, k, v, pad)
    assert weights is None
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(fused_attention(q, k, v, pad), ref)


def test_return_weights_on_fused_module_uses_the_explicit_path():
    explicit, fused = _pair()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    out, w = fused(x, return_weights=True)
    ref, w_ref = explicit(x, return_weights=True)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w, w_ref)
    assert fused.fused  # asking for weights does not switch the module off the fused path


def test_attend_keyword_overrides_the_attribute():
    explicit, _ = _pair()
    q, k, v = (torch.randn(1, 5, 8, dtype=torch.float64) for _ in range(3))
    out, w = explicit.attend(q, k, v, fused=True)
    assert w is None
    torch.testing.assert_close(out, explicit.attend(q, k, v)[0])


def test_fused_is_an_attribute_not_state():
    m = AttentionLayer(4, 6, fused=True)
    assert set(m.state_dict()) == {"query.weight", "key.weight", "value.weight", "mask"}
    assert "fused=True" in repr(m)
    m2 = AttentionLayer(4, 6)
    m2.load_state_dict(m.state_dict())
    assert not m2.fused


def test_sdpa_mask_and_empty_rows():
    pad = torch.tensor([[False, True, True], [True, True, False]])
    allowed = sdpa_mask(pad, 3)
    assert allowed.shape == (2, 1, 3, 3)
    expected0 = torch.tensor([[False, False, False], [False, True, False], [False, True, True]])
    assert torch.equal(allowed[0, 0], expected0)
    expected1 = torch.tensor([[True, False, False], [True, True, False], [True, True, False]])
    assert torch.equal(allowed[1, 0], expected1)
    assert torch.equal(empty_rows(pad), torch.tensor([[True, False, False], [False] * 3]))


def test_fused_module_still_checks_inputs():
    m = AttentionLayer(8, 10, fused=True)
    with pytest.raises(ValueError, match="context_length=10"):
        m(torch.randn(1, 11, 8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fused_cuda_matches_cpu_explicit():
    explicit, fused = _pair(dtype=torch.float32)
    x = torch.randn(2, 10, 8)
    pad = random_padding(2, 10, "left")
    torch.testing.assert_close(fused.cuda()(x.cuda(), pad.cuda()).cpu(), explicit(x, pad),
                               rtol=1e-4, atol=1e-4)
