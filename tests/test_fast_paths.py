"""Issue 12, section 1: the fused path with padding runs at full speed, with no host reads.

* it reaches the CPU flash kernel forward and backward, single- and multi-head, with and
  without padding (a regression to the math kernel fails here);
* no (B, T, T) tensor is built with padding; the general route (other devices) builds one;
* no forward path reads a tensor's value on the host (no ``bool(t)``, ``.item()``, ``.tolist()``);
* the same code traces under ``torch.compile(fullgraph=True)`` and runs on the meta device.
"""

from __future__ import annotations

import pytest
import torch
from conftest import random_padding
from torch.utils._python_dispatch import TorchDispatchMode

from attnbook import Attention, AttentionLayer, MultiHeadAttention
from attnbook.fused import fused_attention, general_masked_attention
from attnbook.kv_cache import KVCache, cached_attention

FLASH = "_scaled_dot_product_flash_attention_for_cpu"
HOST_READS = {"_local_scalar_dense", "is_nonzero", "item"}


class Ops(TorchDispatchMode):
    """Names and argument shapes of every operator a call runs."""

    def __init__(self):
        super().__init__()
        self.names, self.shapes = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__.split(".")[0])
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for t in [*args, *outs]:
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def mixed_padding(B, T):
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, : T // 4] = False  # left
    pad[1, -T // 3 :] = False  # right
    if B > 2:
        pad[2, [1, T // 2]] = False  # holes
    return pad


MODULES = [lambda: AttentionLayer(16, 32, fused=True),
           lambda: MultiHeadAttention(16, 32, 4, fused=True),
           lambda: MultiHeadAttention(16, 32, 4, fused=True, n_kv_heads=2)]


@pytest.mark.parametrize("make", MODULES, ids=["one-head", "multi-head", "grouped-query"])
@pytest.mark.parametrize("padded", [False, True])
def test_fused_paths_reach_the_cpu_flash_kernel_forward_and_backward(make, padded):
    m = make()
    x = torch.randn(3, 32, 16, requires_grad=True)
    pad = mixed_padding(3, 32) if padded else None
    with Ops() as log:
        m(x, pad).sum().backward()
    assert FLASH in log.names and f"{FLASH}_backward" in log.names
    assert not any(n in ("bmm", "_softmax", "baddbmm") for n in log.names)  # no math kernel


@pytest.mark.parametrize("make", MODULES, ids=["one-head", "multi-head", "grouped-query"])
def test_no_score_sized_tensor_with_padding(make):
    m, T = make(), 32
    with Ops() as log:
        m(torch.randn(3, T, 16), mixed_padding(3, T))
    assert not any(len(s) >= 2 and s[-2:] == (T, T) for s in log.shapes)


def test_general_route_builds_a_score_sized_mask_and_equals_the_fused_path():
    """The route for devices whose kernels refuse is_causal with a mask: a (B, 1, T, T) mask."""
    q, k, v = (torch.randn(3, 2, 12, 4, dtype=torch.float64) for _ in range(3))
    pad = mixed_padding(3, 12)
    with Ops() as log:
        out = general_masked_attention(q, k, v, pad)
    assert (3, 1, 12, 12) in log.shapes
    torch.testing.assert_close(out, fused_attention(q, k, v, pad))


@pytest.mark.parametrize("make", MODULES, ids=["one-head", "multi-head", "grouped-query"])
@pytest.mark.parametrize("padded", [False, True])
def test_no_host_reads_on_the_forward_paths(make, padded):
    m = make()
    x, pad = torch.randn(3, 32, 16), (mixed_padding(3, 32) if padded else None)
    with Ops() as log:
        m(x, pad)  # fused
        m.fused = False
        m(x, pad)  # explicit
        cache = KVCache.for_module(m, 3)
        cached_attention(m, x[:, :20], cache, None if pad is None else pad[:, :20])
        cached_attention(m, x[:, 20:21], cache, None if pad is None else pad[:, 20:21])
        cached_attention(m, x[:, 21:25], cache, None if pad is None else pad[:, 21:25])
    assert not HOST_READS & set(log.names), sorted(HOST_READS & set(log.names))


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("heads", [1, 4])
def test_fused_path_compiles_with_fullgraph(padded, heads):
    torch._dynamo.reset()
    m = AttentionLayer(16, 32, fused=True) if heads == 1 else MultiHeadAttention(16, 32, heads,
                                                                            fused=True)
    x = torch.randn(2, 32, 16)
    pad = random_padding(2, 32, "left") if padded else None
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")  # traced to ATen
    torch.testing.assert_close(compiled(x, pad), m(x, pad))


@pytest.mark.parametrize("padded", [False, True])
def test_fused_path_runs_on_the_meta_device(padded):
    m = MultiHeadAttention(16, 32, 4, fused=True).to("meta")
    x = torch.empty(2, 32, 16, device="meta")
    pad = torch.ones(2, 32, dtype=torch.bool, device="meta") if padded else None
    out = m(x, pad)
    assert out.device.type == "meta" and out.shape == (2, 32, 16)


@pytest.mark.parametrize("side", ["left", "right", "mixed"])
@pytest.mark.parametrize("heads", [1, 4])
def test_fused_equals_explicit_with_every_padding_pattern(side, heads):
    torch.manual_seed(1)
    explicit = (Attention(16, 24) if heads == 1 else MultiHeadAttention(16, 24, heads)).double()
    x = torch.randn(3, 24, 16, dtype=torch.float64, requires_grad=True)
    pad = mixed_padding(3, 24) if side == "mixed" else random_padding(3, 24, side)
    ref = explicit(x, pad)
    g = torch.randn_like(ref)
    (gx_ref,) = torch.autograd.grad(ref, x, g)
    explicit.fused = True
    out = explicit(x, pad)
    (gx,) = torch.autograd.grad(out, x, g)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-10, atol=1e-10)


def test_tiny_model_trains_on_the_fused_path_and_forms_weights_only_when_asked():
    from attnbook import TinyConfig, TinyModel

    T = 12
    model = TinyModel(TinyConfig(vocab_size=7, context_length=T, d_model=16, n_heads=4))
    idx = torch.randint(7, (2, T))
    with Ops() as log:
        model(idx).sum().backward()
    assert log.names.count(FLASH) == 2 and log.names.count(f"{FLASH}_backward") == 2
    assert not any(len(s) >= 2 and s[-2:] == (T, T) for s in log.shapes if len(s) == 4)
    with Ops() as log:
        _, weights = model(idx, return_weights=True)
    assert FLASH not in log.names and len(weights) == 2 and weights[0].shape == (2, 4, T, T)


class FlashArgs(TorchDispatchMode):
    """The shapes of the tensors the CPU flash kernel receives, forward and backward."""

    def __init__(self):
        super().__init__()
        self.calls, self.names = [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        self.names.append(name)
        if name.startswith(FLASH):
            self.calls.append((name, [tuple(a.shape) for a in args
                                      if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def test_grouped_query_keys_reach_the_kernel_without_copies():
    """Chapter 13: with n_kv_heads < h, k and v reach the kernel with h_kv heads (no repeat)."""
    B, T, d, h, h_kv = 2, 16, 32, 4, 2
    m = MultiHeadAttention(d, T, h, fused=True, n_kv_heads=h_kv)
    x = torch.randn(B, T, d, requires_grad=True)
    with FlashArgs() as log:
        m(x).sum().backward()
    forward = [shapes for name, shapes in log.calls if name == FLASH]
    backward = [shapes for name, shapes in log.calls if name == f"{FLASH}_backward"]
    assert forward and backward
    q_shape, kv_shape = (B, h, T, d // h), (B, h_kv, T, d // h)
    assert forward[0][:3] == [q_shape, kv_shape, kv_shape]
    assert kv_shape in backward[0] and q_shape in backward[0]
    assert not {"repeat_interleave", "repeat", "expand_copy", "clone", "copy_",
                "index_select"} & set(log.names)
