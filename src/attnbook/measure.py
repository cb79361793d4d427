"""Measuring tools shared by the labs of Part III and the benchmarks: tensor memory and time.

``LiveTensorBytes`` counts the bytes of the tensors PyTorch's operators keep alive (exact and the
same on every run); ``best_time`` is the least disturbed time of a call; ``timings`` keeps every
repeat, so a report can give a median and its spread.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass


class LiveTensorBytes:
    """Peak bytes of the tensors PyTorch's operators create and keep alive during a call.

    A ``TorchDispatchMode`` sees every operator's outputs; each new storage is counted until the
    last tensor that views it is freed. It counts tensors, not the allocator: a kernel's private
    scratch buffers and the inputs passed in are not included. The count is exact and the same
    on every run, unlike the resident set of a process.

    Usage::

        with torch.no_grad():
            peak = LiveTensorBytes.of(lambda: model(x))   # bytes
    """

    @staticmethod
    def of(fn) -> int:
        """The peak bytes of the tensors created (and still alive) while ``fn()`` runs."""
        import weakref

        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        state = {"live": 0, "peak": 0}
        refs: dict[int, int] = {}  # storage address -> live tensors viewing it

        def release(key: int, nbytes: int) -> None:
            refs[key] -= 1
            if refs[key] == 0:
                del refs[key]
                state["live"] -= nbytes

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in tree_leaves(out):
                    if not isinstance(t, torch.Tensor):
                        continue
                    storage = t.untyped_storage()
                    key, nbytes = storage.data_ptr(), storage.nbytes()
                    if key not in refs:
                        refs[key] = 0
                        state["live"] += nbytes
                        state["peak"] = max(state["peak"], state["live"])
                    refs[key] += 1
                    weakref.finalize(t, release, key, nbytes)
                return out

        with Mode():
            result = fn()
        peak = state["peak"]
        del result
        return peak


def best_time(fn, repeats: int = 7, threads: int | None = 1) -> float:
    """The shortest of ``repeats`` timed calls of ``fn()``, in seconds, after one warm-up call.

    The minimum, not the median, and one thread by default: on a machine shared with other
    programs these are the least disturbed. On CUDA the device is synchronised around each call.

    Args:
        fn: the call to time.
        repeats: timed calls after the warm-up.
        threads: CPU threads for PyTorch during the calls (None: leave as it is).
    """
    import time

    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        fn()
        sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return min(times)


@dataclass
class Timing:
    """Repeated times of one call, in seconds: the median and how far the repeats spread.

    Attributes:
        times: every timed repeat.
    """

    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: 0.1 means the repeats span 10% of the median."""
        return (max(self.times) - min(self.times)) / self.median

    @property
    def repeats(self) -> int:
        return len(self.times)


def timings(fn, repeats: int = 5, threads: int | None = None, warmup: int = 1) -> Timing:
    """Time ``repeats`` calls of ``fn()`` after ``warmup`` untimed ones (threads as in best_time).

    Shape:
        fn: () -> anything
    """
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return Timing(times)
