"""Measuring tools shared by the labs of Part III and the benchmarks: tensor memory and time.

``LiveTensorBytes`` counts the bytes of the tensors a call creates and keeps alive (exact and
the same on every run). CPU time has one protocol, used by the labs that compare CPU timings
(Labs 9 to 12, 14 and 15) and by ``benchmarks/``. It reads the host's clock
(``time.perf_counter``), which is right for CPU work: a CPU call has done its work when it
returns.

* :func:`compare` times several calls **interleaved** (one repeat of each in turn, so a change
  in the machine's load hits all of them alike) after ``warmup`` untimed rounds, on a stated
  number of threads, and keeps every repeat: a :class:`Timing` gives the median and the spread;
* :func:`timings` is the same for one call; :func:`best_time` its minimum (kept for the labs
  that quote a best time);
* :func:`keep_freed_memory` fixes the C allocator's behaviour first. With glibc's defaults a
  freed buffer of many MiB is returned to the operating system, so the next call of the same
  function gets fresh pages and pays to have them mapped and zeroed, page by page; whether that
  happens depends on what the process allocated before (glibc adapts its threshold), which made
  the same call take twice as long in one lab as in another. :func:`fresh_pages` fixes the
  opposite behaviour, to measure that cost on purpose.

GPU work needs another clock: a CUDA call returns once its kernel is queued, before it has run.
Kernel-level GPU timing (CUDA events, one synchronisation after the warm-up and one at the end,
optional L2 flushing) is :func:`attnbook.gpu.timing.benchmark`, which Lab 2's GPU cells, Labs 17
and 19 and ``make gpu-check`` use (the book's *How we measure*, "On a GPU"); on the CPU it runs
the loop of :func:`timings`, one call at a time, not interleaved.

Its arguments are checked with :func:`attnbook.checks.check_whole_number`.
"""

from __future__ import annotations

import math
import numbers
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..checks import check_whole_number


class LiveTensorBytes:
    """Peak bytes of the tensors PyTorch's operators create and keep alive during a call.

    A ``TorchDispatchMode`` sees every operator's outputs. An output that is a new storage is
    counted until the last tensor that views it is freed; an output that is a view of an
    operator's input (the operator's schema says it aliases, e.g. ``q[:, None]``, ``view``,
    ``transpose``, in-place ops) adds nothing, so the storages that existed before the call,
    the inputs included, are never counted. It counts tensors, not the allocator: a kernel's
    private scratch buffers are not included. The count is exact and the same on every run,
    unlike the resident set of a process.

    Usage::

        with torch.no_grad():
            peak = LiveTensorBytes.of(lambda: model(x))   # bytes
    """

    @staticmethod
    def of(fn: Callable[[], object]) -> int:
        """The peak bytes of the storages allocated (and still alive) while ``fn()`` runs.

        Raises:
            TypeError: ``fn`` is not callable (e.g. ``model(x)`` instead of ``lambda: model(x)``).
        """
        _check_call("LiveTensorBytes.of's fn", fn)
        import weakref

        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        state = {"live": 0, "peak": 0}
        refs: dict[int, int] = {}  # address of a storage created in the call -> live views

        def release(key: int, nbytes: int) -> None:
            refs[key] -= 1
            if refs[key] == 0:
                del refs[key]
                state["live"] -= nbytes

        def track(t: torch.Tensor, new: bool) -> None:
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if key not in refs:
                if not new:  # a view of a storage from before the call: not ours to count
                    return
                refs[key] = 0
                state["live"] += nbytes
                state["peak"] = max(state["peak"], state["live"])
            refs[key] += 1
            weakref.finalize(t, release, key, nbytes)

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                outs = out if isinstance(out, (tuple, list)) else (out,)
                returns = func._schema.returns
                for i, o in enumerate(outs):
                    aliases = i < len(returns) and returns[i].alias_info is not None
                    for t in tree_leaves(o):
                        if isinstance(t, torch.Tensor):
                            track(t, new=not aliases)
                return out

        with Mode():
            result = fn()
        peak = state["peak"]
        del result
        return peak


def _check_call(name: str, fn) -> None:
    """TypeError unless ``fn`` can be called with no arguments (a common slip: ``f(x)``)."""
    if not callable(fn):
        raise TypeError(f"{name} must be a function to call with no arguments, got "
                        f"{type(fn).__name__}; wrap the call in a lambda: lambda: f(x), "
                        "not f(x)")


@dataclass
class Timing:
    """Repeated times of one call, in seconds: the median and how far the repeats spread.

    Attributes:
        times: every timed repeat (seconds).
        threads: the CPU threads PyTorch used (None: not set by the helper).
        warmup: untimed calls before the first timed one.
    """

    times: list[float]
    threads: int | None = None
    warmup: int = 0

    def __post_init__(self) -> None:
        if len(self.times) == 0:
            raise ValueError("a Timing needs at least one timed repeat, got no times")

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: 0.1 means the repeats span 10% of the median.

        0 when every repeat took the same time (also when that time is 0, below the clock's
        resolution); infinite when the median is 0 but the repeats differ.
        """
        width = max(self.times) - min(self.times)
        if width == 0:
            return 0.0
        return width / self.median if self.median else math.inf

    @property
    def repeats(self) -> int:
        return len(self.times)

    def __str__(self) -> str:
        threads = "" if self.threads is None else f", {self.threads} thread(s)"
        return (f"{self.median * 1e3:.3g} ms (median of {self.repeats}, ±{50 * self.spread:.0f}%"
                f"{threads})")


def compare(fns: dict[str, Callable[[], object]], repeats: int = 7, threads: int | None = 1,
            warmup: int = 2, budget_s: float | None = None) -> dict[str, Timing]:
    """Time several calls interleaved: ``warmup`` untimed rounds, then ``repeats`` timed ones.

    Each round calls every function once, so slow moments of a shared machine fall on all of
    them alike, and round r starts at the r-th function (a rotation of the order): no function
    always runs right after the same one, whose cache state or clock it would inherit. Ratios
    of medians from one ``compare`` are the numbers to quote. Two
    warm-up rounds: the first call picks kernels and allocates, the second finds the allocator
    as every later call will. On CUDA the device is synchronised around each call.

    Args:
        fns: name -> the call to time.
        repeats: timed rounds.
        threads: CPU threads for PyTorch during the calls (None: leave as it is); restored after.
        warmup: untimed rounds.
        budget_s: stop after the round that passes this many seconds of timing, once at least
            three rounds are done (None: always ``repeats``).

    Returns:
        name -> :class:`Timing` (seconds).

    Raises:
        ValueError: ``repeats < 1``, ``warmup < 0``, ``threads < 1``, a negative or NaN
            ``budget_s``, or no call to time.
        TypeError: ``fns`` is not a dict of functions of no arguments, or a count is not an int.
    """
    import torch

    if not isinstance(fns, dict):
        raise TypeError(f"fns must be a dict name -> function of no arguments, e.g. "
                        f"{{'sdpa': lambda: f(x)}}, got {type(fns).__name__}")
    if not fns:
        raise ValueError("fns is empty: give at least one call to time")
    for name, fn in fns.items():
        _check_call(f"the call to time {name!r}", fn)
    check_whole_number("repeats", repeats, 1)
    check_whole_number("warmup", warmup, 0)
    if threads is not None:
        check_whole_number("threads", threads, 1)
    if budget_s is not None and (not isinstance(budget_s, numbers.Real)
                                 or isinstance(budget_s, bool) or not budget_s >= 0):
        raise ValueError(f"budget_s must be None or a number of seconds >= 0, got {budget_s!r}")
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    times: dict[str, list[float]] = {name: [] for name in fns}
    try:
        for _ in range(warmup):
            for fn in fns.values():
                fn()
        sync()
        begin = time.perf_counter()
        order = list(fns.items())
        for r in range(repeats):
            k = r % len(order)
            for name, fn in order[k:] + order[:k]:
                start = time.perf_counter()
                fn()
                sync()
                times[name].append(time.perf_counter() - start)
            if budget_s is not None and r >= 2 and time.perf_counter() - begin > budget_s:
                break
    finally:
        torch.set_num_threads(before)
    return {name: Timing(ts, threads, warmup) for name, ts in times.items()}


def timings(fn: Callable[[], object], repeats: int = 5, threads: int | None = 1,
            warmup: int = 2) -> Timing:
    """Time ``repeats`` calls of ``fn()`` after ``warmup`` untimed ones (see :func:`compare`).

    Shape:
        fn: () -> anything
    """
    return compare({"fn": fn}, repeats, threads, warmup)["fn"]


def best_time(fn: Callable[[], object], repeats: int = 7, threads: int | None = 1) -> float:
    """The shortest of ``repeats`` timed calls of ``fn()``, in seconds (see :func:`timings`).

    The minimum is the least disturbed repeat on a machine shared with other programs; the
    labs quote medians from :func:`compare` instead, with their spread.
    """
    return timings(fn, repeats, threads).min


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def _mallopt(*settings: tuple[int, int]) -> bool:
    """Apply glibc mallopt settings; False where there is no glibc (macOS, Windows, musl)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(param, value) == 1 for param, value in settings)


def keep_freed_memory() -> bool:
    """Let the C allocator keep freed buffers for reuse (glibc only; elsewhere nothing changes).

    Sets glibc's mmap threshold to 32 MiB (buffers up to that size come from the heap and are
    reused; it is the largest threshold glibc chooses by itself on 64-bit systems, though glibc
    2.36 accepts larger ones) and its trim threshold to 1 GiB (freed heap memory is kept). A
    larger buffer, such as a float32 (B, T, T) tensor of 64 MiB, is still mapped fresh on every
    call; chapter 9 says where that affects the benchmark. The
    setting is fixed, so it does not depend on what the process did before. It stays for the
    rest of the process; it changes speed only, never a result.

    Returns:
        Whether the setting was applied.
    """
    return _mallopt((_M_MMAP_THRESHOLD, 32 * 2**20), (_M_TRIM_THRESHOLD, 2**30))


def fresh_pages() -> bool:
    """Give every buffer above 128 KiB fresh pages from the operating system (glibc only).

    The opposite of :func:`keep_freed_memory`, and also fixed: each large tensor is mapped when
    it is created and returned when it is freed, so a call pays to fault in its pages every time.

    Returns:
        Whether the setting was applied.
    """
    return _mallopt((_M_MMAP_THRESHOLD, 128 * 2**10), (_M_TRIM_THRESHOLD, 128 * 2**10))


def conditions() -> str:
    """The load averages (1, 5, 15 min) and the core count: what a timing was measured under."""
    try:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:  # not available on this system
        load = "unknown"
    return f"load average {load} on {os.cpu_count()} cores"
