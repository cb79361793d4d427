"""What chapters 9-11 say about the benchmark's run agrees with the run (benchmarks/results.md).

The chapters show the benchmark's figures and state a few facts read off the same run (a slope,
a range of ratios, a target met or not). Rerunning the benchmark rewrites results.md; if a fact
no longer holds, these tests fail, so the prose cannot silently go stale.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results.md"


def _table(title: str) -> list[dict[str, str]]:
    """The rows of the results table under the heading that starts with ``title``."""
    lines = RESULTS.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("### " + title))
    rows = [line for line in lines[start + 1:] if line.startswith("|")]
    rows = rows[:next((i for i, r in enumerate(rows[2:], 2) if not r.startswith("|")), None)]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    out = []
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header):
            break
        out.append(dict(zip(header, cells)))
    return out


def _first(cell: str) -> float:
    """The leading number of a cell such as ``0.642 (2.07×, ±10%)``."""
    return float(cell.split()[0])


def _ratio(cell: str) -> float:
    """The ratio in a cell such as ``0.642 (2.07×, ±10%)``."""
    return float(re.search(r"\(([\d.]+)×", cell).group(1))


def _page(name: str) -> str:
    return " ".join((ROOT / "book" / name).read_text(encoding="utf-8").split())


def _slopes(mode: str) -> list[tuple[int, float]]:
    """Local log-log slopes of the explicit module's time, (T at the upper end, slope)."""
    rows = [r for r in _table(f"Time, {mode} ") if r["d"] == "64"]
    Ts = [int(r["T"]) for r in rows]
    ms = [_first(r["explicit"]) for r in rows]
    return [(Ts[i], math.log(ms[i] / ms[i - 1]) / math.log(Ts[i] / Ts[i - 1]))
            for i in range(1, len(Ts))]


def test_chapter9_states_the_measured_slopes():
    """Fig. 9.1: 'local slope ... a to b up to T = 1024 ... c to d beyond'."""
    slopes = _slopes("fwd") + _slopes("fwd+bwd")
    short = [s for T, s in slopes if T <= 1024]
    long = [s for T, s in slopes if T > 1024]
    assert max(short) < 2 < min(long)  # below slope 2 while fixed costs weigh, above it beyond
    want = (f"{min(short):.1f} to {max(short):.1f} up to $T = 1024$ and "
            f"{min(long):.1f} to {max(long):.1f} beyond")
    assert want in _page("09_cost.md"), want


def test_chapter9_small_peak_memory_entries_are_noise():
    """§9.4: 'at T = 128 some of its forward+backward entries read 0.0 MiB'."""
    row = next(r for r in _table("Peak memory") if r["T"] == "128" and r["mode"] == "fwd+bwd")
    assert "0.0" in row.values()
    assert "some of its forward+backward entries read 0.0 MiB" in _page("09_cost.md")


def test_chapter11_fused_forward_ratios_are_all_above_one():
    """§11.9: every forward ratio of the fused path to SDPA is above 1, from a to b, and the
    benchmark's <= 1.1x target reads NO (or the page says it is met)."""
    ratios = [_ratio(r["fused"]) for r in _table("Time, fwd ") if r["d"] == "64"]
    target = next(r for r in _table("Targets") if r["target"].startswith("fused ≤ 1.1× sdpa"))
    page = _page("11_fused.md")
    assert min(ratios) > 1
    assert f"from {min(ratios):.2f} to {max(ratios):.2f}" in page
    assert target["met"] == "NO" and "reads `NO`" in page


def test_chapter10_does_not_claim_a_direction_for_the_benchmark_ratios():
    """§10.7 compares the lab's online/SDPA ratio with the benchmark's without saying which is
    smaller; the benchmark's range is stated from the run."""
    ratios = [_ratio(r["online"]) for r in _table("Time, fwd ") if r["d"] == "64"
              and int(r["T"]) >= 512]
    page = _page("10_online_softmax.md")
    assert "ratios are smaller than the lab's" not in page
    assert f"{min(ratios):.2f} to {max(ratios):.2f}" in page
    # 'on one thread each, the ratio is lower at every T'
    two = {r["T"]: _ratio(r["online"]) for r in _table("Time, fwd ") if r["d"] == "64"}
    for r in _table("One thread each"):
        assert float(r["online / sdpa"].rstrip("×")) < two[r["T"]], r["T"]
    assert "on one thread each, the ratio is lower at every $T$" in page


@pytest.mark.parametrize("title", ["Time, fwd ", "Time, fwd+bwd ", "Peak memory", "Targets"])
def test_the_parser_finds_every_table(title):
    assert len(_table(title)) >= 5


def test_chapter10_online_memory_facts():
    """§10 'Measured': the online peak stays within a few MiB of the fused kernel's; its slope
    between the two largest T is below 1; under plain autograd it grows with a slope close to 2."""
    fwd = [r for r in _table("Peak memory") if r["mode"] == "fwd"]
    assert all(abs(float(r["online"]) - float(r["fused"])) < 5 for r in fwd)
    (t1, a), (t2, b) = [(int(r["T"]), float(r["online"])) for r in fwd[-2:]]
    assert math.log(b / a) / math.log(t2 / t1) < 1
    bwd = [r for r in _table("Peak memory") if r["mode"] == "fwd+bwd"]
    (t1, a), (t2, b) = [(int(r["T"]), float(r["online_autograd"])) for r in bwd[-2:]]
    assert 1.5 < math.log(b / a) / math.log(t2 / t1) < 2.5
    page = _page("10_online_softmax.md")
    assert "slope between the two largest $T$ is therefore below 1" in page


def test_chapter12_second_thread_helps_recomputing_only():
    """§12 'Measured': 'a second thread made no cached generation faster ... while recomputing
    ... did get faster; so the cache's advantage is larger on one thread than on two'."""
    text = RESULTS.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("Time on 2 threads"))
    cache_part, rerun_part = line.split("; recomputing", 1)
    rerun_part = rerun_part.split(". ", 1)[0]
    cache = [float(x) for x in re.findall(r"([\d.]+)×", cache_part)]
    rerun = [float(x) for x in re.findall(r"([\d.]+)×", rerun_part)]
    assert len(cache) == len(rerun) == 3
    assert min(cache) >= 1 and max(rerun) < 1
    rows = _table("KV cache")
    for gen in {r["generator"] for r in rows}:
        one, two = (float(r["speed-up"].rstrip("×")) for t in ("1", "2")
                    for r in rows if r["generator"] == gen and r["threads"] == t)
        assert one > two, gen
    assert "a second thread made no cached generation faster" in _page("12_kv_cache.md")
