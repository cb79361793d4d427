"""Chapter 8's claims about PyTorch, pinned: each fails if the sentence it backs stops being true.

Chapter 8 (book/08_whole_module.md) and its appendix (book/testing_attention_code.md) make the
claims; the appendix's section "Which test pins which claim" names these tests. They run on the
CPU, the machine CI uses; where the behaviour depends on SDPA's kernel, the test names the kernel.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from conftest import random_padding
from torch import nn
from torch.autograd import gradcheck
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from attnbook import Attention
from attnbook.backward import WholeByHand, attention_by_hand, whole_forward

B, T, d = 2, 6, 4
TOL = {"rtol": 1e-10, "atol": 1e-10}


class RecordOps(TorchDispatchMode):
    """Record the name and arguments of every ATen operator that runs inside the block."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((str(func), args))
        return func(*args, **(kwargs or {}))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def mha_copy_of(m: Attention) -> nn.MultiheadAttention:
    """A one-head nn.MultiheadAttention computing what ``m`` computes."""
    mha = nn.MultiheadAttention(m.d_model, 1, bias=False, batch_first=True)
    mha = mha.to(m.query.weight.dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([m.query.weight, m.key.weight, m.value.weight]))
        mha.out_proj.weight.copy_(torch.eye(m.d_model))
    return mha


def qkv4(dtype=torch.float64):
    """Random (B, 1, T, d) queries, keys and values: 4-D, as the CPU flash kernel wants."""
    return tuple(torch.randn(B, 1, T, d, dtype=dtype) for _ in range(3))


# --- nn.MultiheadAttention is not independent of SDPA ------------------------------------------


@pytest.mark.parametrize("need_weights, sdpa_calls", [(False, 1), (True, 0)])
def test_mha_calls_sdpa_unless_it_returns_weights(need_weights, sdpa_calls):
    m = Attention(d, T).double()
    mha = mha_copy_of(m)
    x = torch.randn(B, T, d, dtype=torch.float64)
    sdpa = F.scaled_dot_product_attention
    with mock.patch("torch.nn.functional.scaled_dot_product_attention", wraps=sdpa) as spy:
        with RecordOps() as ops:
            mha(x, x, x, attn_mask=m.mask, need_weights=need_weights)
    assert spy.call_count == sdpa_calls
    # MHA passes 4-D (B, h, T, d_h) tensors, so on the CPU SDPA picks its flash kernel.
    flash = "aten._scaled_dot_product_flash_attention_for_cpu.default"
    assert (flash in ops.names) == (not need_weights)
    # need_weights=True takes a separate path that builds the weights with its own softmax.
    assert ("aten._softmax.default" in ops.names) == need_weights


def test_mha_sdpa_call_comes_from_multi_head_attention_forward_not_the_fast_path():
    """The SDPA call is F.multi_head_attention_forward's (need_weights=False), not the fast path.

    The chapter's copy has one head and stays in training mode, so nn.MultiheadAttention's
    inference fast path (torch._native_multi_head_attention) is ruled out twice over; the
    Python function the module calls is what hands Q, K, V to SDPA.
    """
    import inspect

    m = Attention(d, T).double()
    mha = mha_copy_of(m)
    x = torch.randn(B, T, d, dtype=torch.float64)
    callers = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        callers.append(inspect.stack()[1].function)
        return sdpa(*args, **kwargs)

    for module in (mha, mha.eval()):  # training mode, then eval: one head, still no fast path
        with mock.patch("torch.nn.functional.scaled_dot_product_attention", new=spy), \
                mock.patch("torch._native_multi_head_attention") as fast, torch.no_grad():
            module(x, x, x, attn_mask=m.mask, need_weights=False)
        assert fast.call_count == 0
    assert callers == ["multi_head_attention_forward"] * 2


def test_mha_with_weights_agrees_with_ours():
    m = Attention(d, T).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, "right")
    out, weights = m(x, pad, return_weights=True)
    # Masks written out, not taken from the module or attnbook's converters (True = blocked).
    future = ~torch.ones(T, T, dtype=torch.bool).tril()
    ref, ref_weights = mha_copy_of(m)(x, x, x, attn_mask=future, key_padding_mask=~pad,
                                      need_weights=True)
    torch.testing.assert_close(out[pad], ref[pad], **TOL)
    torch.testing.assert_close(weights[pad], ref_weights[pad], **TOL)


# --- is_causal=True together with attn_mask: it depends on the kernel --------------------------


def test_is_causal_with_attn_mask_raises_on_the_math_kernel():
    q, k, v = qkv4()
    keys = random_padding(B, T, "right")[:, None, None, :]  # (B, 1, 1, T), True = may attend
    message = "Explicit attn_mask should not be set when is_causal=True"
    with pytest.raises(RuntimeError, match=message):  # 3-D input: SDPA uses the math kernel
        F.scaled_dot_product_attention(q[:, 0], k[:, 0], v[:, 0], attn_mask=keys[:, 0],
                                       is_causal=True)
    with pytest.raises(RuntimeError, match=message), sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(q, k, v, attn_mask=keys, is_causal=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_is_causal_with_attn_mask_on_the_cpu_flash_kernel_applies_both(dtype):
    q, k, v = qkv4(dtype)
    pad = random_padding(B, T, "left")
    keys = pad[:, None, None, :]  # (B, 1, 1, T), True = may attend
    with RecordOps() as ops:
        both = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, is_causal=True)
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops.names
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend
    merged = F.scaled_dot_product_attention(q, k, v, attn_mask=keys & causal)
    torch.testing.assert_close(both, merged, rtol=0, atol=0)  # the causal AND the padding mask
    assert not torch.allclose(both, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert not torch.allclose(both, F.scaled_dot_product_attention(q, k, v, attn_mask=keys))


def test_4d_float_input_picks_the_cpu_flash_kernel_and_3d_the_math_kernel():
    q, k, v = qkv4(torch.float32)
    with RecordOps() as ops:
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops.names
    with RecordOps() as ops:
        F.scaled_dot_product_attention(q[:, 0], k[:, 0], v[:, 0], is_causal=True)
    assert not any("flash" in name for name in ops.names)
    assert "aten._safe_softmax.default" in ops.names  # the math kernel: a whole (T, T) softmax


# --- tolerances --------------------------------------------------------------------------------


def test_math_kernel_scales_q_and_k_before_the_product():
    q, k, v = (t[:, 0].float() for t in qkv4())  # 3-D: the math kernel
    with RecordOps() as ops:
        F.scaled_dot_product_attention(q, k, v)
    first_product = ops.names.index("aten.bmm.default")
    factors = [args[1] for name, args in ops.calls[:first_product] if name == "aten.mul.Scalar"]
    # each of Q and K times d^(-1/4), so that their product carries 1/sqrt(d)
    assert factors == pytest.approx([d**-0.25, d**-0.25])


def test_assert_close_float32_default_atol_is_1e_5():
    zero = torch.zeros(1)
    torch.testing.assert_close(zero + 0.9e-5, zero)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(zero + 1.1e-5, zero)


def test_gradcheck_needs_float64():
    m = Attention(3, 5)
    x = torch.randn(1, 5, 3, requires_grad=True)
    with pytest.warns(UserWarning, match="not a double precision"):
        assert not gradcheck(m, (x,), raise_exception=False)
    assert gradcheck(m.double(), (x.detach().double().requires_grad_(),))


# --- a mask mistake from the exercises ---------------------------------------------------------


def test_unflipped_key_padding_mask_gives_empty_rows():
    """Ex. ex-whole-kpm: our padding_mask passed as MHA's key_padding_mask, right padding."""
    m = Attention(d, T).double()
    mha = mha_copy_of(m)
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = torch.tensor([[True] * 4 + [False] * 2, [True] * 3 + [False] * 3])
    without, _ = mha(x, x, x, attn_mask=m.mask, key_padding_mask=pad, need_weights=False)
    with_w, w = mha(x, x, x, attn_mask=m.mask, key_padding_mask=pad, need_weights=True)
    # every real query sees no key: zeros through SDPA, NaN through the weights' softmax
    assert (without[pad] == 0).all()
    assert with_w[pad].isnan().all() and w[pad].isnan().all()


# --- order: unmasked stacks stay blind, a causal layer sees a multiset -------------------------


def test_a_stack_of_unmasked_layers_is_still_permutation_equivariant():
    """Ch. 7-8: a composition of equivariant layers is equivariant, so depth adds no order."""
    layers = [Attention(d, T).double() for _ in range(3)]
    for layer in layers:
        layer.mask.fill_(False)  # a copy that blocks nothing

    def stack(x):
        for layer in layers:
            x = torch.tanh(layer(x))  # a per-token layer between the attention layers
        return x

    x = torch.randn(B, T, d, dtype=torch.float64)
    perm = torch.randperm(T)
    with torch.no_grad():
        torch.testing.assert_close(stack(x[:, perm]), stack(x)[:, perm], **TOL)


def test_one_causal_layer_sees_the_multiset_before_a_query_and_a_stack_sees_more():
    """Ch. 7-8: reorder tokens 0..i-1: one causal layer's output i stays, two layers' moves."""
    torch.manual_seed(0)
    attn = Attention(d, T).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    perm = torch.tensor([2, 0, 1, 3, 4, 5])  # reorder the three tokens before position 3
    with torch.no_grad():
        torch.testing.assert_close(attn(x[:, perm])[:, 3:], attn(x)[:, 3:], **TOL)
        two, two_perm = attn(attn(x)), attn(attn(x[:, perm]))
    assert (two[:, 3] - two_perm[:, 3]).abs().max() > 1e-3


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_padding_vector_reaches_every_real_output_of_its_sequence(bad):
    """Ch. 5 and Theorem 8.2: 0 * NaN = NaN in A V, even where the causal mask hides the key."""
    m = Attention(d, T).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = torch.tensor([[True] * 4 + [False] * 2, [True] * T])  # right padding, then none
    x[0, 5] = bad  # the last padding token, after every real query of sequence 0
    out = m(x, pad)
    assert out[0, pad[0]].isnan().all()  # every real query of that sequence
    assert out[1].isfinite().all()  # the other sequence is untouched


# --- the whole module's backward, derived by hand (chapter 8, "The backward pass") ------------

PADDINGS = {
    "none": None,
    "right": torch.tensor([[True] * 4 + [False] * 2, [True] * T]),
    # left padding: queries 0 and 1 of sequence 0 see no real key (empty rows)
    "left": torch.tensor([[False, False] + [True] * 4, [False] + [True] * 5]),
}


def grads_of(m, x, g, pad, by_hand: bool):
    """dL/dx and the three weights' .grad for L = sum(g * y), by autograd or by hand."""
    x = x.detach().requires_grad_()
    m.zero_grad(set_to_none=True)
    y = attention_by_hand(m, x, pad) if by_hand else m(x, pad)
    y.backward(g)
    return y.detach(), [x.grad] + [lin.weight.grad for lin in (m.query, m.key, m.value)]


@pytest.mark.parametrize("padding", PADDINGS)
def test_the_hand_derived_backward_is_autograds(padding):
    """dV = AᵀG, dA = GVᵀ, dS = A ⊙ (dA − rowsum(A ⊙ dA)), dQ = dS K/√d, dK = dSᵀ Q/√d,
    then dx, dW_q, dW_k, dW_v through the projections: equal to autograd's in float64."""
    torch.manual_seed(0)
    m = Attention(d, T).double()
    x, g = torch.randn(B, T, d, dtype=torch.float64), torch.randn(B, T, d, dtype=torch.float64)
    pad = PADDINGS[padding]
    y_auto, auto = grads_of(m, x, g, pad, by_hand=False)
    y_hand, hand = grads_of(m, x, g, pad, by_hand=True)
    torch.testing.assert_close(y_hand, y_auto, rtol=0, atol=0)  # the same forward
    for a, h in zip(auto, hand):
        torch.testing.assert_close(h, a, **TOL)


@pytest.mark.parametrize("padding", PADDINGS)
def test_the_hand_derived_backward_passes_gradcheck(padding):
    """gradcheck holds the hand derivation itself to central finite differences (float64)."""
    torch.manual_seed(0)
    m = Attention(d, T).double()
    causal, pad = m.mask[:T, :T], PADDINGS[padding]
    inputs = [torch.randn(B, T, d, dtype=torch.float64, requires_grad=True)]
    inputs += [lin.weight.detach().clone().requires_grad_() for lin in (m.query, m.key, m.value)]
    assert gradcheck(lambda x, wq, wk, wv: WholeByHand.apply(x, wq, wk, wv, causal, pad), inputs)


def mutant_backward(g, x, wq, wk, wv, saved, *, scale=True, rowsum=True):
    """whole_backward with one term of the derivation left out (a copy, mutated on purpose)."""
    q, k, v, a = saved
    dv, da = a.transpose(-2, -1) @ g, g @ v.transpose(-2, -1)
    ds = a * (da - (a * da).sum(dim=-1, keepdim=True)) if rowsum else a * da
    c = 1 / q.size(-1) ** 0.5 if scale else 1.0
    dq, dk = ds @ k * c, ds.transpose(-2, -1) @ q * c
    dws = (torch.einsum("bti,btj->ij", dt, x) for dt in (dq, dk, dv))
    return dq @ wq + dk @ wk + dv @ wv, *dws


@pytest.mark.parametrize("left_out", ["scale", "rowsum"])
def test_a_backward_without_the_scale_or_the_rowsum_fails_gradcheck(left_out):
    """The check can fail: leave 1/√d out of dQ and dK, or the rowsum term out of dS, and
    gradcheck reports a mismatch; the copy with nothing left out passes."""

    class Mutant(WholeByHand):
        @staticmethod
        def backward(ctx, g, **kwargs):
            x, wq, wk, wv, *saved = ctx.saved_tensors
            return (*mutant_backward(g, x, wq, wk, wv, saved, **kwargs), None, None)

    class Broken(Mutant):
        @staticmethod
        def backward(ctx, g):
            return Mutant.backward(ctx, g, **{left_out: False})

    torch.manual_seed(0)
    m = Attention(d, T).double()
    inputs = [torch.randn(B, T, d, dtype=torch.float64, requires_grad=True)]
    inputs += [lin.weight.detach().clone().requires_grad_() for lin in (m.query, m.key, m.value)]
    causal = m.mask[:T, :T]
    for fn, passes in ((Mutant, True), (Broken, False)):
        assert gradcheck(lambda x, wq, wk, wv, fn=fn: fn.apply(x, wq, wk, wv, causal, None),
                         inputs,
                         raise_exception=False) == passes


def test_blocked_entries_get_no_gradient_and_the_rowsum_is_d_y_dot_y():
    """dS is 0 wherever A is 0 (future keys, padding, empty rows), and rowsum(A ⊙ dA) equals
    rowsum(G ⊙ Y), the D that chapters 10 and 18 compute from the saved output."""
    torch.manual_seed(0)
    m = Attention(d, T).double()
    x, g = torch.randn(B, T, d, dtype=torch.float64), torch.randn(B, T, d, dtype=torch.float64)
    pad = PADDINGS["left"]
    with torch.no_grad():
        w = [lin.weight for lin in (m.query, m.key, m.value)]
        y, (q, k, v, a) = whole_forward(x, *w, m.mask[:T, :T], pad)
        da = g @ v.transpose(-2, -1)
        rowsum = (a * da).sum(-1)
        ds = a * (da - rowsum[..., None])
    blocked = m.mask[:T, :T] | ~pad[:, None, :]
    assert (ds[blocked] == 0).all() and (ds[0, :2] == 0).all()  # future, padding, empty rows
    torch.testing.assert_close(rowsum, (g * y).sum(-1), **TOL)


def test_the_hand_derived_backward_checks_its_input_like_the_module():
    """Too long a sequence, the wrong width or dtype, a padding mask of the wrong shape: the
    module's own clear errors, not a shape error from inside the backward."""
    m = Attention(d, T).double()
    for x in (torch.randn(B, T + 1, d, dtype=torch.float64),
              torch.randn(B, T, d + 1, dtype=torch.float64),
              torch.randn(B, T, d)):
        with pytest.raises((ValueError, TypeError)) as hand:
            attention_by_hand(m, x)
        with pytest.raises((ValueError, TypeError)) as module:
            m(x)
        assert str(hand.value) == str(module.value)
    with pytest.raises(ValueError):
        attention_by_hand(m, torch.randn(B, T, d, dtype=torch.float64),
                          torch.ones(B, T + 1, dtype=torch.bool))
