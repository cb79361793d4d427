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


def test_the_seven_methods_compute_the_same_function(monkeypatch):
    """Chapter 9: every timed method, nn.MultiheadAttention included, gives the same outputs."""
    import torch

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from bench_methods import METHODS, build

    B, T, d = 2, 32, 16
    x = torch.randn(B, T, d)
    with torch.no_grad():
        outs = {m: build(m, d, T, B)(x) for m in METHODS}
    assert len(METHODS) == 7
    for m, y in outs.items():
        torch.testing.assert_close(y, outs["explicit"], atol=1e-5, rtol=1e-4, msg=m)
    for name in PARTS:
        sys.modules.pop(name, None)


def test_each_benchmark_file_reads_in_one_sitting():
    for name in PARTS:
        lines = (ROOT / "benchmarks" / f"{name}.py").read_text().count("\n")
        assert lines <= 250, f"{name}.py has {lines} lines"
