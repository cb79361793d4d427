"""Timing for the attention benchmark: interleaved repeats, the machine's matmul ceiling, FLOPs."""

from __future__ import annotations

import statistics
import time

import torch
from bench_methods import build, inputs, step
from torch import nn

from attnbook.measure import Timing


def time_point(B: int, d: int, T: int, mode: str, methods: list[str], repeats: int,
               budget_s: float) -> dict[str, Timing]:
    """Every repeat of each method at one (B, T, d, mode).

    The repeats interleave the methods, so that a change in the machine's load affects all of
    them alike; after ``budget_s`` seconds a point stops at three repeats or more.
    """
    x, g = inputs(B, T, d, mode)
    fns = {m: build(m, d, T, B) for m in methods}
    for f in fns.values():
        f.train(mode != "fwd") if isinstance(f, nn.Module) else None
        step(f, x, mode, g)  # warm-up: kernels chosen, buffers touched
    times: dict[str, list[float]] = {m: [] for m in methods}
    start = time.perf_counter()
    for r in range(repeats):
        for m, f in fns.items():
            t0 = time.perf_counter()
            step(f, x, mode, g)
            times[m].append(time.perf_counter() - t0)
        if r >= 2 and time.perf_counter() - start > budget_s:
            break
    return {m: Timing(ts) for m, ts in times.items()}


def matmul_gflops(n: int, repeats: int = 5) -> float:
    """Float32 throughput of an (n, n) @ (n, n) matmul, 2n³ FLOPs, median of ``repeats``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(ts) / 1e9


def attention_flops(B: int, T: int, d: int, mode: str) -> float:
    """Useful FLOPs: causal attention counts 2·B·T²·d per matmul pair (half of 2 · 2·B·T²·d),
    plus the three projections, 3 · 2·B·T·d². A backward does twice the forward's matmuls."""
    fwd = 2 * B * T * T * d + 6 * B * T * d * d
    return fwd if mode == "fwd" else 3 * fwd
