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


# (arch, kernel, wide, d <= 64) -> config. "wide": 4-byte elements (float32, float64), whose
# tiles take twice the shared memory and registers. sm86 and sm89 (99 KB per block) use sm80's
# rows, which the compile check holds to 99 KB too. Below sm80 tl.dot is FMA, register-hungry:
# eight warps share the tile, and the blocks are small enough that nothing spills at fp16.
TABLE = {
    (75, "forward", False, True): LaunchConfig(64, 32, 8, 2),
    (75, "forward", False, False): LaunchConfig(32, 32, 8, 1),
    (75, "forward", True, True): LaunchConfig(64, 32, 8, 1),
    (75, "forward", True, False): LaunchConfig(32, 32, 8, 1),
    (75, "backward", False, True): LaunchConfig(32, 32, 8, 1),
    (75, "backward", False, False): LaunchConfig(16, 32, 8, 1),
    (75, "backward", True, True): LaunchConfig(16, 32, 8, 1),
    (75, "backward", True, False): LaunchConfig(16, 16, 8, 1),
    (75, "decode", False, True): LaunchConfig(16, 32, 4, 2),
    (75, "decode", False, False): LaunchConfig(16, 32, 4, 2),
    (75, "decode", True, True): LaunchConfig(16, 32, 4, 2),
    (75, "decode", True, False): LaunchConfig(16, 32, 4, 2),
    (80, "forward", False, True): LaunchConfig(128, 64, 8, 3),
    (80, "forward", False, False): LaunchConfig(64, 64, 8, 2),
    (80, "forward", True, True): LaunchConfig(64, 32, 8, 2),
    (80, "forward", True, False): LaunchConfig(32, 32, 8, 2),
    (80, "backward", False, True): LaunchConfig(32, 64, 8, 2),
    (80, "backward", False, False): LaunchConfig(32, 64, 8, 1),
    (80, "backward", True, True): LaunchConfig(32, 32, 8, 1),
    (80, "backward", True, False): LaunchConfig(16, 16, 4, 1),
    (80, "decode", False, True): LaunchConfig(16, 64, 4, 2),
    (80, "decode", False, False): LaunchConfig(16, 64, 4, 2),
    (80, "decode", True, True): LaunchConfig(16, 32, 4, 2),
    (80, "decode", True, False): LaunchConfig(16, 32, 4, 2),
}


def launch_config(kernel: str, arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """The table's entry for ``kernel`` ("forward", "backward" or "decode") on ``arch``.

    None (Triton's interpreter) gets blocks of 64 (16 rows for decoding): only correctness
    matters there. sm86 and sm89 take sm80's rows, sm90 too (the H100 has more room, but these
    tiles already reach its tensor cores: ``wgmma``).
    """
    if arch is None:
        return LaunchConfig(16, 64) if kernel == "decode" else LaunchConfig(64, 64)
    wide = dtype in (torch.float32, torch.float64)
    return TABLE[(75 if arch < 80 else 80, kernel, wide, d <= 64)]


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
