"""Issue 12, section 4: an empty sequence and a dtype mismatch, on every path.

T = 0 gives an empty (B, 0, d) result on the explicit, fused, online and cached paths (the
explicit softmax used to raise "amax(): Expected reduction dim -1 to have non-zero size"). An
input whose dtype differs from the module's is refused before step 1 with both dtypes and the
fix in the message (PyTorch's own error, "expected m1 and m2 to have the same dtype", names
neither).
"""

from __future__ import annotations

import pytest
import torch

from attnbook import Attention, MultiHeadAttention
from attnbook.kv_cache import KVCache, cached_attention
from attnbook.online import tiled_attention

MAKERS = [lambda: Attention(8, 6), lambda: MultiHeadAttention(8, 6, 2)]


@pytest.mark.parametrize("make", MAKERS, ids=["one-head", "multi-head"])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_empty_sequence_gives_an_empty_result(make, fused, padded):
    m = make()
    m.fused = fused
    x = torch.randn(3, 0, 8, requires_grad=True)
    pad = torch.ones(3, 0, dtype=torch.bool) if padded else None
    out = m(x, pad)
    assert out.shape == (3, 0, 8)
    out.sum().backward()  # and a backward pass through nothing
    out, w = m(x, pad, return_weights=True)
    assert out.shape == (3, 0, 8) and w.shape[-2:] == (0, 0)


def test_empty_sequence_on_the_online_and_cached_paths():
    q = torch.randn(2, 0, 4, requires_grad=True)
    assert tiled_attention(q, q, q, block_size=2).shape == (2, 0, 4)
    m = Attention(4, 6)
    cache = KVCache.for_module(m, 2)
    assert cached_attention(m, torch.randn(2, 0, 4), cache).shape == (2, 0, 4)
    assert cache.length == 0


@pytest.mark.parametrize("make", MAKERS, ids=["one-head", "multi-head"])
@pytest.mark.parametrize("fused", [False, True])
def test_dtype_mismatch_names_both_dtypes_and_the_fix(make, fused):
    m = make()
    m.fused = fused
    with pytest.raises(TypeError, match=r"torch.float64 .* torch.float32.*x.to\(torch.float32\)"):
        m(torch.randn(1, 4, 8, dtype=torch.float64))


def test_dtype_mismatch_on_the_online_and_cached_paths():
    q = torch.randn(1, 4, 8)
    with pytest.raises(TypeError, match="torch.float32, torch.float64"):
        tiled_attention(q, q.double(), q)
    m = Attention(8, 6)
    cache = KVCache.for_module(m, 1)
    with pytest.raises(TypeError, match=r"torch.float64 .* torch.float32"):
        cached_attention(m, torch.randn(1, 2, 8, dtype=torch.float64), cache)
