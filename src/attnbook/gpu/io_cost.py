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


@dataclass(frozen=True)
class GPU:
    """The few numbers of a GPU that a roofline needs (vendor datasheets, dense, no sparsity)."""

    name: str
    hbm_bytes_per_s: float  # off-chip memory (HBM) bandwidth
    flops_per_s: float  # tensor-core peak for float16 / bfloat16 inputs, float32 accumulate
    n_sm: int  # streaming multiprocessors: how many programs run at once, roughly
    sram_bytes_per_sm: int  # on-chip shared memory one program can use

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which the roofline turns: below it, memory sets the speed."""
        return self.flops_per_s / self.hbm_bytes_per_s


T4 = GPU("T4", 320e9, 65e12, 40, 64 * 1024)  # Colab's free GPU; its memory is GDDR6, not HBM
A100 = GPU("A100 SXM4 80GB", 2.039e12, 312e12, 108, 164 * 1024)
H100 = GPU("H100 SXM5", 3.35e12, 989e12, 132, 228 * 1024)


def attainable_flops(intensity: float, gpu: GPU) -> float:
    """The roofline: min(peak FLOP/s, intensity x bandwidth) (Williams et al., 2009)."""
    return min(gpu.flops_per_s, intensity * gpu.hbm_bytes_per_s)


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


def flash_io_bound(N: int, d: int, M: int) -> float:
    """The leading term of :func:`flash_io` with blocks as large as SRAM of M elements allows.

    With ``block_m = M / (4 d)`` query rows per program (room for Q, O and one K, V block), the
    keys and values are read ``N / block_m`` times: ``2 N d · N / block_m = 8 N² d² / M``.
    """
    return 2 * N * d + 8 * N * N * d * d / M


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
