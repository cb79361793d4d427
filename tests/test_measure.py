"""attnbook.lab.measure: the one timing protocol of the labs and benchmarks, and LiveTensorBytes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbook.lab.measure import (
    LiveTensorBytes,
    Timing,
    best_time,
    compare,
    conditions,
    fresh_pages,
    keep_freed_memory,
    timings,
)


def test_views_of_storages_from_before_the_call_are_not_counted():
    q, k, v = (torch.randn(2, 64, 16) for _ in range(3))  # 8 KiB each, made before the call
    size = q.numel() * q.element_size()
    assert LiveTensorBytes.of(lambda: q.view(-1)) == 0
    assert LiveTensorBytes.of(lambda: q[:, None].transpose(-2, -1)) == 0
    assert LiveTensorBytes.of(lambda: q[:, None] * 2) == size  # the product only, not q
    with torch.no_grad():  # output + log-sum-exp of one flash call, not the caller's q, k, v
        peak = LiveTensorBytes.of(lambda: F.scaled_dot_product_attention(
            q[:, None], k[:, None], v[:, None], is_causal=True))
    assert size <= peak < 2 * size, peak


def test_views_of_new_storages_keep_them_alive():
    x = torch.randn(256)

    def view_outlives_its_base():
        a = x * 2  # 1 KiB
        b = a[:128]  # keeps a's storage alive after a's name is gone
        del a
        c = b + 1  # 512 B, alive with a's storage
        return c

    assert LiveTensorBytes.of(view_outlives_its_base) == 1024 + 512


def test_compare_interleaves_after_warmup_and_restores_threads():
    log = []
    before = torch.get_num_threads()
    result = compare({"a": lambda: log.append("a"), "b": lambda: log.append("b")},
                     repeats=3, threads=1, warmup=2)
    # warm-up rounds in the given order, then rotated timed rounds: no call always follows one
    assert log == ["a", "b"] * 2 + ["a", "b", "b", "a", "a", "b"]
    log.clear()
    compare({n: (lambda n=n: log.append(n)) for n in "xyz"}, repeats=3, threads=1, warmup=0)
    assert log == list("xyz" "yzx" "zxy")
    assert torch.get_num_threads() == before
    t = result["a"]
    assert isinstance(t, Timing) and t.repeats == 3 and t.threads == 1 and t.warmup == 2
    assert t.min <= t.median and t.spread >= 0 and "median of 3" in str(t)
    with pytest.raises(ValueError, match="repeats >= 1"):
        compare({"a": lambda: None}, repeats=0)


def test_timings_and_best_time():
    calls = []
    t = timings(lambda: calls.append(1), repeats=4, warmup=1)
    assert len(calls) == 5 and t.repeats == 4
    assert best_time(lambda: torch.ones(8).sum(), repeats=2) > 0


def test_allocator_settings_and_conditions_say_what_they_did():
    assert isinstance(fresh_pages(), bool)
    assert isinstance(keep_freed_memory(), bool)  # last: the setting the labs time under
    assert "load average" in conditions()


def test_the_labs_the_docstrings_name_are_the_labs_that_time_so():
    """attnbook.lab.measure's docstring names the labs that compare CPU timings with ``compare``
    (9 to 12, 14, 15) and the GPU labs that use ``attnbook.gpu.timing.benchmark`` (17 to 19;
    Lab 18 times nothing); attnbook.gpu.timing's says the same. A lab that starts or stops
    timing one way must change the docstrings too."""
    import json
    import re
    from pathlib import Path

    import attnbook.lab.measure as measure
    from attnbook.gpu import timing

    labs = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))

    def code(path):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")

    def calling(module, name):
        """Labs that import ``name`` from ``module`` and call it."""
        imports = rf"from {re.escape(module)} import [^\n]*\b{name}\b"
        return {int(p.name[:2]) for p in labs
                if re.search(imports, code(p)) and re.search(rf"\b{name}\(", code(p))}

    assert calling("attnbook.lab.measure", "compare") == {9, 10, 11, 12, 14, 15}
    assert "(Labs 9 to 12, 14 and 15)" in measure.__doc__
    assert "(9 to 12, 14, 15)" in timing.__doc__
    gpu_labs = calling("attnbook.gpu.timing", "benchmark")
    assert gpu_labs == {2, 17, 19}  # Lab 18 times nothing
    assert "Lab 2's GPU cells, Labs 17 and 19" in " ".join(measure.__doc__.split())
