"""The one timing helper of Part VI (attnbook.gpu.timing), checked without a GPU.

The CUDA path is exercised with stand-ins for torch.cuda's events and synchronize, which
record the order of calls: what matters is that the warm-up runs before the first event, that
each timed call sits between its own two events, and that the host synchronises once after the
warm-up and once at the end, not after every call.
"""

from __future__ import annotations

import pytest
import torch

from attnbook.gpu import timing
from attnbook.gpu.timing import Timing, benchmark


def test_cpu_path_runs_warmup_and_repeats_and_summarises():
    calls = []
    result = benchmark(lambda: calls.append(1), "cpu", warmup=2, repeats=5)
    assert len(calls) == 7
    assert isinstance(result, Timing) and result.repeats == 5 and result.device == "cpu"
    assert result.q25_ms <= result.median_ms <= result.q75_ms


def test_summary_is_median_and_quartiles():
    t = timing._summary([5.0, 1.0, 3.0, 2.0, 4.0], "x")
    assert t.median_ms == 3.0 and t.q25_ms == 1.5 and t.q75_ms == 4.5
    assert "3.000 ms" in str(t) and "5 runs" in str(t)
    one = timing._summary([2.0], "x")
    assert one.median_ms == one.q25_ms == one.q75_ms == 2.0


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="repeats >= 1"):
        benchmark(lambda: None, "cpu", repeats=0)


def test_cuda_path_synchronises_twice_not_per_call(monkeypatch):
    log = []
    clock = iter(range(1000))

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self):
            self.t = next(clock)
            log.append("record")

        def elapsed_time(self, end):
            assert self.t is not None and end.t is not None, "read before recording"
            return float(end.t - self.t)

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    result = benchmark(lambda: log.append("fn") or next(clock), "cuda", warmup=2, repeats=4)
    assert log[:3] == ["fn", "fn", "sync"]  # warm-up, then one synchronisation
    assert log[3:] == ["record", "fn", "record"] * 4 + ["sync"]  # one at the end only
    assert result.median_ms == 2.0 and result.repeats == 4 and result.device == "Fake GPU"
