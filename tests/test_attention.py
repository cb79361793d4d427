"""The contract of attnbook.Attention: agreement with PyTorch, masks, errors, devices, dtypes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import random_padding
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnbook import Attention, AttentionLayer


def reference_allowed(T: int, padding_mask=None, device=None) -> torch.Tensor:
    """True where query i may attend to key j, written out here from the definition.

    Not built with attnbook's ``blocked_positions`` or ``to_sdpa_mask``: a reference that builds
    its mask with the code under test shares that code's bugs
    (tests/test_reference_independence.py breaks ``blocked_positions`` to show it).

    Shape:
        (T, T) without padding_mask, (B, T, T) with a (B, T) padding_mask (True = real).
    """
    allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()  # key j <= query i
    if padding_mask is not None:
        allowed = allowed & padding_mask[:, None, :]  # ... and key j is a real token
    return allowed


def sdpa_reference(m: Attention, x: torch.Tensor, padding_mask=None) -> torch.Tensor:
    """The same attention through torch's scaled_dot_product_attention, mask built from scratch."""
    q, k, v = m.query(x), m.key(x), m.value(x)
    allowed = reference_allowed(x.shape[1], padding_mask, x.device)  # SDPA: True = may attend
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def mha_reference(m: Attention, x: torch.Tensor, padding_mask=None) -> torch.Tensor:
    """The same attention through a one-head nn.MultiheadAttention holding m's weights."""
    d, T = m.d_model, x.shape[1]
    mha = nn.MultiheadAttention(d, num_heads=1, bias=False, batch_first=True)
    mha = mha.to(device=x.device, dtype=x.dtype)
    with torch.no_grad():  # MHA keeps W_q, W_k, W_v stacked in one (3d, d) matrix
        mha.in_proj_weight.copy_(torch.cat([m.query.weight, m.key.weight, m.value.weight]))
        mha.out_proj.weight.copy_(torch.eye(d))
    ignore = None if padding_mask is None else ~padding_mask  # MHA: True = ignore this key
    out, _ = mha(x, x, x, attn_mask=~reference_allowed(T, device=x.device),  # True = blocked
                 key_padding_mask=ignore, need_weights=False)
    return out


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 12), d=st.integers(1, 16), seed=st.integers(0, 10**6))
def test_matches_sdpa_causal(B, T, d, seed):
    torch.manual_seed(seed)
    m = Attention(d, context_length=16).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    torch.testing.assert_close(m(x), sdpa_reference(m, x), rtol=1e-10, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 12), d=st.integers(1, 16), seed=st.integers(0, 10**6),
       side=st.sampled_from(["right", "left"]))
def test_matches_sdpa_with_padding(B, T, d, seed, side):
    g = torch.Generator().manual_seed(seed)
    m = Attention(d, context_length=16).double()
    x = torch.randn(B, T, d, dtype=torch.float64, generator=g)
    pad = random_padding(B, T, side, generator=g)
    out, ref = m(x, pad), sdpa_reference(m, x, pad)
    # Padded queries' rows are ignored by every consumer; compare the real ones.
    torch.testing.assert_close(out[pad], ref[pad], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("seed", range(3))
def test_matches_multihead_attention(seed, side):
    torch.manual_seed(seed)
    B, T, d = 3, 9, 12
    m = Attention(d, context_length=T).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, side)
    torch.testing.assert_close(m(x, pad)[pad], mha_reference(m, x, pad)[pad],
                               rtol=1e-10, atol=1e-10)


def test_weights_are_causal_distributions():
    m = Attention(6, 8)
    _, w = m(torch.randn(2, 8, 6), return_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 8))
    assert (w.triu(diagonal=1) == 0).all()


@pytest.mark.parametrize("t", [0, 3, 6])
def test_causality_future_changes_nothing_before(t):
    m = Attention(8, 10).double()
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    y = x.clone()
    y[:, t + 1 :] = torch.randn_like(y[:, t + 1 :]) * 100
    torch.testing.assert_close(m(x)[:, : t + 1], m(y)[:, : t + 1], rtol=0, atol=1e-12)
    assert not torch.allclose(m(x)[:, t + 1 :], m(y)[:, t + 1 :])  # the future did change


def test_causality_by_gradient():
    m = Attention(4, 6).double()
    x = torch.randn(1, 6, 4, dtype=torch.float64, requires_grad=True)
    i = 2
    m(x)[0, i].sum().backward()
    assert (x.grad[0, i + 1 :] == 0).all()
    assert (x.grad[0, : i + 1] != 0).any()


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_invariance(side):
    m = Attention(8, 12).double()
    B, T = 4, 12
    x = torch.randn(B, T, 8, dtype=torch.float64)
    pad = random_padding(B, T, side)
    y = torch.where(pad[..., None], x, torch.randn_like(x) * 1e3)  # new junk where padded
    torch.testing.assert_close(m(x, pad)[pad], m(y, pad)[pad], rtol=0, atol=1e-10)


def test_left_padding_gives_zero_rows_and_finite_grads():
    m = Attention(8, 6)
    x = torch.randn(2, 6, 8, requires_grad=True)
    pad = torch.tensor([[False, False, True, True, True, True], [True] * 6])
    out, w = m(x, pad, return_weights=True)
    assert torch.isfinite(out).all()
    assert (out[0, :2] == 0).all(), "queries that see only padding must output zeros"
    assert (w[0, :2] == 0).all()
    torch.testing.assert_close(w[0, 2:].sum(-1), torch.ones(4))
    out.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for p in m.parameters():
        assert torch.isfinite(p.grad).all()


def test_all_padding_sequence_is_finite():
    m = Attention(4, 5)
    x = torch.randn(1, 5, 4, requires_grad=True)
    out = m(x, torch.zeros(1, 5, dtype=torch.bool))
    assert (out == 0).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_seed_nans_where_we_do_not():
    from attnbook.seed import Attention as Seed

    original = Seed(4, 5)
    x = torch.randn(1, 5, 4)
    pad = torch.tensor([[False, True, True, True, True]])
    assert torch.isnan(original(x, pad)[0, 0]).all(), "the original module's flaw, reproduced"
    ours = Attention(4, 5)
    ours.load_state_dict(original.state_dict())
    assert torch.isfinite(ours(x, pad)).all()


def test_gradcheck():
    m = Attention(3, 5).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    pad = torch.tensor([[False, True, True, True, True], [True, True, True, False, False]])
    assert torch.autograd.gradcheck(lambda t: m(t, pad), (x,))
    assert torch.autograd.gradcheck(lambda t: m(t), (x,))


def test_huge_logits_stay_finite():
    m = Attention(4, 6)
    with torch.no_grad():
        m.query.weight.copy_(torch.eye(4) * 1e3)
        m.key.weight.copy_(torch.eye(4) * 1e3)
    x = torch.randn(2, 6, 4)
    out, w = m(x, return_weights=True)
    assert m.query(x).abs().max() > 100  # logits around 1e6: exp would overflow unshifted
    assert torch.isfinite(out).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 6))


@pytest.mark.parametrize(
    "x, pad, exc, words",
    [
        (torch.randn(5, 8), None, ValueError, ["3-D", "(B, T, d_model)", "unsqueeze"]),
        (torch.randn(1, 2, 5, 8), None, ValueError, ["3-D", "4-D"]),
        (torch.randn(2, 5, 7), None, ValueError, ["d_model=8", "7"]),
        (torch.randn(2, 11, 8), None, ValueError, ["context_length=10", "T=11"]),
        (torch.ones(2, 5, 8, dtype=torch.long), None, TypeError, ["floating", "int64"]),
        ([[1.0] * 8], None, TypeError, ["torch.Tensor", "list"]),
        (torch.randn(2, 5, 8), torch.ones(2, 5), TypeError, ["torch.bool", "float32"]),
        (torch.randn(2, 5, 8), torch.ones(2, 4).bool(), ValueError, ["(2, 5)", "(2, 4)"]),
        (torch.randn(2, 5, 8), torch.ones(5, dtype=torch.bool), ValueError, ["(B, T)", "(5,)"]),
        (torch.randn(2, 5, 8), [[True] * 5] * 2, TypeError, ["padding_mask", "list"]),
    ],
)
def test_bad_input_errors_name_what_was_expected(x, pad, exc, words):
    m = Attention(8, 10)
    with pytest.raises(exc) as info:
        m(x, pad)
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


def test_constructor_rejects_nonpositive_sizes():
    with pytest.raises(ValueError, match="positive"):
        Attention(0, 4)


def test_runs_on_meta_device():
    with torch.device("meta"):
        m = Attention(16, 32)
    x = torch.empty(2, 7, 16, device="meta")
    pad = torch.ones(2, 7, dtype=torch.bool, device="meta")
    out = m(x, pad)
    assert out.device.type == "meta" and out.shape == (2, 7, 16)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2),
                                        (torch.float16, 3e-3)])
def test_low_precision_close_to_float64(dtype, tol):
    m = Attention(16, 12).double()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    pad = random_padding(2, 12, "left")
    ref = m(x, pad)
    out = m.to(dtype)(x.to(dtype), pad)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol * 4)


def test_buffer_follows_dtype_and_device_but_is_not_a_parameter():
    m = Attention(4, 6)
    assert "mask" in dict(m.named_buffers())
    assert "mask" not in dict(m.named_parameters())
    assert m.mask.dtype == torch.bool and m.causal_mask is m.mask
    assert sum(p.numel() for p in m.parameters()) == 3 * 4 * 4
    assert m.double().mask.dtype == torch.bool  # .double() casts parameters, not the mask


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu():
    m = Attention(8, 10).double()
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    pad = random_padding(2, 10, "left")
    torch.testing.assert_close(m.cuda()(x.cuda(), pad.cuda()).cpu(), m.cpu()(x, pad))


def test_attend_on_heads_matches_sdpa_4d():
    """AttentionLayer.attend() on (B, h, T, d_h): scales by sqrt(d_h), shares the padding."""
    m = AttentionLayer(8, 10).double()
    B, h, T, d_h = 2, 4, 7, 2
    q, k, v = (torch.randn(B, h, T, d_h, dtype=torch.float64) for _ in range(3))
    pad = random_padding(B, T, "left")
    out, w = m.attend(q, k, v, pad)
    allowed = reference_allowed(T, pad)[:, None]  # (B, 1, T, T)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    real = pad[:, None, :, None].expand_as(out)
    torch.testing.assert_close(out[real], ref[real])
    assert w.shape == (B, h, T, T)


def test_core_attend_refuses_heads_with_padding():
    """The core module's steps are for (B, T, d): a (B, T, T) padding mask against (B, h, T, T)
    scores would line the batch up with the heads, so it is refused, naming the fix."""
    q = torch.randn(2, 4, 7, 2)
    with pytest.raises(ValueError, match=r"blocked\[:, None\]"):
        Attention(8, 10).attend(q, q, q, random_padding(2, 7, "left"))


def test_moved_options_name_their_layer():
    """Options of later chapters are refused by the core module with the layer that has them."""
    x = torch.randn(1, 3, 8)
    for call, where in [(lambda: Attention(8, 16, fused=True), "AttentionLayer"),
                        (lambda: Attention(8, 16, True), "AttentionLayer"),
                        (lambda: Attention(8, 16, position="rope"), "AttentionLayer"),
                        (lambda: Attention(8, 16, n_heads=2), "MultiHeadAttention"),
                        (lambda: Attention(8, 16)(x, mask_mod=None), "AttentionLayer"),
                        (lambda: Attention(8, 16)(x, positions=None), "AttentionLayer")]:
        with pytest.raises(TypeError, match=where):
            call()
    torch.manual_seed(0)
    core = Attention(8, 16)
    torch.manual_seed(0)
    layer = AttentionLayer(8, 16)
    assert core.state_dict().keys() == layer.state_dict().keys()
    torch.testing.assert_close(core(x), layer(x), rtol=0, atol=0)
    view = AttentionLayer.of(core)  # the same parameter objects, nothing drawn
    assert view.query is core.query and view.mask is core.mask


def test_softmax_jacobian_matches_autograd():
    from attnbook.softmax import softmax_jacobian, stable_softmax

    s = torch.randn(5, dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(stable_softmax, s)
    torch.testing.assert_close(softmax_jacobian(stable_softmax(s)), auto)


def test_old_lab_module_paths_still_import_the_moved_modules():
    """Editions handed out before the lab helpers moved import attnbook.notebook etc.; the old
    path gives the same module object, and `import attnbook` alone loads none of the lab."""
    import importlib
    import subprocess
    import sys

    code = ("import sys, attnbook; assert not [m for m in sys.modules "
            "if m.startswith('attnbook.lab')], 'import attnbook loaded the lab'")
    subprocess.run([sys.executable, "-c", code], check=True)
    for name in ("notebook", "predict", "tasks", "measure"):
        assert importlib.import_module(f"attnbook.{name}") is \
            importlib.import_module(f"attnbook.lab.{name}")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("attnbook.no_such_module")


def test_the_core_listing_fits_chapter_0():
    """Ch. 0 shows Attention.forward and Attention.attend: together at most 30 lines, and they
    name none of the later chapters' options (those live in AttentionLayer)."""
    import inspect
    import re

    source = inspect.getsource(Attention.forward) + inspect.getsource(Attention.attend)
    lines = [line for line in source.splitlines() if line.strip()]
    assert len(lines) <= 30, len(lines)
    later = re.compile(r"fused|rope|alibi|rotary|mask_mod|score_mod|repeat_kv|n_kv_heads|"
                       r"\bpositions\b|materialize|cache", re.I)
    assert not later.findall(source), later.findall(source)
