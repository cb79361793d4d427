"""Timing for the attention benchmark: interleaved repeats, the machine's matmul ceiling, FLOPs."""

from __future__ import annotations

import torch
from bench_methods import build, inputs, step
from torch import nn

from attnbook.lab.measure import Timing, compare, timings


def time_point(B: int, d: int, T: int, mode: str, methods: list[str], repeats: int,
               budget_s: float) -> dict[str, Timing]:
    """Every repeat of each method at one (B, T, d, mode), by the labs' protocol.

    ``attnbook.lab.measure.compare``: two warm-up rounds, then repeats that interleave the methods,
    so that a change in the machine's load affects all of them alike; after ``budget_s``
    seconds a point stops at three repeats or more. Threads as set for the run (the ``_1t``
    methods switch to one inside the call).
    """
    x, g = inputs(B, T, d, mode)
    fns = {m: build(m, d, T, B) for m in methods}
    for f in fns.values():
        f.train(mode != "fwd") if isinstance(f, nn.Module) else None
    calls = {m: (lambda f=f: step(f, x, mode, g)) for m, f in fns.items()}
    return compare(calls, repeats, threads=torch.get_num_threads(), warmup=2, budget_s=budget_s)


def matmul_gflops(n: int, repeats: int = 5) -> float:
    """Float32 throughput of an (n, n) @ (n, n) matmul, 2n³ FLOPs, median of ``repeats``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    t = timings(lambda: a @ b, repeats, threads=torch.get_num_threads())
    return 2 * n**3 / t.median / 1e9


def attention_flops(B: int, T: int, d: int, mode: str) -> float:
    """Useful FLOPs: causal attention counts 2·B·T²·d per matmul pair (half of 2 · 2·B·T²·d),
    plus the three projections, 3 · 2·B·T·d². A backward does twice the forward's matmuls."""
    fwd = 2 * B * T * T * d + 6 * B * T * d * d
    return fwd if mode == "fwd" else 3 * fwd
