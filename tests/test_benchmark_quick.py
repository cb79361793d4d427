"""The benchmark script runs end to end in its quick configuration and writes its figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_quick(tmp_path):
    spec = importlib.util.spec_from_file_location("attention_bench",
                                                  ROOT / "benchmarks" / "attention_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    text = bench.main(["--quick", "--figures", str(tmp_path)])
    for heading in ["Matmul throughput", "Time, fwd", "Time, fwd+bwd", "Peak memory",
                    "KV cache", "Targets"]:
        assert heading in text
    assert {p.name for p in tmp_path.glob("*.png")} >= {"cost_time.png", "cost_memory.png",
                                                        "fused_ratios.png", "kv_step_time.png"}
