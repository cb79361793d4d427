"""What chapters 9 to 12 say about PyTorch's behaviour, pinned on the CPU.

Each test names the chapter's claim it backs. If a new PyTorch changes the behaviour, the test
fails and the chapter must change with it. Kernels are named by the operator they run:
``_scaled_dot_product_flash_attention_for_cpu`` (the CPU flash kernel) or batched matmuls and a
softmax (the math kernel).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from attnbook import Attention, AttentionLayer
from attnbook.exercises.cost import LiveTensorBytes

FLASH = "_scaled_dot_product_flash_attention_for_cpu"
CAUSAL_THEN_MASK = "Explicit attn_mask should not be set when is_causal=True"


class Calls(TorchDispatchMode):
    """Every operator a call runs, with its arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func.__name__, args, kwargs or {}))
        return func(*args, **(kwargs or {}))

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]


def qkv(shape, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g, dtype=dtype).requires_grad_(grad) for _ in range(3)]


def ops_forward_backward(q, k, v, **kwargs) -> list[str]:
    with Calls() as log:
        F.scaled_dot_product_attention(q, k, v, **kwargs).sum().backward()
    return log.names


# ---- Chapter 11, "Which kernel runs" --------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_4d_input_runs_the_cpu_flash_kernel_forward_and_backward(dtype):
    names = ops_forward_backward(*qkv((2, 1, 16, 8), dtype, grad=True), is_causal=True)
    assert f"{FLASH}.default" in names
    assert f"{FLASH}_backward.default" in names
    assert not any("bmm" in n or "softmax" in n for n in names)


def test_4d_input_with_a_bool_mask_also_runs_the_flash_kernel():
    q, k, v = qkv((2, 1, 16, 8), grad=True)
    allowed = torch.ones(16, 16, dtype=torch.bool).tril()
    names = ops_forward_backward(q, k, v, attn_mask=allowed)
    assert f"{FLASH}.default" in names and f"{FLASH}_backward.default" in names


def test_3d_input_runs_the_math_kernel_forward_and_backward():
    names = ops_forward_backward(*qkv((2, 16, 8), grad=True), is_causal=True)
    assert not any(FLASH in n for n in names)
    assert names.count("bmm.default") >= 2  # Q Kᵀ and A V
    assert any("softmax" in n for n in names)
    assert "_softmax_backward_data.default" in names


def test_3d_input_materialises_the_scores_4d_does_not():
    """Chapter 11: the math kernel builds (T, T) tensors, the flash kernel does not."""
    B, T, d = 2, 256, 8
    q, k, v = qkv((B, T, d))
    tt = B * T * T * 4
    with torch.no_grad():
        three = LiveTensorBytes.of(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        four = LiveTensorBytes.of(lambda: F.scaled_dot_product_attention(
            q[:, None], k[:, None], v[:, None], is_causal=True))
    assert three >= tt
    assert four < tt / 4


# ---- Chapter 11, "is_causal and attn_mask together" -----------------------------------------

def test_both_masks_raise_on_3d_input():
    q, k, v = qkv((2, 6, 8))
    with pytest.raises(RuntimeError, match=CAUSAL_THEN_MASK):
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(6, 6, dtype=torch.bool),
                                       is_causal=True)


def test_both_masks_raise_on_the_math_kernel_even_for_4d_input():
    q, k, v = qkv((2, 1, 6, 8))
    with sdpa_kernel(SDPBackend.MATH), pytest.raises(RuntimeError, match=CAUSAL_THEN_MASK):
        F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(6, 6, dtype=torch.bool),
                                       is_causal=True)


@pytest.mark.parametrize("float_mask", [False, True])
def test_both_masks_on_the_cpu_flash_kernel_apply_both(float_mask):
    """4-D float input on the CPU: no error, and a key is blocked if either mask blocks it."""
    q, k, v = qkv((2, 1, 6, 8))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()  # SDPA's convention: True = may attend
    key_ok = torch.tensor([True, True, True, False, True, True]).expand(6, 6)
    mask = key_ok
    if float_mask:
        mask = torch.zeros(6, 6).masked_fill(~key_ok, float("-inf"))
    with Calls() as log:
        both = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
    assert f"{FLASH}.default" in log.names
    merged = F.scaled_dot_product_attention(q, k, v, attn_mask=causal & key_ok)
    torch.testing.assert_close(both, merged)
    assert not torch.allclose(both, F.scaled_dot_product_attention(q, k, v, attn_mask=key_ok))
    assert not torch.allclose(both, F.scaled_dot_product_attention(q, k, v, is_causal=True))


# ---- Chapter 11, "Rows with no visible key" --------------------------------------------------

@pytest.mark.parametrize("backend", [None, SDPBackend.MATH])
def test_all_blocked_rows_give_zeros_on_cpu(backend):
    """PyTorch 2.13 on the CPU, flash and math kernels alike: an all-blocked row outputs zeros."""
    q, k, v = qkv((2, 1, 6, 8))
    real = torch.ones(2, 6, dtype=torch.bool)
    real[0, :2] = False  # left padding: queries 0 and 1 of sequence 0 see no real key
    allowed = real[:, None, None, :] & torch.ones(6, 6, dtype=torch.bool).tril()
    if backend is None:
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    else:
        with sdpa_kernel(backend):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.equal(y[0, 0, :2], torch.zeros(2, 8))


# ---- Chapter 11, nn.MultiheadAttention -------------------------------------------------------

def mha_and_input(heads=1, d=8, T=6, bias=False):
    torch.manual_seed(0)
    return nn.MultiheadAttention(d, heads, bias=bias, batch_first=True), torch.randn(2, T, d)


def kernel_calls(log: Calls) -> list[tuple[bool, torch.Tensor | None]]:
    """(is_causal, attn_mask) of every flash-kernel call."""
    out = []
    for name, args, kwargs in log.calls:
        if name.startswith(FLASH):
            out.append((bool(args[4]) if len(args) > 4 else False, kwargs.get("attn_mask")))
    return out


def test_mha_turns_a_bool_mask_into_a_float_mask_for_the_kernel():
    mha, x = mha_and_input()
    blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    with Calls() as log:
        mha(x, x, x, attn_mask=blocked, need_weights=False)
    (is_causal, mask), = kernel_calls(log)
    assert not is_causal
    assert mask is not None and mask.dtype == torch.float32 and mask.shape[-2:] == (6, 6)
    assert "masked_fill_.Scalar" in log.names  # a new float (T, T) tensor, on every call


def test_mha_is_causal_hint_calls_the_kernel_causal_without_a_mask():
    mha, x = mha_and_input()
    blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    with Calls() as log:
        y_hint = mha(x, x, x, attn_mask=blocked, is_causal=True, need_weights=False)[0]
    (is_causal, mask), = kernel_calls(log)
    assert is_causal and mask is None
    assert "masked_fill_.Scalar" in log.names  # the float mask is still built, then dropped
    y_mask = mha(x, x, x, attn_mask=blocked, need_weights=False)[0]
    torch.testing.assert_close(y_hint, y_mask)


def test_mha_is_causal_hint_needs_a_mask_and_is_not_checked():
    mha, x = mha_and_input()
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        mha(x, x, x, is_causal=True, need_weights=False)
    wrong = torch.zeros(6, 6, dtype=torch.bool)  # blocks nothing
    y_wrong_hint = mha(x, x, x, attn_mask=wrong, is_causal=True, need_weights=False)[0]
    y_causal = mha(x, x, x, attn_mask=torch.ones(6, 6, dtype=torch.bool).triu(1),
                   need_weights=False)[0]
    torch.testing.assert_close(y_wrong_hint, y_causal)


def test_mha_default_need_weights_runs_the_explicit_steps_not_sdpa():
    """Chapter 11: need_weights=True (the default) computes (B·h, T, T) scores and weights
    itself and returns the head-averaged weights; only need_weights=False calls SDPA."""
    mha, x = mha_and_input(heads=2)
    blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    with Calls() as log:
        y, w = mha(x, x, x, attn_mask=blocked)
    assert not any("scaled_dot_product" in n for n in log.names)
    assert any("softmax" in n for n in log.names)
    assert w.shape == (2, 6, 6)
    with Calls() as log:
        y_sdpa = mha(x, x, x, attn_mask=blocked, need_weights=False)[0]
    assert any("scaled_dot_product" in n for n in log.names)
    torch.testing.assert_close(y, y_sdpa)


@pytest.mark.parametrize("kwargs", [dict(need_weights=True),
                                    dict(need_weights=False,
                                         key_padding_mask=torch.zeros(2, 6, dtype=torch.bool))])
def test_mha_is_causal_hint_is_ignored_with_weights_or_key_padding(kwargs):
    mha, x = mha_and_input()
    blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    with Calls() as log:
        mha(x, x, x, attn_mask=blocked, is_causal=True, **kwargs)
    assert all(not is_causal for is_causal, _ in kernel_calls(log))


@pytest.mark.parametrize("heads, bias, fast", [(2, True, True), (1, True, False),
                                               (2, False, False)])
def test_mha_fast_path_needs_inference_even_heads_and_biases(heads, bias, fast, monkeypatch):
    """Chapter 11: the fast path runs in eval mode without autograd, with an even number of
    heads and with biases; one head without biases, as the book uses it, never takes it."""
    native = torch._native_multi_head_attention
    used = []

    def spy(*args, **kwargs):
        used.append(True)
        return native(*args, **kwargs)

    monkeypatch.setattr(torch, "_native_multi_head_attention", spy)
    mha, x = mha_and_input(heads=heads, bias=bias)
    mha.eval()
    with torch.inference_mode():
        mha(x, x, x, need_weights=False)
    assert bool(used) == fast
    used.clear()
    mha.train()
    mha(x, x, x, need_weights=False)
    assert not used


# ---- Chapter 9: the allocator setting the timings run under ----------------------------------

def test_keep_freed_memory_covers_buffers_up_to_32_mib_only():
    """Chapter 9: after ``keep_freed_memory`` glibc serves a 16 MiB buffer (a float32 (B, T, T)
    tensor at B = 4, T = 1024) from its heap, where freed memory is kept for reuse, but still maps
    a 64 MiB one (the same at T = 2048) fresh from the operating system."""
    import ctypes
    import ctypes.util

    from attnbook.lab.measure import keep_freed_memory

    if not keep_freed_memory():
        pytest.skip("the allocator setting needs glibc")
    try:
        mallinfo2 = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        pytest.skip("glibc without mallinfo2 (before 2.33)")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]

    mallinfo2.restype = MallInfo2

    def mapped_while_alive(nbytes: int) -> int:
        """Bytes glibc holds in mmap-ed blocks while a tensor of ``nbytes`` is alive, extra."""
        before = mallinfo2().hblkhd
        t = torch.empty(nbytes, dtype=torch.uint8)
        during = mallinfo2().hblkhd
        del t
        return during - before

    MiB = 2**20
    assert mapped_while_alive(16 * MiB) == 0
    assert mapped_while_alive(64 * MiB) >= 64 * MiB


# ---- Chapters 9 and 10: memory of the explicit module and of the tiled method ---------------

def test_explicit_forward_keeps_four_score_sized_tensors_alive():
    """Chapter 9: at its peak the explicit forward holds four (B, T, T) float32 tensors."""
    B, T, d = 2, 256, 16
    attn = Attention(d, T)
    x = torch.randn(B, T, d)
    with torch.no_grad():
        peak = LiveTensorBytes.of(lambda: attn(x))
    tt, qkvy = B * T * T * 4, 4 * B * T * d * 4
    assert round((peak - qkvy) / tt) == 4


def test_tiled_forward_holds_two_tiles_and_the_block_output_at_most():
    """Chapter 10, Exercise 10.3: besides Y and the log-sum-exp, the tiled forward holds at most
    2·B·b² numbers of tiles plus about 5·B·b·d for the query block (measured, b = 256 and 128)."""
    from attnbook.online import tiled_attention

    B, T, d = 2, 512, 32
    q, k, v = (torch.randn(B, T, d) for _ in range(3))
    for b in (256, 128):
        with torch.no_grad():
            peak = LiveTensorBytes.of(lambda b=b: tiled_attention(q, k, v, block_size=b))
        extra = peak - (B * T * d + B * T) * 4
        tiles_and_block = (2 * B * b * b + 5 * B * b * d + 8 * B * b) * 4
        assert extra <= tiles_and_block + 2 * b * b, (b, extra)  # + the (b, b) bool causal mask
        assert extra >= 2 * B * b * b * 4  # a tile of scores and its exponentials coexist


def test_fused_forward_holds_no_score_sized_tensor():
    B, T, d = 2, 256, 16
    attn = AttentionLayer(d, T, fused=True)
    x = torch.randn(B, T, d)
    with torch.no_grad():
        peak = LiveTensorBytes.of(lambda: attn(x))
    assert peak < B * T * T * 4 / 2


def test_fused_path_with_padding_passes_a_key_mask_and_is_causal():
    """Chapter 11: with padding, the fused path passes a (B, 1, 1, T) key mask *and*
    is_causal=True to the CPU flash kernel; no (B, T, T) tensor is built."""
    B, T, d = 2, 32, 8
    attn = AttentionLayer(d, T, fused=True)
    x = torch.randn(B, T, d)
    real = torch.ones(B, T, dtype=torch.bool)
    real[0, :3] = False
    with Calls() as log:
        attn(x, real)
    ((name, args, kwargs),) = [c for c in log.calls if c[0].startswith(FLASH)]
    assert kwargs["attn_mask"].shape == (B, 1, 1, T) and args[4] is True
    shapes = [tuple(t.shape) for _, a, _ in log.calls for t in a if isinstance(t, torch.Tensor)]
    assert not any(len(s) >= 2 and s[-2:] == (T, T) for s in shapes)
    with Calls() as log:
        attn(x)
    ((name, args, kwargs),) = [c for c in log.calls if c[0].startswith(FLASH)]
    assert kwargs.get("attn_mask") is None and args[4] is True  # no padding: is_causal, no mask


def test_sdpa_turns_a_bool_mask_into_a_float_mask_before_the_cpu_flash_kernel():
    """Chapter 11: the padding path pays 4·B·T² bytes for SDPA's float copy of the bool mask."""
    q, k, v = qkv((2, 1, 8, 4))
    allowed = torch.ones(2, 1, 8, 8, dtype=torch.bool).tril()
    with Calls() as log:
        F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    name, _, kwargs = [c for c in log.calls if c[0].startswith(FLASH)][0]
    mask = kwargs["attn_mask"]
    assert mask.dtype == torch.float32 and mask.shape == (2, 1, 8, 8)
    assert torch.equal(mask == 0, allowed) and bool(mask[~allowed].eq(float("-inf")).all())


def test_both_masks_raise_on_the_meta_device():
    """Chapter 11: the meta device takes the math kernel's checks, so the fused path uses the
    general route (one merged mask) on every device other than the CPU."""
    q, k, v = (torch.empty(2, 1, 5, 4, device="meta") for _ in range(3))
    key = torch.ones(2, 1, 1, 5, dtype=torch.bool, device="meta")
    with pytest.raises(RuntimeError, match=CAUSAL_THEN_MASK):
        F.scaled_dot_product_attention(q, k, v, attn_mask=key, is_causal=True)


def test_key_mask_with_is_causal_keeps_the_flash_kernel():
    """Chapter 11: a (B, 1, 1, T) key mask beside is_causal runs the CPU flash kernel, forward
    and backward, and equals the merged (B, 1, T, T) mask."""
    q, k, v = qkv((2, 1, 16, 8), grad=True)
    key = torch.ones(2, 1, 1, 16, dtype=torch.bool)
    key[0, ..., :5] = False
    names = ops_forward_backward(q, k, v, attn_mask=key, is_causal=True)
    assert f"{FLASH}.default" in names and f"{FLASH}_backward.default" in names
    merged = torch.ones(16, 16, dtype=torch.bool).tril() & key
    both = F.scaled_dot_product_attention(q, k, v, attn_mask=key, is_causal=True)
    torch.testing.assert_close(both, F.scaled_dot_product_attention(q, k, v, attn_mask=merged))
