"""What a compiled GPU would get wrong, checked without one, under Triton 3.6 and 3.9.

`make test` runs this file under the pinned Triton (3.9, `unit`) and under Colab's GPU Triton
(3.6, `make triton36`): the interpreter's scalar conversion, the types a compiled kernel
receives, 64-bit offsets inside a head, block sizes a GPU's ``tl.dot`` accepts, and the retry
when a launch runs out of shared memory.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

from attnbook.gpu import decoding, flash  # noqa: E402
from attnbook.gpu.configs import LaunchConfig, smaller_config  # noqa: E402
from attnbook.gpu.triton_env import load_kernels, patch_interpreter_index  # noqa: E402

tl = pytest.importorskip("triton.language")
KERNELS = load_kernels()  # the interpreter on this CPU (conftest / load_kernels set it)
wide = KERNELS.wide
VERSION = tuple(int(p) for p in triton.__version__.split(".")[:2])


def numpy_refuses_one_element_arrays() -> bool:
    try:
        int(np.array([3]))
        return False
    except TypeError:
        return True


def test_interpreter_patch_only_where_the_interpreter_needs_it():
    """Triton 3.6's interpreter calls int() on a one-element array, which NumPy 2.4 refuses;
    3.7 on squeeze it first. The patch is applied exactly when that conversion fails."""
    needed = VERSION < (3, 7) and numpy_refuses_one_element_arrays()
    assert patch_interpreter_index() is needed
    assert patch_interpreter_index() is needed  # applying it twice changes nothing


@triton.jit
def count_steps(OUT, n, BLOCK: tl.constexpr):
    """Loop bounds from a runtime argument and from tl.program_id, as the kernels have them."""
    pid = tl.program_id(0)
    steps = 0
    for _ in range(pid * BLOCK, tl.minimum(n, pid * BLOCK + 3 * BLOCK), BLOCK):
        steps += 1
    tl.store(OUT + pid, steps)


def test_runtime_loop_bounds_run_in_the_interpreter():
    out = torch.zeros(4, dtype=torch.int32)
    count_steps[(4,)](out, 50, BLOCK=16)
    # program 0: 0, 16, 32; 1: 16, 32, 48; 2: 32, 48; 3: 48
    assert out.tolist() == [3, 3, 2, 1]


# --- the types a compiled kernel receives -------------------------------------------------

class Recorder:
    """Stands in for the kernels module: records each launch, or raises OutOfResources for
    launches whose tiles are larger than ``max_tile`` (block_m·block_n·stages)."""

    def __init__(self, max_tile=None):
        self.launches = []
        self.max_tile = max_tile

    def __getattr__(self, name):
        recorder = self

        class Launcher:
            def __getitem__(self, grid):
                def run(*args, **kwargs):
                    tile = kwargs.get("BLOCK_M", 16) * kwargs.get("BLOCK_N", 1) * \
                        kwargs.get("num_stages", 1)
                    if recorder.max_tile is not None and tile > recorder.max_tile:
                        raise triton.runtime.errors.OutOfResources(tile * 1024, 65536,
                                                                   "shared memory")
                    recorder.launches.append((name, grid, args, kwargs))
                return run

        return Launcher()


def compiled_types(name, args, kwargs, arch=80):
    """The (type, specialisation) Triton's runtime gives each argument of a compiled launch
    for ``GPUTarget("cuda", arch, 32)``: its own binder, no GPU needed."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    fn = JITFunction(getattr(KERNELS, name).fn)  # a compiled (not interpreted) view of it
    binder = create_function_from_signature(fn.signature, fn.params, make_backend(
        GPUTarget("cuda", arch, 32)))
    params = {k: v for k, v in kwargs.items() if k in fn.arg_names}
    spec = binder(*args, **params)[1]
    return dict(zip(fn.arg_names, (s[0] for s in spec)))


def record(monkeypatch, call, max_tile=None):
    rec = Recorder(max_tile)
    monkeypatch.setattr(flash, "load_kernels", lambda: rec)
    monkeypatch.setattr(decoding, "load_kernels", lambda: rec)
    call()
    return rec


def test_a_python_float_would_be_float32_on_a_gpu():
    """The risk: without an annotation a Python float scale is a float32 kernel argument."""

    @triton.jit
    def plain(X, scale):
        tl.store(X, tl.load(X) * scale)

    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    fn = JITFunction(plain.fn)
    binder = create_function_from_signature(fn.signature, fn.params,
                                            make_backend(GPUTarget("cuda", 80, 32)))
    assert binder(torch.zeros(1, dtype=torch.float64), 1 / 3)[1][1][0] == "fp32"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_scales_reach_a_compiled_kernel_as_float64(monkeypatch, dtype):
    q = torch.randn(1, 2, 20, 16, dtype=dtype)
    rec = record(monkeypatch, lambda: flash.flash_forward(q, q, q, None, True, 16, 16, "ieee"))
    lse = torch.zeros(1, 2, 20, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    rec2 = record(monkeypatch, lambda: flash.flash_backward(q, q, q, q, q, lse, None, True, 16,
                                                            16, "ieee"))
    rec3 = record(monkeypatch, lambda: decoding.flash_decoding(q[:, :, :1], q, q, n_split=2))
    seen = {}
    for launches in (rec.launches, rec2.launches, rec3.launches):
        for name, _, args, kwargs in launches:
            if name == "flash_decoding_merge_kernel":
                continue
            seen[name] = compiled_types(name, args, kwargs)
    assert set(seen) == {"flash_forward_kernel", "flash_backward_kernel",
                         "flash_decoding_split_kernel"}
    for name, types in seen.items():
        assert types["qk_scale"] == "fp64", name
        assert types["Q"] == ("*fp64" if dtype == torch.float64 else "*fp16"), name
    assert seen["flash_backward_kernel"]["sm_scale"] == "fp64"


# --- 64-bit offsets inside a head ------------------------------------------------------------

@triton.jit
def row_offsets(OUT, stride_t, BLOCK: tl.constexpr):
    """What the kernels compute for a tile's rows: rows * stride_t, with the stride widened."""
    rows = 8 + tl.arange(0, BLOCK)
    tl.store(OUT + tl.arange(0, BLOCK), rows * wide(stride_t))
    tl.store(OUT + BLOCK + tl.arange(0, BLOCK), (rows * stride_t).to(tl.int64))


def test_in_head_offsets_are_64_bit_in_the_interpreter():
    """A (B, T, h, d) view has stride_t = h·d: rows · stride_t passes 2**31 for long T."""
    stride_t = 2**28 + 16  # h·d this wide is extreme; rows 8 to 23 then pass 2**31
    out = torch.zeros(32, dtype=torch.int64)
    row_offsets[(1,)](out, stride_t, BLOCK=16)
    exact = (8 + torch.arange(16)) * stride_t
    assert torch.equal(out[:16], exact)
    assert not torch.equal(out[16:], exact)  # in int32 it wraps: the check can fail


def test_compiled_pointer_offsets_are_64_bit():
    """In the forward kernel compiled for sm80, every tile of pointers is offset by int64."""
    code = (
        "from attnbook.gpu.compile_check import Case, kernel_ir\n"
        "from attnbook.gpu.configs import LaunchConfig\n"
        "print(kernel_ir(Case('forward', 80, 'fp16', 64, True, 'ieee', "
        "LaunchConfig(64, 32, 4, 2)), 'ttir'))\n")
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    ir = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        check=True).stdout
    # Every product inside a tile's address (rows · stride_t, j0 · stride_t) is 64-bit; what
    # stays 32-bit is only added (the columns 0 .. D_PAD - 1, key positions < T).
    products = [line for line in ir.splitlines() if "arith.muli" in line and "tensor<" in line]
    assert len(products) >= 2
    narrow = [line.strip() for line in products if "xi32>" in line.split(":")[-1]]
    assert narrow == [], narrow[:3]
    scalar = [line.strip() for line in ir.splitlines() if "arith.muli" in line
              and "tensor<" not in line and line.rstrip().split(":")[-1].split()[0] == "i32"]
    assert scalar == [] or all("stride" not in line for line in scalar), scalar[:3]


# --- block sizes and OutOfResources ----------------------------------------------------------

def test_blocks_below_16_are_refused():
    x = torch.randn(1, 2, 20, 16)
    with pytest.raises(ValueError, match="block_m must be at least 16"):
        flash.flash_attention(x, x, x, block_m=8)
    with pytest.raises(ValueError, match="block_n must be at least 16"):
        flash.flash_attention(x, x, x, block_n=8)
    with pytest.raises(ValueError, match="block_n must be at least 16"):
        decoding.flash_decoding(x[:, :, :1], x, x, block_n=8)


def test_out_of_resources_retries_with_the_next_smaller_launch(monkeypatch):
    monkeypatch.setattr(flash, "device_arch", lambda device: 80)
    monkeypatch.setattr(flash, "check_device", lambda *t: None)
    q = torch.randn(1, 2, 100, 64, dtype=torch.float16)
    big = flash.forward_config(80, q.dtype, 64)  # 128 x 64, 3 stages
    with pytest.warns(RuntimeWarning, match="ran out of resources") as caught:
        rec = record(monkeypatch, lambda: flash.flash_forward(
            q, q, q, None, True, big.block_m, big.block_n, "tf32x3"), max_tile=64 * 64 * 2)
    assert len(rec.launches) == 1
    _, grid, _, kwargs = rec.launches[0]
    assert kwargs["BLOCK_M"] * kwargs["BLOCK_N"] * kwargs["num_stages"] <= 64 * 64 * 2
    assert grid == (math.ceil(100 / kwargs["BLOCK_M"]) * 2,)  # (batch·head, block): one axis
    assert "retrying with LaunchConfig" in str(caught[0].message)
    with pytest.raises(triton.runtime.errors.OutOfResources):  # nothing small enough
        record(monkeypatch, lambda: flash.flash_forward(q, q, q, None, True, 16, 16, "ieee"),
               max_tile=1)


def test_smaller_config_walks_down_the_table():
    c = LaunchConfig(128, 64, 8, 3)
    seen = [c]
    while (c := smaller_config("forward", 80, torch.float16, 64, c)) is not None:
        seen.append(c)
    sizes = [s.block_m * s.block_n * s.num_stages for s in seen]
    assert sizes == sorted(sizes, reverse=True) and len(seen) >= 3
    assert smaller_config("forward", None, torch.float16, 64, c or seen[-1]) is None


# --- Flash-Decoding's split rule -------------------------------------------------------------

def test_split_rule_counts_key_value_heads():
    """GQA, 32 query heads on 8 key/value heads, B = 2, 132 SMs: the grid has n · 2 · 8
    programs, so filling the SMs takes 9 splits; counting 2 · 32 query heads gives 3, and
    3 · 16 = 48 programs would leave 84 of the 132 SMs idle."""
    fill = decoding.split_count(2, 8, 8192, 132, block_n=64)
    assert fill == 9 and fill * 2 * 8 >= 132 > (fill - 1) * 2 * 8
    assert decoding.split_count(2, 32, 8192, 132, block_n=64) == 3  # the old count of B·h
    # No split finer than one key block: 100 keys in blocks of 64 are 2 blocks.
    assert decoding.split_count(1, 1, 100, 132, block_n=64) == 2
    assert decoding.split_count(1, 1, 0, 132) == 1


def test_wave_rule_is_flash_attentions_heuristic():
    # B·h_kv = 16 on 108 SMs (A100): waves w = 16 n / 108; efficiency w / ceil(w).
    n = decoding.split_count(2, 8, 8192, 108, block_n=64, rule="waves")
    eff = {k: 16 * k / 108 / math.ceil(16 * k / 108) for k in range(1, 109)}
    assert eff[n] >= 0.85 * max(eff.values())
    assert all(eff[k] < 0.85 * max(eff.values()) for k in range(1, n))
    assert n == 6  # 96 programs of 108: 89% of one wave, where 7 splits (112) spill a wave
    assert decoding.split_count(16, 8, 8192, 108, rule="waves") == 1  # 128 >= 0.8 · 108
    with pytest.raises(ValueError, match="rule must be"):
        decoding.split_count(1, 1, 10, 10, rule="half")


def test_flash_decoding_applies_the_rule_without_n_split(monkeypatch):
    monkeypatch.setattr(decoding, "sm_count", lambda device: 132)
    q = torch.randn(2, 32, 1, 16)
    kv = torch.randn(2, 8, 1000, 16)
    rec = record(monkeypatch, lambda: decoding.flash_decoding(q, kv, kv, block_n=64))
    split = [grid for name, grid, _, _ in rec.launches if name == "flash_decoding_split_kernel"]
    assert split == [(9 * 2 * 8,)]  # n_split · B·h_kv programs on one axis, the rule's 9 splits
