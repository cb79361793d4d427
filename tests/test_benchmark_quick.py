"""The benchmark script runs end to end in its quick configuration and writes its figures."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_quick(tmp_path, monkeypatch):
    # Imported by name so that the memory probes, run in fresh processes, can find it too.
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import attention_bench

    text = attention_bench.main(["--quick", "--figures", str(tmp_path)])
    for heading in ["Matmul throughput", "Time, fwd", "Time, fwd+bwd", "Peak memory",
                    "KV cache", "Targets"]:
        assert heading in text
    assert {p.name for p in tmp_path.glob("*.png")} >= {"cost_time.png", "cost_memory.png",
                                                        "fused_ratios.png", "kv_step_time.png"}
    sys.modules.pop("attention_bench", None)
