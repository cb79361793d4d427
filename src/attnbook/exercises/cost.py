"""Checks for the lab "The cost of attention", and two measuring tools for the labs of Part III."""

from __future__ import annotations

from . import Feedback, check_number


def check_score_bytes(answer, B: int, T: int, bytes_per_number: int = 4) -> Feedback:
    """Exercise: bytes of the (B, T, T) score matrix, B·T²·bytes_per_number.

    Shape:
        answer: a number
    """
    right = B * T * T * bytes_per_number
    mistakes = {
        "the bytes of one sequence: you left out the batch B": T * T * bytes_per_number,
        "a count of numbers, not bytes (multiply by the bytes per number)": B * T * T,
        "bits, not bytes (a byte is 8 bits)": 8 * right,
        "only the lower triangle: the explicit module stores the whole square":
            B * T * (T + 1) // 2 * bytes_per_number,
    }
    return check_number(answer, right, mistakes, "the bytes")


def check_score_flops(answer, B: int, T: int, d: int) -> Feedback:
    """Exercise: FLOPs of Q Kᵀ for the full (T, T) matrix, 2·B·T²·d (a multiply and an add).

    Shape:
        answer: a number
    """
    right = 2 * B * T * T * d
    mistakes = {
        "multiplications only: each also has an addition, so count 2 FLOPs": B * T * T * d,
        "one sequence only: you left out the batch B": 2 * T * T * d,
        "the projections' cost 2·B·T·d², not the scores' 2·B·T²·d": 2 * B * T * d * d,
        "the causal half: the explicit module computes the whole square": B * T * T * d,
        "T·d, as if each query met one key": 2 * B * T * d,
    }
    return check_number(answer, right, mistakes, "the FLOPs")


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
