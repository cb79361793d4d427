"""Part VI, attention on a GPU: the IO count, and FlashAttention written in Triton.

Importing this package does not import Triton: the kernels load on first use
(:func:`attnbook.gpu.triton_env.load_kernels`), compiled on a CUDA device and through Triton's
interpreter on a machine without one. Triton is an optional extra: ``pip install
attnbook[triton]``.
"""

from .decoding import flash_decoding, merge_partials
from .flash import FlashAttention, flash_attention
from .io_cost import A100, GPU, H100, T4, TrafficCounter, flash_io, standard_io
from .timing import Timing, benchmark
from .triton_env import interpreting, load_kernels

__all__ = [
    "A100",
    "GPU",
    "H100",
    "T4",
    "FlashAttention",
    "Timing",
    "TrafficCounter",
    "benchmark",
    "flash_attention",
    "flash_decoding",
    "flash_io",
    "interpreting",
    "load_kernels",
    "merge_partials",
    "standard_io",
]
