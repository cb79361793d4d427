"""Peak memory for the attention benchmark: each configuration in a fresh process.

Memory is the rise of the resident set size above the inputs (Linux: the high-water mark is
reset before the call). A fresh process per configuration keeps earlier runs from inflating it.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# Fixed (not adaptive) malloc threshold: freed blocks go back to the OS at once, so the
# resident set size of the probes rises and falls with the tensors alive.
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")

from bench_methods import build, inputs, step  # noqa: E402
from torch import nn  # noqa: E402

MiB = 2**20


def _status(field_name: str) -> int:
    """A field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field_name)


def peak_above_baseline(run: Callable[[], object]) -> float:
    """Peak rise of the resident set during ``run()``, in MiB."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # "5": reset VmHWM to the current resident set size
    base = _status("VmRSS")
    out = run()
    peak = _status("VmHWM")
    del out
    return (peak - base) / MiB


def memory_probe(args: tuple[str, int, int, int, tuple[str, ...]]) -> dict[str, float]:
    """In a fresh process: peak memory of one method at one (B, T, d), for each mode."""
    method, B, T, d, modes = args
    result = {}
    for mode in modes:
        for size in (min(T, 64), T):  # warm up on a small input, then measure the real one
            x, g = inputs(B, size, d, mode)
            f = build(method, d, size, B)
            if isinstance(f, nn.Module):
                f.train(mode != "fwd")
            if size != T:
                step(f, x, mode, g)
                continue
            result[mode] = peak_above_baseline(lambda f=f, x=x, g=g, mode=mode:
                                                step(f, x, mode, g))
        del x, g, f
    return result


def measure_memory(B: int, jobs: list[tuple[str, int, int, tuple[str, ...]]]):
    """Run every probe in its own process (forked from a server that only imported torch, so
    each starts clean and fast). Returns {(method, d, T): {mode: MiB}}."""
    if not Path("/proc/self/clear_refs").exists():
        print("note: no /proc/self/clear_refs (not Linux); memory is not measured")
        return {}
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "attnbook", "attnbook.online"])
    args = [(m, B, T, d, modes) for m, d, T, modes in jobs]
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx, max_tasks_per_child=1) as pool:
        results = list(pool.map(memory_probe, args))
    return {(m, d, T): r for (m, d, T, _), r in zip(jobs, results)}
