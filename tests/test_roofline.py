"""Lab 16's roofline: the points are the library's counts, and the figure draws those numbers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook import Attention  # noqa: E402
from attnbook.gpu.compile_check import recorded_table, recorded_versions  # noqa: E402
from attnbook.gpu.configs import SHARED_LIMIT, forward_config  # noqa: E402
from attnbook.gpu.io_cost import (  # noqa: E402
    A100,
    A100_40GB,
    GPU,
    GPUS,
    H100,
    T4,
    TrafficCounter,
    attainable_flops,
    decoding_bytes,
    flash_flops,
    flash_io,
    flash_io_bound,
    flop_count,
    sram_blocks,
)
from attnbook.gpu.roofline import KERNELS, count_kernel, draw_roofline, unit_of  # noqa: E402
from attnbook.online import tiled_attention_forward  # noqa: E402


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float16, device="meta")


@pytest.mark.parametrize("T, d, g", [(512, 64, 1), (1000, 128, 4)])
def test_counts_are_the_library_counts(T, d, g):
    explicit, fused, decode = (count_kernel(k, T, d, g=g, gpu=H100) for k in KERNELS)
    with torch.device("meta"):
        attn = Attention(d, context_length=T)
    q, kv = meta(1, g, T, d), meta(1, 1, T, d)
    with TrafficCounter() as traffic:
        attn.attend(q, kv, kv)
    assert explicit.bytes == traffic.total_bytes
    assert explicit.flops == flop_count(attn.attend, q, kv, kv) >= 4 * g * T * T * d
    cfg = forward_config(90, torch.float16, d)             # what the library launches on sm90
    assert (fused.block_m, fused.block_n) == (cfg.block_m, cfg.block_n)
    assert fused.flops == g * flash_flops(T, d, cfg.block_m, cfg.block_n, causal=True)
    assert fused.bytes == g * 2 * flash_io(T, d, cfg.block_m, cfg.block_n, causal=True)
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


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_blocks_are_the_launch_tables(gpu, d, dtype):
    """Each GPU's fused point takes the blocks attnbook.gpu.configs launches there."""
    c = count_kernel("fused", 4096, d, gpu=gpu, dtype=dtype)
    cfg = forward_config(gpu.arch, dtype, d)
    assert (c.block_m, c.block_n) == (cfg.block_m, cfg.block_n) != (128, 128)
    assert c.flops == flash_flops(4096, d, cfg.block_m, cfg.block_n, causal=True)


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_drawn_points_and_roofs_are_the_counts(gpu):
    counts = [count_kernel(k, 4096, 128, g=8, gpu=gpu) for k in KERNELS]
    ax = draw_roofline(counts, gpu, highlight="decode")
    drawn = {line.get_label(): (line.get_xdata()[0], line.get_ydata()[0])
             for line in ax.lines if line.get_label().startswith("point:")}
    assert set(drawn) == {f"point:{k}" for k in KERNELS}
    for c in counts:
        x, y = drawn[f"point:{c.kernel}"]
        unit = unit_of(c.kernel, gpu)
        assert x == c.intensity and y == attainable_flops(c.intensity, gpu, unit) / 1e12
    roofs = {line.get_label(): line for line in ax.lines if line.get_label().startswith("roof:")}
    assert set(roofs) == {"roof:tensor", "roof:fma"}
    assert max(roofs["roof:tensor"].get_ydata()) == gpu.flops_per_s / 1e12
    assert max(roofs["roof:fma"].get_ydata()) == gpu.fma_flops_per_s / 1e12
    assert roofs["roof:fma"].get_linestyle() == "--"
    texts = " ".join(t.get_text() for t in ax.texts)
    assert "memory-bound" in texts and f"{gpu.ridge:.0f} FLOP/byte" in texts
    assert f"FMA ridge\n{gpu.ridge_of('fma'):.0f}" in texts
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "tensor cores (float16)", "FP32 FMA units"]
    plt.close(ax.figure)


@pytest.mark.parametrize("T, d", [(512, 128), (4096, 64), (4096, 128), (32768, 128)])
def test_t4_fused_kernel_is_compute_bound_under_its_fma_roof(T, d):
    """On a T4 the book's kernel runs tl.dot on FMA: below the tensor-core ridge (203 FLOP/byte)
    but above the FMA ridge (about 25), so compute-bound, capped at the 8.1 TFLOP/s FMA peak."""
    fused = count_kernel("fused", T, d, gpu=T4)
    assert fused.unit(T4) == "fma" and T4.ridge_of("fma") == pytest.approx(8.1e12 / 320e9)
    assert T4.ridge_of("fma") < fused.intensity < T4.ridge
    assert fused.bound(T4) == "compute-bound" and fused.attainable(T4) == 8.1e12
    assert "FP32 FMA units" in fused.describe(T4) and "compute-bound" in fused.describe(T4)
    # the same count under the tensor-core roof would read memory-bound: what Lab 16 said
    assert attainable_flops(fused.intensity, T4, "tensor") < T4.flops_per_s
    # the explicit module's products are cuBLAS's, on the T4's tensor cores: memory-bound
    explicit = count_kernel("explicit", T, d, gpu=T4)
    assert explicit.unit(T4) == "tensor" and explicit.bound(T4) == "memory-bound"


def test_units_are_what_the_compiler_made():
    """unit_of says FMA exactly where the compile records (every Triton release kept) say the
    forward's and decoding's tl.dot became fma: every sm75 launch, none from sm80 on."""
    gpu_of = {75: T4, 80: A100, 90: H100}
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    seen = set()
    for version in recorded_versions():
        for row in recorded_table(version):
            if row["kernel"] not in ("forward", "decode") or row["dtype"] not in dtypes:
                continue
            kernel = "fused" if row["kernel"] == "forward" else "decode"
            if row["arch"] == 75 and row["dtype"] == "bf16":
                with pytest.raises(ValueError, match="no roof"):  # the T4 has no bf16 tensor cores
                    unit_of("explicit", T4, torch.bfloat16)
            unit = unit_of(kernel, gpu_of[row["arch"]], dtypes[row["dtype"]])
            assert (unit == "fma") == (row["instruction"] == "fma"), (version, row)
            seen.add((row["arch"], unit))
    assert seen == {(75, "fma"), (80, "tensor"), (90, "tensor")}


def test_gpu_variants_and_shared_memory():
    """Named variants; per-SM shared memory apart from the most one block may use."""
    assert A100_40GB.hbm_bytes_per_s == 1.555e12 and A100.hbm_bytes_per_s == 2.039e12
    assert "40GB" in A100_40GB.name and "80GB" in A100.name and "SXM5" in H100.name
    for gpu, per_sm, per_block in [(T4, 64, 64), (A100, 164, 163), (H100, 228, 227)]:
        assert gpu.sram_bytes_per_sm == per_sm * 1024
        assert gpu.sram_bytes_per_block == per_block * 1024 == SHARED_LIMIT[gpu.arch]
    with pytest.raises(ValueError, match="cannot use more shared memory"):
        GPU("x", 1e12, 1e14, 10, 1024, sram_bytes_per_block=2048)
    assert GPU("x", 1e12, 1e14, 10, 1024).sram_bytes_per_block is None


def test_sram_blocks_hold_the_score_tile():
    """Q, O, K, V blocks and the b_m x b_n score tile fit; the key block is at most d; b_m is
    the largest that fits (Dao et al.'s B_r = min(ceil(M/4d), d), with the loops swapped)."""
    for M, d in [(116_224, 128), (32_768, 128), (32_768, 64), (8_192, 128), (1_000_000, 64)]:
        b_m, b_n = sram_blocks(M, d)
        assert b_n == min(M // (4 * d), d) and b_m >= M / (6 * d) - 1
        assert 2 * b_m * d + 2 * b_n * d + b_m * b_n <= M
        assert 2 * (b_m + 1) * d + 2 * b_n * d + (b_m + 1) * b_n > M
    assert sram_blocks(116_224, 128) == (217, 128)  # the H100's 227 KiB per block, float16
    N, d, M = 8192, 128, 116_224
    assert flash_io_bound(N, d, M) == pytest.approx(2 * N * d + 2 * N * d * N / 217)
    with pytest.raises(ValueError, match="4d \\+ 1"):
        sram_blocks(4 * 128, 128)


def test_bound_labels_and_bad_input():
    assert count_kernel("fused", 32768, 128, gpu=H100).bound(H100) == "memory-bound"
    assert count_kernel("decode", 4096, 128).bound(H100) == "memory-bound"
    assert count_kernel("decode", 4096, 128).bound(T4) == "memory-bound"  # 1 < 25 FLOP/byte
    assert "memory-bound" in count_kernel("explicit", 512, 64).describe(A100)
    assert count_kernel("fused", 512, 64, block=128).block_m == 128  # chosen by hand
    with pytest.raises(ValueError, match="kernel"):
        count_kernel("sdpa", 512, 64)
    with pytest.raises(ValueError, match="count it for that GPU"):  # H100 blocks, T4 roof
        count_kernel("fused", 4096, 128, gpu=H100).bound(T4)
    with pytest.raises(TypeError, match="gpu must be a GPU"):
        count_kernel("fused", 4096, 128, gpu="T4")
    with pytest.raises(ValueError, match="no arch"):
        count_kernel("fused", 64, 8, gpu=GPU("x", 1e12, 1e14, 10, 1024))
    with pytest.raises(ValueError, match="no roof is kept"):
        count_kernel("fused", 64, 8, dtype=torch.float64).bound(H100)
    with pytest.raises(ValueError, match="no roof is kept"):  # tf32x3, not modelled
        count_kernel("fused", 64, 8, dtype=torch.float32, gpu=A100).bound(A100)
    assert count_kernel("explicit", 64, 8, dtype=torch.float32).unit(H100) == "fma"
    with pytest.raises(ValueError, match="unit must be one of"):
        H100.peak("cuda")
    with pytest.raises(ValueError, match="no float32 FMA peak"):
        GPU("x", 1e12, 1e14, 10, 1024).peak("fma")
