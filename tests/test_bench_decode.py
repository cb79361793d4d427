"""benchmarks/bench_decode.py: what it counts (operations, bytes, floors) and what it saves.

Nothing here is timed: the counts are exact and the same on every machine; the run that is
timed is stored in benchmarks/bench_decode.md (chapter 12 pastes it with {bench}).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_decode  # noqa: E402
from bench_results import results_json_from_markdown  # noqa: E402

from attnbook import AttentionLayer, MultiHeadAttention  # noqa: E402
from attnbook.kv_cache import KVCache  # noqa: E402


def test_count_ops_counts_every_operation_and_the_views_among_them():
    x = torch.ones(3)
    got = bench_decode.count_ops(lambda: x.add(1)[:2].unsqueeze(0).mul_(2))
    assert got == {"ops": 4, "views": 2}  # add, slice (view), unsqueeze (view), mul_
    assert bench_decode.count_ops(lambda: None) == {"ops": 0, "views": 0}


def test_the_hot_step_dispatches_what_the_checked_call_does_and_bare_plus_7():
    """The checks are Python: they dispatch nothing. What the library adds to the bare
    operations is its bookkeeping (the count of real tokens, the positions, the real mask):
    7 operations."""
    torch.manual_seed(0)
    for attn in (AttentionLayer(16, 40), MultiHeadAttention(16, 40, 4)):
        fns, caches = bench_decode.attention_steps(attn, 8)
        n = {k: bench_decode.counted(fn, caches, 8) for k, fn in fns.items()}
        assert n["hot"] == n["checked"]
        assert n["hot"]["ops"] - n["bare"]["ops"] == 7


def test_the_tiny_model_hot_step_skips_the_id_checks():
    from attnbook import TinyConfig, TinyModel

    model = TinyModel(TinyConfig(16, 20, 16, 2)).eval()
    fns, caches = bench_decode.model_steps(model, 8, batch=2)
    hot, checked = (bench_decode.counted(fns[k], caches, 8) for k in ("hot", "checked"))
    assert checked["ops"] - hot["ops"] == 4  # min, max and two .item() reads of the ids
    assert hot["ops"] > 0


def test_bytes_read_by_a_step():
    cache = KVCache.empty(4, 32, 16, n_kv_heads=2)
    assert bench_decode.cache_bytes_read([cache], 10) == 2 * 4 * 2 * 10 * 16 * 4
    attn = AttentionLayer(8, 16)
    assert bench_decode.parameter_bytes(attn) == 3 * 8 * 8 * 4  # three projections, no bias
    assert bench_decode.parameter_bytes(attn, skip=("query", "key")) == 8 * 8 * 4


def test_floors():
    f = bench_decode.floors({"ops": 30, "views": 18}, nbytes=10**6, per_op_s=2e-6,
                            per_view_s=1e-6, bandwidth=10**10)
    assert f["dispatch"] == pytest.approx(12 * 2e-6 + 18 * 1e-6)
    assert f["memory"] == pytest.approx(1e-4)


def test_rewind_leaves_the_same_step_to_time():
    attn = AttentionLayer(8, 16)
    fns, caches = bench_decode.attention_steps(attn, 5)
    with torch.no_grad():
        first = fns["hot"]()
        bench_decode.rewind(caches, 5)
        again = fns["hot"]()
    assert caches[0].length == 6 and torch.equal(first, again)


class _Timing:
    def __init__(self, t: float):
        self.median, self.min, self.spread = 2 * t, t, 0.1


def test_main_saves_tables_the_converter_reads(tmp_path, monkeypatch):
    """A whole run, with the timing faked and small sizes, writes the .md and the .json that
    the chapter's {bench} keys read (the stored file is checked by tests/test_bench_prose.py)."""
    special = {"empty op": 1e-4, "view": 1e-4, "main read": 4 * 1024 / 1e10,
               "main copy": 8 * 1024 / 2e10, "cache read": 4 * 256 * 10 / 4e10}

    def fake_compare(calls, *a, **k):
        return {name: _Timing(special.get(name, 1e-3)) for name in calls}

    monkeypatch.setattr(bench_decode, "compare", fake_compare)
    monkeypatch.setattr(bench_decode, "LENGTHS", (4, 8))
    monkeypatch.setattr(bench_decode, "MIDDLE", 8)
    monkeypatch.setattr(bench_decode, "BATCHES", (1, 2))
    monkeypatch.setattr(bench_decode, "MAIN", 1024)
    monkeypatch.setattr(bench_decode, "IN_CACHE", 256)
    monkeypatch.setattr(bench_decode, "CONTEXT", 300)
    bench_decode.main(["--repeats", "1", "--steps", "2", "--no-compile",
                       "--save", str(tmp_path / "bench_decode.md"), "--allow-loaded"])
    text = (tmp_path / "bench_decode.md").read_text(encoding="utf-8")
    values = json.loads((tmp_path / "bench_decode.json").read_text())["values"]
    assert values == results_json_from_markdown(text, "bench_decode")["values"]
    assert values["bandwidth.read_gb_s"] == 10.0 and values["bandwidth.in_cache_gb_s"] == 40.0
    assert values["dispatch.per_op_us"] == 0.5  # 100 µs for 200 operations
    assert values["bandwidth.copy_gb_s"] == 20.0
    assert values["floors.one_head.L8.step"] == 1000.0  # a median of 2 ms for 2 steps
    assert values["overhead.one_head.extra_ops"] == 7
    assert values["batching.batch2.tokens_s"] == 1000  # 2 tokens in a median 2 ms (a step a call)
    assert values["batching.best.batch"] == 2 and values["batching.best.gain"] == 2.0
    assert "floors.all.step_dispatch_floor.max" in values


# -- what chapter 12 says about the stored run ----------------------------------------------

STORED = json.loads((ROOT / "benchmarks" / "bench_decode.json").read_text(encoding="utf-8"))[
    "values"]
PAGE = (ROOT / "book" / "12_kv_cache.md").read_text(encoding="utf-8")


def test_chapter_12_pastes_the_breakdown_and_the_batching_curve():
    for gen in ("one_head", "4_heads", "tiny_model"):
        for L in bench_decode.LENGTHS:
            for col in ("step", "operations", "dispatch_floor", "memory_bound"):
                assert f"{{bench}}`bench_decode:floors.{gen}.L{L}.{col}" in PAGE, (gen, L, col)
    for b in bench_decode.BATCHES:
        assert f"{{bench}}`bench_decode:batching.batch{b}.tokens_s" in PAGE, b
    assert "(how-we-measure)=" in (ROOT / "book" / "how_we_measure.md").read_text(
        encoding="utf-8") and "{ref}`how-we-measure`" in PAGE


def test_the_stored_run_says_what_chapter_12_says_of_it():
    """Each sentence of "Against the memory bound" that reads the numbers, held to the stored
    run: a rerun that contradicts one fails here, and the sentence must change with it."""
    v = STORED
    gens = ("one_head", "4_heads", "tiny_model")
    # "every step takes between ... times its dispatch floor": a floor, and the same order
    assert 1 <= v["floors.all.step_dispatch_floor.min"] <= v["floors.all.step_dispatch_floor.max"]
    # "at small L a step is dispatch-bound": above its memory bound at L = 64 ...
    assert all(v[f"floors.{g}.L64.step_memory_bound"] > 1 for g in gens)
    # ... and "takes ... at L = 64 and ... at L = 256, although it reads three times the bytes"
    assert v["floors.one_head.L256.step"] < 1.5 * v["floors.one_head.L64.step"]
    assert 2.5 < v["floors.one_head.L256.bytes_read"] / v["floors.one_head.L64.bytes_read"] < 3.5
    # "at L = 64 the dispatch floor is the higher of the two floors for every generator"
    assert all(v[f"floors.{g}.L64.dispatch_floor"] > v[f"floors.{g}.L64.memory_bound"]
               for g in gens)
    # "at L = 1024 the one-head step's memory bound is above its dispatch floor, while the tiny
    # model still has the higher dispatch floor"
    assert v["floors.one_head.L1024.memory_bound"] > v["floors.one_head.L1024.dispatch_floor"]
    assert v["floors.tiny_model.L1024.dispatch_floor"] > v["floors.tiny_model.L1024.memory_bound"]
    # "against the in-cache bound every step is still ... times slower"
    assert v["floors.all.step_in_cache_bound.min"] > 1
    # "the checks ... dispatch nothing"; the tiny model's id checks dispatch a few operations
    assert v["overhead.one_head.check_ops"] == v["overhead.4_heads.check_ops"] == 0
    assert v["overhead.tiny_model.check_ops"] > 0
    assert v["overhead.one_head.bare_operations"] < v["overhead.one_head.hot_step"]
    # "the library keeps its eager step"
    assert v["compiled.static_shapes_torch_compile.pays"] == "NO"
    # "a batch runs the same operations": one dispatch floor for every batch size
    assert len({v[f"batching.batch{b}.dispatch_floor"] for b in bench_decode.BATCHES}) == 1
    # "from batch 1 to batch ..., tokens per second rise ... times"
    assert v["batching.best.batch"] > 1 and v["batching.best.gain"] > 1
    # "each doubling of the batch gains less than the one before"
    rate = [v[f"batching.batch{b}.tokens_s"] for b in bench_decode.BATCHES]
    gains = [b / a for a, b in zip(rate, rate[1:])]
    assert all(later < earlier for earlier, later in zip(gains, gains[1:])), gains
