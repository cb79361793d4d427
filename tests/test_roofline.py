"""Lab 16's roofline: the points are the library's counts, and the figure draws those numbers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook import Attention  # noqa: E402
from attnbook.gpu.io_cost import (  # noqa: E402
    A100,
    H100,
    T4,
    TrafficCounter,
    attainable_flops,
    decoding_bytes,
    flash_flops,
    flash_io,
    flop_count,
)
from attnbook.gpu.roofline import KERNELS, count_kernel, draw_roofline  # noqa: E402
from attnbook.online import tiled_attention_forward  # noqa: E402


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float16, device="meta")


@pytest.mark.parametrize("T, d, g", [(512, 64, 1), (1000, 128, 4)])
def test_counts_are_the_library_counts(T, d, g):
    explicit, fused, decode = (count_kernel(k, T, d, g=g) for k in KERNELS)
    with torch.device("meta"):
        attn = Attention(d, context_length=T)
    q, kv = meta(1, g, T, d), meta(1, 1, T, d)
    with TrafficCounter() as traffic:
        attn.attend(q, kv, kv)
    assert explicit.bytes == traffic.total_bytes
    assert explicit.flops == flop_count(attn.attend, q, kv, kv) >= 4 * g * T * T * d
    assert fused.flops == g * flash_flops(T, d, 128, 128, causal=True)
    assert fused.bytes == g * 2 * flash_io(T, d, 128, 128, causal=True)
    assert decode.flops == 4 * g * T * d  # the two products of one query per head
    assert decode.bytes == decoding_bytes(T, d, g=g, bytes_per=2)


def test_flash_flops_are_the_tiled_loops():
    """The kernel's FLOP count is what PyTorch counts for the library's tiled loop (Ch. 10)."""
    for T, b, causal in [(100, 16, True), (130, 32, True), (96, 32, False)]:
        q = meta(1, 1, T, 8)
        counted = flop_count(tiled_attention_forward, q, q, q, None, causal, b)
        assert flash_flops(T, 8, b, b, causal=causal) == counted


def test_decoding_bytes():
    T, d = 8192, 128
    assert decoding_bytes(T, d, n_split=1) == 2 * (2 * T * d + 2 * d) + 4 * 2 * (d + 1)
    assert decoding_bytes(T, d, g=8, n_split=4) == (2 * (2 * T * d + 16 * d)
                                                     + 4 * 2 * 8 * 4 * (d + 1))
    with pytest.raises(ValueError, match="n_split"):
        decoding_bytes(T, d, n_split=0)


@pytest.mark.parametrize("gpu", [T4, A100, H100], ids=lambda g: g.name)
def test_drawn_points_are_the_counts(gpu):
    counts = [count_kernel(k, 4096, 128, g=8) for k in KERNELS]
    ax = draw_roofline(counts, gpu, highlight="decode")
    drawn = {line.get_label(): (line.get_xdata()[0], line.get_ydata()[0])
             for line in ax.lines if line.get_label().startswith("point:")}
    assert set(drawn) == {f"point:{k}" for k in KERNELS}
    for c in counts:
        x, y = drawn[f"point:{c.kernel}"]
        assert x == c.intensity and y == attainable_flops(c.intensity, gpu) / 1e12
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "memory-bound" in texts and f"{gpu.ridge:.0f} FLOP/byte" in texts
    plt.close(ax.figure)


def test_bound_labels():
    fused = count_kernel("fused", 32768, 128)
    assert fused.bound(T4) == "memory-bound" and fused.intensity < T4.ridge
    assert count_kernel("decode", 4096, 128).bound(H100) == "memory-bound"
    assert "memory-bound" in count_kernel("explicit", 512, 64).describe(A100)
    with pytest.raises(ValueError, match="kernel"):
        count_kernel("sdpa", 512, 64)
