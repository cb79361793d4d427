"""Launch configurations: block sizes, warps and pipeline stages that fit each GPU.

A Triton kernel that asks for more shared memory than a block may have fails at launch with
``OutOfResources``; how much it asks for depends on the block sizes, the head width, the
element size and ``num_stages`` (each stage is one more copy of the key and value tiles in
flight). The table here is keyed on the device's compute capability, and
``tests/test_triton_compile.py`` compiles every entry ahead of time, for sm75 (T4), sm80
(A100) and sm90 (H100), and checks that each fits (:mod:`attnbook.gpu.compile_check`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SHARED_LIMIT = {75: 65_536, 80: 166_912, 86: 101_376, 89: 101_376, 90: 232_448}
"""Shared memory one block may use (opt-in maximum), in bytes, by compute capability
(CUDA C Programming Guide, "Technical Specifications per Compute Capability": 64 KB, 163 KB,
99 KB, 99 KB, 227 KB)."""

ARCHS = (75, 80, 90)
"""The architectures the compile check covers: Colab's T4, the A100, the H100."""


@dataclass(frozen=True)
class LaunchConfig:
    """How one kernel is launched: block sizes (powers of 2), warps per program, stages."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2


def arch_of(capability: int | tuple[int, int] | None) -> int | None:
    """The table row for a compute capability: (8, 6) -> 86; anything newer than 9.0 -> 90.

    ``None`` (Triton's interpreter, no GPU) stays None.
    """
    if capability is None:
        return None
    cc = capability[0] * 10 + capability[1] if isinstance(capability, tuple) else capability
    if cc < 75:
        raise ValueError(f"compute capability {cc / 10:.1f}: attnbook's Triton kernels need "
                         "7.5 (T4) or newer")
    return 75 if cc < 80 else 80 if cc == 80 else 86 if cc < 90 else 90


def device_arch(device: torch.device) -> int | None:
    """The table row of a tensor's device: None on the CPU (the interpreter)."""
    if device.type != "cuda":
        return None
    return arch_of(torch.cuda.get_device_capability(device))


# (arch, kernel, wide, head-width class) -> config. "wide": 4-byte elements (float32, float64),
# whose tiles take twice the shared memory and registers. The class is the head width rounded
# up to 64, 128 or 256 (d = 80 and 96 run 128-wide tiles, the extra columns masked). sm86 and
# sm89 (99 KB per block) use sm80's rows, which the compile check holds to 99 KB too, except
# where REFUSED says otherwise. Below sm80 tl.dot is FMA, register-hungry: eight warps share
# the tile, and the blocks are small enough that nothing spills at fp16. A T4's SM then holds
# one 16-bit program at a time (200-250 registers per thread; compile_check.t4_occupancy); the
# float32 forward at d = 64 takes 16-key blocks so that two programs fit its shared memory
# (24 KiB each; 64 x 32 needs 32.25 KiB, one program per SM).
TABLE = {
    (75, "forward", False, 64): LaunchConfig(64, 32, 8, 2),
    (75, "forward", False, 128): LaunchConfig(32, 32, 8, 1),
    (75, "forward", False, 256): LaunchConfig(16, 32, 8, 1),
    (75, "forward", True, 64): LaunchConfig(64, 16, 8, 1),
    (75, "forward", True, 128): LaunchConfig(32, 32, 8, 1),
    (75, "forward", True, 256): LaunchConfig(16, 16, 8, 1),
    (75, "backward", False, 64): LaunchConfig(32, 32, 8, 1),
    (75, "backward", False, 128): LaunchConfig(16, 32, 8, 1),
    (75, "backward", True, 64): LaunchConfig(16, 32, 8, 1),
    (75, "backward", True, 128): LaunchConfig(16, 16, 8, 1),
    (75, "decode", False, 64): LaunchConfig(16, 32, 4, 2),
    (75, "decode", False, 128): LaunchConfig(16, 32, 4, 2),
    (75, "decode", False, 256): LaunchConfig(16, 32, 8, 1),
    (75, "decode", True, 64): LaunchConfig(16, 32, 4, 2),
    (75, "decode", True, 128): LaunchConfig(16, 32, 4, 2),
    (75, "decode", True, 256): LaunchConfig(16, 16, 4, 1),
    (80, "forward", False, 64): LaunchConfig(128, 64, 8, 3),
    (80, "forward", False, 128): LaunchConfig(64, 64, 8, 2),
    (80, "forward", False, 256): LaunchConfig(64, 64, 8, 1),
    (80, "forward", True, 64): LaunchConfig(64, 32, 8, 2),
    (80, "forward", True, 128): LaunchConfig(32, 32, 8, 2),
    (80, "forward", True, 256): LaunchConfig(16, 32, 8, 1),
    (80, "backward", False, 64): LaunchConfig(32, 64, 8, 2),
    (80, "backward", False, 128): LaunchConfig(32, 64, 8, 1),
    (80, "backward", False, 256): LaunchConfig(32, 32, 8, 1),
    (80, "backward", True, 64): LaunchConfig(32, 32, 8, 1),
    (80, "backward", True, 128): LaunchConfig(16, 16, 4, 1),
    (80, "backward", True, 256): LaunchConfig(16, 16, 4, 1),
    (80, "decode", False, 64): LaunchConfig(16, 64, 4, 2),
    (80, "decode", False, 128): LaunchConfig(16, 64, 4, 2),
    (80, "decode", False, 256): LaunchConfig(16, 64, 4, 2),
    (80, "decode", True, 64): LaunchConfig(16, 32, 4, 2),
    (80, "decode", True, 128): LaunchConfig(16, 32, 4, 2),
    (80, "decode", True, 256): LaunchConfig(16, 32, 4, 1),
}

REFUSED = {
    (75, "backward", False, 256): LaunchConfig(16, 16, 8, 1),
    (75, "backward", True, 256): LaunchConfig(16, 16, 8, 1),
    (86, "backward", True, 256): LaunchConfig(16, 16, 4, 1),
}
"""Launches that do not fit, refused before launch (:func:`check_fits`), with the smallest
configuration, which the compile check compiles to show it: the T4's backward at d = 256
(64 KB per block; in float32 Triton 3.9 fits it exactly, 3.6, Colab's, does not) and, on
sm86/sm89 (99 KB), sm80's float32 backward at d = 256. A launch is refused where any recorded
Triton release needs more than the GPU has."""

MAX_HEAD_DIM = 256
"""The widest head the table has launches for (and the compile check compiles)."""


def head_class(d: int) -> int:
    """The table's head-width class: 64, 128 or 256 (the head width rounded up)."""
    return 64 if d <= 64 else 128 if d <= 128 else 256


class DoesNotFit(ValueError):
    """A kernel that would run out of a GPU's shared memory (or has no compiled launch)."""


def check_fits(kernel: str, arch: int | None, dtype: torch.dtype, d: int) -> None:
    """Refuse, before any launch, a kernel the compile check found does not fit the GPU.

    Nothing is refused in the interpreter (``arch`` None). On a GPU: a head width above
    :data:`MAX_HEAD_DIM`, and the launches of :data:`REFUSED`, whose message gives the shared
    memory the smallest launch needs (from the compile record of the pinned Triton) against the
    architecture's per-block limit.

    Raises:
        DoesNotFit: with a message naming the limit.
    """
    if arch is None:
        return
    name = "decoding" if kernel == "decode" else kernel
    if d > MAX_HEAD_DIM:
        raise DoesNotFit(f"the {name} kernel has no launch for head width d = {d} on sm{arch}: "
                         f"the widest the compile check covers is d = {MAX_HEAD_DIM} (its tiles "
                         "must fit the GPU's shared memory per block and 255 registers per "
                         "thread)")
    wide = dtype in (torch.float32, torch.float64)
    family = 75 if arch < 80 else 80 if arch in (80, 90) or arch > 90 else 86
    key = (family, kernel, wide, head_class(d))
    if key not in REFUSED:
        return
    cfg = REFUSED[key]
    limit = SHARED_LIMIT[family]
    need, version = _recorded_shared(kernel, 80 if family == 86 else family, wide, d)
    needs = f"{need / 1024:.0f} KiB (Triton {version})" if need else "more"
    raise DoesNotFit(f"the {name} kernel at d = {d} in {str(dtype).removeprefix('torch.')} does "
                     f"not fit sm{arch}: its smallest launch ({cfg.block_m}×{cfg.block_n} blocks) "
                     f"needs {needs} of shared memory per block, and sm{arch} gives "
                     f"{limit / 1024:.0f} KiB")


def _recorded_shared(kernel: str, arch: int, wide: bool, d: int) -> tuple[int, str | None]:
    """The most shared memory any recorded Triton release's launch asks for, and that release
    (0, None without a record)."""
    from .compile_check import recorded_table, recorded_versions

    kname = "decode split" if kernel == "decode" else kernel
    dt = "fp32" if wide else "fp16"
    best = (0, None)
    for version in recorded_versions():
        for r in recorded_table(version):
            if (r["kernel"], r["arch"], r["dtype"], r["d"]) == (kname, arch, dt, head_class(d)):
                best = max(best, (r["shared"], version), key=lambda x: x[0])
    return best


def launch_config(kernel: str, arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """The table's entry for ``kernel`` ("forward", "backward" or "decode") on ``arch``.

    None (Triton's interpreter) gets blocks of 64 (16 rows for decoding): only correctness
    matters there. sm86 and sm89 take sm80's rows, sm90 too (the H100 has more room, but these
    tiles already reach its tensor cores: ``wgmma``). A launch that does not fit
    (:data:`REFUSED`, or d above :data:`MAX_HEAD_DIM`) gets the smallest configuration:
    :func:`check_fits` refuses it before launch.
    """
    if arch is None:
        return LaunchConfig(16, 64) if kernel == "decode" else LaunchConfig(64, 64)
    wide = dtype in (torch.float32, torch.float64)
    family = 75 if arch < 80 else 80
    key = (family, kernel, wide, head_class(d))
    return TABLE.get(key) or REFUSED[key]


def forward_config(arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """The forward kernel's launch (see :data:`TABLE`)."""
    return launch_config("forward", arch, dtype, d)


def backward_config(arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """The backward kernel's launch: it holds five tiles where the forward holds two."""
    return launch_config("backward", arch, dtype, d)


def decoding_config(arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """Flash-Decoding's split kernel: ``block_m`` is unused (the rows are the G query heads)."""
    return launch_config("decode", arch, dtype, d)


def smaller_config(kernel: str, arch: int | None, dtype: torch.dtype, d: int,
                   current: LaunchConfig) -> LaunchConfig | None:
    """The next smaller launch of :data:`TABLE` for ``kernel`` on ``arch``'s row, or None.

    What :func:`attnbook.gpu.flash.launch_with_fallback` retries with when a launch fails with
    ``OutOfResources`` (another Triton release or another GPU may need more shared memory than
    the compile check measured): the table's configurations for this kernel and architecture,
    float32's (wider tiles) included, ordered by the shared memory they hold, ``block_m ·
    block_n · num_stages``; the largest one below ``current`` (ties: fewer stages first).
    ``d`` and ``dtype`` are part of the call so that a caller need not know the ordering.
    """
    del dtype, d  # every row of the architecture's kernel is a candidate
    if arch is None:  # the interpreter has no shared memory to run out of
        return None
    family = 75 if arch < 80 else 80

    def size(c: LaunchConfig) -> tuple[int, int]:
        return (c.block_m * c.block_n * c.num_stages, c.block_m * c.block_n)

    rows = {c for (a, k, _, _), c in TABLE.items() if a == family and k == kernel}
    below = [c for c in rows if size(c) < size(current)]
    return max(below, key=size) if below else None


def default_precision(arch: int | None, dtype: torch.dtype) -> str:
    """``tl.dot``'s input precision for float32 when the caller does not choose one.

    ``"tf32x3"`` on sm80 and newer: three TF32 products on the tensor cores recover about
    float32's accuracy. Below sm80 there are no TF32 tensor cores (Triton lowers ``tl.dot`` to
    FMA there), and in the interpreter every product is exact: ``"ieee"``. Other dtypes ignore
    the setting.
    """
    if dtype == torch.float32 and arch is not None and arch >= 80:
        return "tf32x3"
    return "ieee"
