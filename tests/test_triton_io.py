"""Part VI's counts (no Triton kernel runs here): IO of standard and tiled attention, the
traffic of the explicit module, the backward's FLOP ratio, and Triton's TF32 default."""

from __future__ import annotations

import pytest
import torch

from attnbook import Attention
from attnbook.gpu.io_cost import (
    A100,
    H100,
    T4,
    TrafficCounter,
    attainable_flops,
    flash_io,
    flash_io_bound,
    flop_count,
    standard_io,
)
from attnbook.online import tiled_attention_backward, tiled_attention_forward


def loop_count(N, d, bm, bn, causal):
    """Count the kernel's HBM accesses by walking its loops, load by load."""
    total = 0
    for i0 in range(0, N, bm):
        rows = min(bm, N - i0)
        total += rows * d + rows * d + rows  # Q in; O and lse out
        hi = min(i0 + bm, N) if causal else N
        for j0 in range(0, hi, bn):
            total += 2 * min(bn, N - j0) * d  # K and V of this block
    return total


@pytest.mark.parametrize("N,d,bm,bn,causal", [(100, 16, 32, 16, True), (100, 16, 16, 32, False),
                                              (256, 64, 64, 64, True), (70, 8, 64, 32, True)])
def test_flash_io_counts_the_loops(N, d, bm, bn, causal):
    assert flash_io(N, d, bm, bn, causal) == loop_count(N, d, bm, bn, causal)


def test_io_orders():
    assert standard_io(1024, 64) == 4 * 1024 * 64 + 4 * 1024**2
    # The flash count grows like N² d² / M: quadrupling M (blocks 4 times larger) cuts it.
    N, d = 8192, 128
    assert flash_io(N, d, 256, 256) < flash_io(N, d, 64, 64) / 3
    assert flash_io_bound(N, d, 4 * 128 * 64) == pytest.approx(
        2 * N * d + 2 * N * d * (N / 51))  # M = 4 d · 64: b_n = 64 keys, and with the 51 x 64
    # score tile b_m = 51 queries fit (io_cost.sram_blocks): the loop count's term
    assert flash_io(N, 64, 128, 128) < standard_io(N, 64) / 3  # ratio -> 2 b / d


def test_explicit_module_is_memory_bound():
    """Its traffic grows like T², like its FLOPs: intensity a few FLOP/byte, far below ridge."""
    ratios = []
    for T in (256, 512):
        attn = Attention(64, T)
        q, k, v = (torch.randn(1, T, 64) for _ in range(3))
        with TrafficCounter() as traffic:
            attn.attend(q, k, v)
        ratios.append(flop_count(attn.attend, q, k, v) / traffic.total_bytes)
    assert all(r < 10 for r in ratios) and ratios[1] < 1.5 * ratios[0]
    assert A100.ridge > 100 and H100.ridge > 100
    assert T4.ridge == pytest.approx(65e12 / 320e9) and T4.sram_bytes_per_sm == 64 * 1024
    assert attainable_flops(1.0, H100) == H100.hbm_bytes_per_s


def test_backward_costs_two_and_a_half_forwards():
    q, k, v = (torch.randn(1, 128, 32) for _ in range(3))
    fwd = flop_count(tiled_attention_forward, q, k, v, None, False, 32)
    out, lse = tiled_attention_forward(q, k, v, None, False, 32)
    bwd = flop_count(tiled_attention_backward, torch.ones_like(out), q, k, v, out, lse, None,
                     False, 32)
    assert bwd / fwd == pytest.approx(2.5)
    assert fwd == 2 * 2 * 128 * 128 * 32  # two products of 128 x 128 x 32 multiply-adds


def test_triton_defaults_to_tf32_on_nvidia():
    """Chapter 17's claim: tl.dot on float32 uses TF32 unless told otherwise (CUDA backend)."""
    compiler = pytest.importorskip("triton.backends.nvidia.compiler")
    assert compiler.CUDAOptions.default_dot_input_precision == "tf32"
    assert "ieee" in compiler.CUDAOptions.allowed_dot_input_precisions


def test_importing_attnbook_does_not_import_triton():
    import subprocess
    import sys

    code = "import sys, attnbook, attnbook.gpu; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_triton_names_the_extra():
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None\n"
            "import torch, attnbook\n"
            "try:\n"
            "    attnbook.flash_attention(*(torch.randn(1, 4, 4) for _ in range(3)))\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install attnbook[triton]" in out.stdout
