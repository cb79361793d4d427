"""Counting memory traffic: the IO argument behind FlashAttention, and a roofline.

No Triton here: everything is arithmetic on sizes, plus one PyTorch dispatch mode that counts
the bytes each operation of a real forward pass reads and writes. Counts are in *elements*
(multiply by the bytes per element) unless a name says bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..checks import check_whole_number
from .configs import SHARED_LIMIT

UNITS = ("tensor", "fma")
"""The two arithmetic units a roofline can be drawn for: ``"tensor"``, the tensor cores
(float16/bfloat16 inputs, float32 accumulation), and ``"fma"``, the CUDA cores' float32
fused multiply-adds, where Triton puts ``tl.dot`` below sm80 (Chapter 17)."""


@dataclass(frozen=True)
class GPU:
    """The few numbers of a GPU that a roofline needs (vendor datasheets, dense, no sparsity).

    A GPU has two roofs: the tensor cores' peak (``flops_per_s``), which cuBLAS and
    PyTorch's SDPA reach on float16 inputs, and the float32 FMA peak of its CUDA cores
    (``fma_flops_per_s``), which is all that a ``tl.dot`` compiled for sm75 runs on.
    Shared memory is kept twice: what one SM has (``sram_bytes_per_sm``) and the most one
    block, a Triton program, may use (``sram_bytes_per_block``, 1 KiB less from sm80 on: the
    CUDA runtime keeps it; :data:`attnbook.gpu.configs.SHARED_LIMIT`).
    """

    name: str
    hbm_bytes_per_s: float  # off-chip memory (HBM; GDDR6 on the T4) bandwidth
    flops_per_s: float  # tensor-core peak for float16 / bfloat16 inputs, float32 accumulate
    n_sm: int  # streaming multiprocessors: how many programs run at once, roughly
    sram_bytes_per_sm: int  # on-chip shared memory of one SM (its largest carve-out)
    fma_flops_per_s: float | None = None  # float32 FMA peak of the CUDA cores
    arch: int | None = None  # compute capability row of attnbook.gpu.configs: 75, 80, 90
    sram_bytes_per_block: int | None = None  # most one block may use; None: the arch's limit

    def __post_init__(self) -> None:
        if self.sram_bytes_per_block is None and self.arch is not None:
            object.__setattr__(self, "sram_bytes_per_block", SHARED_LIMIT[self.arch])
        if self.sram_bytes_per_block is not None and \
                self.sram_bytes_per_block > self.sram_bytes_per_sm:
            raise ValueError(f"{self.name}: a block cannot use more shared memory "
                             f"({self.sram_bytes_per_block} bytes) than its SM has "
                             f"({self.sram_bytes_per_sm})")

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which the tensor-core roofline turns: below it, memory sets the
        speed (:meth:`ridge_of` for the FMA roof)."""
        return self.flops_per_s / self.hbm_bytes_per_s

    def peak(self, unit: str = "tensor") -> float:
        """The FLOP/s roof of ``unit``: ``"tensor"`` (tensor cores) or ``"fma"`` (float32 FMA).

        Raises:
            ValueError: an unknown unit, or ``"fma"`` on a GPU whose FMA peak is not kept.
        """
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
        if unit == "tensor":
            return self.flops_per_s
        if self.fma_flops_per_s is None:
            raise ValueError(f"no float32 FMA peak is kept for the {self.name}")
        return self.fma_flops_per_s

    def ridge_of(self, unit: str = "tensor") -> float:
        """FLOPs per byte at which the roof of ``unit`` turns (see :meth:`peak`)."""
        return self.peak(unit) / self.hbm_bytes_per_s


# Datasheets (nvidia2018t4, nvidia2020a100, nvidia2022h100): bandwidth, dense float16 tensor-core
# peak, float32 peak; SMs and shared memory per SM from the CUDA guide and the tuning guides.
T4 = GPU("T4", 320e9, 65e12, 40, 64 * 1024, fma_flops_per_s=8.1e12, arch=75)  # Colab's free GPU
A100_40GB = GPU("A100 SXM4 40GB", 1.555e12, 312e12, 108, 164 * 1024, fma_flops_per_s=19.5e12,
                arch=80)
A100 = GPU("A100 SXM4 80GB", 2.039e12, 312e12, 108, 164 * 1024, fma_flops_per_s=19.5e12,
           arch=80)  # the 80 GB part: HBM2e, 2.039 TB/s against the 40 GB part's 1.555
H100 = GPU("H100 SXM5", 3.35e12, 989e12, 132, 228 * 1024, fma_flops_per_s=67e12, arch=90)
GPUS = (T4, A100_40GB, A100, H100)


def attainable_flops(intensity: float, gpu: GPU, unit: str = "tensor") -> float:
    """The roofline: min(peak FLOP/s of ``unit``, intensity x bandwidth) (Williams et al., 2009)."""
    return min(gpu.peak(unit), intensity * gpu.hbm_bytes_per_s)


def _check_sizes(causal=False, **sizes) -> None:
    """Every size a whole number of at least 1 (N tokens, d features, blocks...), causal a bool."""
    for name, value in sizes.items():
        check_whole_number(name, value, 1)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")


def standard_io(N: int, d: int) -> int:
    """HBM accesses of standard attention (Dao et al., 2022, Algorithm 0), in elements.

    Read Q, K; write S; read S, write P; read P, V; write O: ``4 N d + 4 N²``.
    """
    _check_sizes(N=N, d=d)
    return 4 * N * d + 4 * N * N


def flash_io(N: int, d: int, block_m: int, block_n: int, causal: bool = False) -> int:
    """HBM accesses of this book's forward kernel (FlashAttention-2's loop order), in elements.

    Each program reads its query block once and writes its output block and log-sum-exp once;
    it reads the keys and values of every key block its loop visits (causal: up to the diagonal).
    """
    _check_sizes(N=N, d=d, block_m=block_m, block_n=block_n, causal=causal)
    total = 2 * N * d + N  # Q read, O written, lse written
    for i0 in range(0, N, block_m):
        hi = min(i0 + block_m, N) if causal else N
        n_keys = min(math.ceil(hi / block_n) * block_n, N)  # whole key blocks, clipped at N
        total += 2 * n_keys * d  # K and V of every visited block
    return total


def flash_flops(N: int, d: int, block_m: int, block_n: int, causal: bool = False) -> int:
    """FLOPs of this book's forward kernel: the two products of every tile its loop visits.

    The same loop as :func:`flash_io`: a query block of ``r`` rows against ``n`` keys costs
    ``2 r n d`` for the scores and ``2 r n d`` for the weighted sum (2 FLOPs per multiply-add).
    Causal, the diagonal tiles are computed whole and masked, so the count is a little more
    than half of ``4 N² d``.
    """
    _check_sizes(N=N, d=d, block_m=block_m, block_n=block_n, causal=causal)
    total = 0
    for i0 in range(0, N, block_m):
        rows = min(block_m, N - i0)
        hi = min(i0 + block_m, N) if causal else N
        n_keys = min(math.ceil(hi / block_n) * block_n, N)
        total += 4 * rows * n_keys * d
    return total


def decoding_bytes(T: int, d: int, *, g: int = 1, n_split: int = 1, bytes_per: int = 2,
                   partial_bytes: int = 4) -> int:
    """HBM bytes of one decoding step of :func:`attnbook.gpu.flash_decoding`, per key/value head.

    The ``g`` query heads that share the head read its keys and values once (``2 T d``
    elements), read their ``g`` queries and write ``g`` outputs. Each query's ``n_split``
    programs also write a partial output and log-sum-exp each (float32), which the merge
    kernel reads back: ``2 n_split (d + 1)`` more elements per query.

    Args:
        T: cached tokens; d: head width; g: query heads per key/value head (1 without
            grouped-query attention).
        n_split: splits per query; bytes_per: bytes per element of the cache, query and
            output; partial_bytes: bytes per element of the partials.

    Returns:
        The bytes read and written, an integer.

    Raises:
        ValueError: a size below 1. TypeError: a size that is not a whole number.
    """
    _check_sizes(T=T, d=d, g=g, n_split=n_split, bytes_per=bytes_per,
                 partial_bytes=partial_bytes)
    cache = (2 * T * d + 2 * g * d) * bytes_per  # K, V once; g queries read, g outputs written
    partials = 2 * g * n_split * (d + 1) * partial_bytes  # written by the splits, read back
    return cache + partials


def sram_blocks(M: int, d: int) -> tuple[int, int]:
    """The largest query and key blocks whose tiles fit in SRAM of ``M`` elements.

    A program of the tiled forward holds a block of ``b_m`` queries and its output
    (``2 b_m d``), one block of ``b_n`` keys and values (``2 b_n d``), and the ``b_m x b_n``
    tile of scores, then of probabilities: ``2 b_m d + 2 b_n d + b_m b_n <= M``. The score tile
    is why the blocks cannot both be ``M / 4d``: Dao et al. (2022, Algorithm 1) take
    ``B_c = ceil(M / 4d)`` keys and ``B_r = min(ceil(M / 4d), d)`` queries, so the tile has at
    most ``M / 4`` elements. This book's loop order has the queries outside, so the rule is
    applied with the roles swapped: ``b_n = min(floor(M / 4d), d)``, and ``b_m`` the largest
    that still fits, at least about ``M / 6d`` (``2 b_n d <= M / 2`` and ``b_n <= d``).

    Args:
        M: SRAM of one program, in elements; d: head width.

    Returns:
        ``(b_m, b_n)``.

    Raises:
        ValueError: ``M`` too small for one query, key, value and output row and their score.
        TypeError: a size that is not a whole number.
    """
    _check_sizes(M=M, d=d)
    b_n = min(M // (4 * d), d)
    b_m = (M - 2 * b_n * d) // (2 * d + b_n) if b_n else 0
    if b_m < 1:
        raise ValueError(f"SRAM of M = {M} elements holds no block at d = {d}: one query, "
                         f"output, key and value row and their score need M >= 4d + 1 = "
                         f"{4 * d + 1}")
    return b_m, b_n


def flash_io_bound(N: int, d: int, M: int) -> float:
    """The leading terms of :func:`flash_io` (not causal) with blocks as large as SRAM of ``M``
    elements allows (:func:`sram_blocks`): the keys and values are read ``N / b_m`` times,
    ``2 N d + 2 N d · N / b_m``; with ``b_m`` at least about ``M / 6d`` that is at most about
    ``2 N d + 12 N² d² / M``, Θ(N² d² / M) for ``M <= N d``.
    """
    _check_sizes(N=N)
    b_m, _ = sram_blocks(M, d)
    return 2 * N * d + 2 * N * d * N / b_m


def flop_count(fn, *args, **kwargs) -> int:
    """FLOPs of one call, counted by PyTorch's FlopCounterMode (2 per multiply-add of a matmul).

    Imported here, not at the top: importing ``torch.utils.flop_counter`` imports Triton when
    it is installed, before :func:`attnbook.gpu.triton_env.load_kernels` could choose the
    interpreter.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


class TrafficCounter(TorchDispatchMode):
    """Counts the bytes every (non-view) PyTorch operation reads and writes.

    A model of HBM traffic when each operation is a separate GPU kernel whose inputs and
    outputs are too large for the caches: every input is read once, every output written once.
    """

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and func.overloadpacket not in _FREE:
            tensors = [t for t in _flatten((args, kwargs, out)) if isinstance(t, torch.Tensor)]
            self.ops.append((func.overloadpacket.__name__,
                             sum(t.numel() * t.element_size() for t in tensors)))
        return out

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self.ops)


# Operations that move no data: aliases and allocations.
_FREE = {torch.ops.aten.detach, torch.ops.aten._unsafe_view, torch.ops.aten.lift_fresh,
         torch.ops.aten.empty, torch.ops.aten.empty_like, torch.ops.aten.new_empty}


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for item in x:
            yield from _flatten(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from _flatten(item)
    else:
        yield x
