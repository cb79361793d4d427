"""What chapters 9-12 say about the benchmark's run agrees with the run (benchmarks/results.json).

The chapters show the benchmark's figures, paste the numbers they quote from the run with the
``{bench}`` role, and state a few facts around them in words (a slope is below 2, every ratio
is above 1, a target is not met, a second thread helps one side only). Rerunning the benchmark
rewrites results.md and results.json (tests/test_bench_prose.py checks that they agree); the
pasted numbers follow, and if a fact in words no longer holds, these tests fail, so the prose
cannot silently go stale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VALUES = json.loads((ROOT / "benchmarks" / "results.json").read_text(encoding="utf-8"))["values"]


def _page(name: str) -> str:
    return " ".join((ROOT / "book" / name).read_text(encoding="utf-8").split())


def _pastes(page: str, key: str) -> bool:
    """Whether the page pastes ``results.json``'s ``key`` with the {bench} role."""
    return re.search(r"\{bench\}`results:" + re.escape(key) + r"(?::[^`]*)?`", page) is not None


def _rows(prefix: str, suffix: str) -> dict[int, float]:
    """T -> value of every key ``prefix.d64.T<T>.suffix``."""
    pat = re.compile(re.escape(prefix) + r"\.d64\.T(\d+)\." + re.escape(suffix) + "$")
    return {int(m.group(1)): v for k, v in VALUES.items() if (m := pat.match(k))}


def test_chapter9_states_the_measured_slopes():
    """Fig. 9.1's dropdown: 'local slope a to b up to T = 1024' (below 2: fixed costs weigh), then
    the step from 1024 to 2048, where the (T, T) tensors outgrow what the allocator keeps, above 2
    in both modes, and the step from 2048 to 4096 pasted without a claim; all from the run."""
    short = "explicit_slope.up_to_T1024"
    cross = ("explicit_slope.fwd.T2048", "explicit_slope.fwd_bwd.T2048")
    last = ("explicit_slope.fwd.T4096", "explicit_slope.fwd_bwd.T4096")
    assert VALUES[f"{short}.max"] < 2 < min(VALUES[k] for k in cross)
    page = _page("09_cost.md")
    for key in (f"{short}.min", f"{short}.max", *cross, *last):
        assert _pastes(page, key), key
    assert "unexplained" in page
    slopes = [v for k, v in VALUES.items() if re.match(r"explicit_slope\.fwd(_bwd)?\.T\d+$", k)]
    assert len(slopes) == 8  # four steps between five lengths, two modes


def test_chapter9_small_peak_memory_entries_are_noise():
    """'How we measure' (cited by §9.4): 'its smallest forward entry reads X MiB, below the 0.5 MiB
    that the call's Q, K, V and output alone take' (four (B, T, d) float32 tensors)."""
    B, T, d = 4, 128, 64
    allocated = 4 * B * T * d * 4 / 2**20
    assert allocated == 0.5
    assert VALUES["memory.d64.T128.fwd.min"] < allocated
    page = _page("how_we_measure.md")
    assert _pastes(page, "memory.d64.T128.fwd.min")
    assert "its smallest forward entry" in page and "0.5 MiB" in page


def test_chapter11_calls_the_fused_path_and_sdpa_indistinguishable():
    """§11.9: the fused path's forward ratios to raw SDPA are pasted from the run as a range, and
    the page claims no direction for them (the wrapper's few microseconds are below the noise of
    a millisecond call; the lab measures the wrapper at T = 16); the benchmark's target verdict is
    pasted, whichever it is."""
    ratios = _rows("time_fwd", "fused.ratio")
    target = "targets.fused_vs_sdpa"
    page = _page("11_fused.md")
    assert len(ratios) == 5
    assert VALUES["fused_over_sdpa.fwd.min"] == min(ratios.values())
    assert VALUES["fused_over_sdpa.fwd.max"] == max(ratios.values())
    assert "indistinguishable" in page and "every forward ratio is above 1" not in page
    assert _pastes(page, "fused_over_sdpa.fwd.min") and _pastes(page, "fused_over_sdpa.fwd.max")
    assert _pastes(page, f"{target}.met") and VALUES[f"{target}.met"] in ("yes", "NO")
    assert (VALUES[f"{target}.met"] == "NO") == (VALUES[f"{target}.worst"]
                                                  > VALUES[f"{target}.limit"])
    assert "fused_wrapper_us" in page


def test_chapter10_does_not_claim_a_direction_for_the_benchmark_ratios():
    """§10.7 compares the lab's online/SDPA ratio with the benchmark's without saying which is
    smaller; the benchmark's range is pasted from the run."""
    ratios = {T: r for T, r in _rows("time_fwd", "online.ratio").items() if T >= 512}
    page = _page("10_online_softmax.md")
    assert "ratios are smaller than the lab's" not in page
    assert VALUES["online_over_sdpa.fwd.T_ge_512.min"] == min(ratios.values())
    assert VALUES["online_over_sdpa.fwd.T_ge_512.max"] == max(ratios.values())
    assert _pastes(page, "online_over_sdpa.fwd.T_ge_512.min")
    assert _pastes(page, "online_over_sdpa.fwd.T_ge_512.max")
    # no direction between one and two threads either: both pasted at T = 1024
    assert "ratio is lower at every" not in page
    assert _pastes(page, "time_fwd.d64.T1024.online.ratio")
    assert _pastes(page, "one_thread_fwd.d64.T1024.online_sdpa")


@pytest.mark.parametrize("table", ["time_fwd", "time_fwd_bwd", "padded_fwd", "padded_fwd_bwd",
                                   "one_thread_fwd", "memory", "kv_cache", "targets"])
def test_the_json_holds_every_table(table):
    assert sum(k.startswith(table + ".") for k in VALUES) >= 10


def test_chapter10_online_memory_facts():
    """§10 'Measured': the online peak stays within a few MiB of the fused kernel's; its slope
    between the two largest T is below 1; under plain autograd it grows with a slope close to 2."""
    online = {k: v for k, v in VALUES.items() if re.match(r"memory\.d64\.T\d+\.fwd\.online$", k)}
    assert len(online) == 5
    for key, v in online.items():
        assert abs(v - VALUES[key.replace(".online", ".fused")]) < 5, key
    assert VALUES["memory_slope.online.fwd"] < 1
    assert 1.5 < VALUES["memory_slope.online_autograd.fwd_bwd"] < 2.5
    page = _page("10_online_softmax.md")
    assert "slope between the two largest $T$ is therefore below 1" in page


def test_chapter12_second_thread_helps_recomputing_only():
    """§12 'Measured': 'a second thread made no cached generation faster ... while recomputing
    ... did get faster; so the cache's advantage is larger on one thread than on two'."""
    cache = [v for k, v in VALUES.items() if k.startswith("kv_threads.cache.")]
    rerun = [v for k, v in VALUES.items() if k.startswith("kv_threads.recomputing.")]
    assert len(cache) == len(rerun) == 3
    assert min(cache) >= 1 and max(rerun) < 1
    for gen in ("one_head", "4_heads", "tiny_model"):
        one = VALUES[f"kv_cache.{gen}.threads1.speed_up"]
        two = VALUES[f"kv_cache.{gen}.threads2.speed_up"]
        assert one > two, gen
    page = _page("12_kv_cache.md")
    assert "a second thread made no cached generation faster" in page
    for gen in ("one_head", "tiny_model"):  # the speed-ups it quotes, pasted from the run
        assert _pastes(page, f"kv_cache.{gen}.threads1.speed_up"), gen
        assert _pastes(page, f"kv_cache.{gen}.threads2.speed_up"), gen
