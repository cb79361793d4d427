"""scripts/gpu_check.py (``make gpu-check``): without a GPU it says so and writes nothing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: make gpu-check runs")
def test_without_a_gpu_it_says_so_and_writes_nothing(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "report")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "needs a CUDA GPU" in out.stdout
    assert not (tmp_path / "report").exists()


def test_it_runs_the_gpu_tests_the_compile_check_and_every_lab():
    source = SCRIPT.read_text(encoding="utf-8")
    ast.parse(source)
    for needed in ("tests/test_triton_gpu.py", "tests/test_triton_compile.py", "--nbval-lax",
                   '"notebooks"', "benchmark(", "report.md"):
        assert needed in source, needed
    assert "gpu-check:" in (ROOT / "Makefile").read_text(encoding="utf-8")
