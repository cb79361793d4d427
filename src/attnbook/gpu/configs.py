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


def _small(arch: int | None) -> bool:
    """The GPUs with at most 99 KB of shared memory per block: T4, A10/A40/RTX 30, L4/RTX 40."""
    return arch in (75, 86, 89)


def forward_config(arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """The forward kernel's launch for a GPU row of :data:`SHARED_LIMIT` (None: interpreter)."""
    wide = d > 64 or dtype in (torch.float32, torch.float64)
    if arch is None:
        return LaunchConfig(64, 64)
    if arch == 75:  # tl.dot is FMA below sm80: small tiles keep registers from spilling
        return LaunchConfig(64, 32, 4, 1) if wide else LaunchConfig(64, 32, 4, 2)
    if _small(arch):
        return LaunchConfig(64, 32, 4, 2) if wide else LaunchConfig(128, 32, 4, 2)
    return LaunchConfig(64, 64, 4, 2) if wide else LaunchConfig(128, 64, 8, 3)


def backward_config(arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """The backward kernel's launch: it holds five tiles where the forward holds two."""
    wide = d > 64 or dtype in (torch.float32, torch.float64)
    if arch is None:
        return LaunchConfig(64, 64)
    if arch == 75 or _small(arch):
        return LaunchConfig(32, 32, 4, 1) if wide else LaunchConfig(32, 64, 4, 1)
    return LaunchConfig(32, 64, 4, 1) if wide else LaunchConfig(64, 64, 4, 2)


def decoding_config(arch: int | None, dtype: torch.dtype, d: int) -> LaunchConfig:
    """Flash-Decoding's split kernel: ``block_m`` is unused (the rows are the G query heads)."""
    if arch is None:
        return LaunchConfig(16, 64)
    wide = d > 64 or dtype in (torch.float32, torch.float64)
    return LaunchConfig(16, 32 if wide and arch == 75 else 64, 4, 2)


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
