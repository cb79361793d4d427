"""The timing helper for GPU work (CPU work too): warm-up, CUDA events, median and quartiles.

A CUDA kernel launch returns before the kernel has run, so ``time.perf_counter()`` around a
call measures the launch, not the work. :func:`benchmark` times each repetition between two
CUDA events recorded on the stream, so the GPU itself stamps when the work started and ended.
It synchronises after the warm-up and once at the end, not after every repetition: a
synchronisation per call would leave the GPU idle while the host prepares the next launch, and
for a kernel of tens of microseconds that gap would be measured with the kernel and could weigh
as much. The events time the GPU's work only while the host queues calls faster than the GPU
runs them: for a kernel shorter than its launch from Python, the GPU waits for the host either
way. With
``flush_l2`` a 256 MB buffer is zeroed before each repetition (outside the events), so every
call reads its inputs from HBM rather than from the L2 cache, as in ``triton.testing.do_bench``.

On the CPU the same helper times with ``time.perf_counter``, which is right there: CPU work
is finished when the call returns. That loop is :func:`attnbook.lab.measure.timings`, one call
at a time. The CPU labs that compare timings (9 to 12, 14, 15) and ``benchmarks/`` use
:func:`attnbook.lab.measure.compare` instead, which interleaves the calls it compares and fixes
the number of threads.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: the median and the quartiles of ``repeats`` timed calls."""

    median_ms: float
    q25_ms: float
    q75_ms: float
    repeats: int
    device: str

    def __str__(self) -> str:
        return (f"{self.median_ms:.3f} ms (quartiles {self.q25_ms:.3f}-{self.q75_ms:.3f}, "
                f"{self.repeats} runs, {self.device})")


def benchmark(fn: Callable[[], object], device: torch.device | str | None = None, *,
              warmup: int = 3, repeats: int = 20, flush_l2: bool = False) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones.

    Args:
        fn: the work, called with no arguments (compile or autotune happens in the warm-up).
        device: where ``fn`` runs; CUDA devices are timed with events, anything else with
            ``time.perf_counter``. None: CUDA if available.
        warmup: calls before timing (the first call of a Triton kernel compiles it).
        repeats: timed calls; the median and quartiles are over these.
        flush_l2: on CUDA, overwrite the L2 cache before each timed call.

    Returns:
        A :class:`Timing` in milliseconds per call.

    Raises:
        ValueError: ``repeats < 1`` or ``warmup < 0``.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type != "cuda":  # the labs' CPU loop, threads left as they are
        from ..lab.measure import timings  # here: `import attnbook` loads no lab module

        cpu = timings(fn, repeats=repeats, threads=None, warmup=warmup)
        return _summary([t * 1e3 for t in cpu.times], "cpu")
    for _ in range(warmup):
        fn()
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if flush_l2 else None
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats)]
    torch.cuda.synchronize(device)  # the warm-up is done before the first event
    for start, end in events:
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)  # once: every event has been reached
    return _summary([start.elapsed_time(end) for start, end in events],
                    torch.cuda.get_device_name(device))


def _summary(times: list[float], device: str) -> Timing:
    """Median and quartiles of the times (ms)."""
    if len(times) == 1:
        return Timing(times[0], times[0], times[0], 1, device)
    q25, _, q75 = statistics.quantiles(times, n=4)
    return Timing(statistics.median(times), q25, q75, len(times), device)
