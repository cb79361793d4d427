"""The benchmark scripts run end to end in their quick configuration and write their figures."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ["attention_bench", "bench_methods", "bench_timing", "bench_memory", "bench_kv",
         "bench_report", "bench_figures"]


def test_benchmark_quick(tmp_path, monkeypatch):
    # Imported by name so that the memory probes, run in fresh processes, can find them too.
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import attention_bench

    text = attention_bench.main(["--quick", "--figures", str(tmp_path)])
    for heading in ["Matmul throughput", "Time, fwd", "Time, fwd+bwd", "Padded rows, fwd",
                    "Padded rows, fwd+bwd", "One thread each", "Peak memory", "KV cache",
                    "Targets", "sdpa_3d", "mha_causal", "fused_general", "±"]:
        assert heading in text, heading
    assert {p.name for p in tmp_path.glob("*.png")} >= {
        "cost_time.png", "cost_memory.png", "fused_ratios.png", "fused_padding.png",
        "kv_step_time.png", "kv_generation.png"}
    for name in PARTS:
        sys.modules.pop(name, None)


def test_each_benchmark_file_reads_in_one_sitting():
    for name in PARTS:
        lines = (ROOT / "benchmarks" / f"{name}.py").read_text().count("\n")
        assert lines <= 250, f"{name}.py has {lines} lines"
