"""`make nbval-other-cpu` really runs the labs on other code paths than `make nbval`.

The Makefile's OTHER_CPU variables must keep changing results on the machine that runs the
tests; if a PyTorch, MKL or NumPy update made one of them a no-op, the second nbval run would
silently check nothing new. Each variable is tried alone against the same inputs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Fixed inputs (made in float64 by NumPy's generator, which no variable below changes), then the
# kernels each variable selects: ATen's elementwise and reduction kernels, MKL's sgemm (torch's
# matmul) and OpenBLAS's sgemm (NumPy's, which Triton's interpreter uses for tl.dot).
_PROBE = """
import hashlib, json, numpy as np, torch
rng = np.random.default_rng(0)
a = rng.standard_normal((257, 300)).astype(np.float32)
b = rng.standard_normal((300, 129)).astype(np.float32)
x = torch.from_numpy(rng.standard_normal((64, 1000)).astype(np.float32))
h = lambda arr: hashlib.md5(np.ascontiguousarray(arr).tobytes()).hexdigest()
print(json.dumps({
    "capability": torch.backends.cpu.get_cpu_capability(),
    "num_threads": torch.get_num_threads(),
    "aten": h(torch.softmax(x, -1).numpy())
            + h(torch.randn(4096, generator=torch.Generator().manual_seed(0)).numpy()),
    "mkl": h((torch.from_numpy(a) @ torch.from_numpy(b)).numpy()),
    "openblas": h(a @ b),
    "threads": repr(torch.from_numpy(rng.standard_normal((4, 10**6 + 3)).astype(np.float32))
                    .sum().item()),
}))
"""


def _other_cpu() -> dict[str, str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    line = re.search(r"^OTHER_CPU\s*:=\s*((?:.*\\\n)*.*)$", text, re.M).group(1)
    return dict(item.split("=", 1) for item in line.replace("\\\n", " ").split())


def _probe(extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _other_cpu()}
    env.update(extra)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def test_other_cpu_names_the_three_libraries():
    assert set(_other_cpu()) == {"ATEN_CPU_CAPABILITY", "MKL_CBWR", "OPENBLAS_CORETYPE",
                                 "OMP_NUM_THREADS"}


@pytest.mark.parametrize("variable, changes", [
    ("ATEN_CPU_CAPABILITY", "aten"), ("MKL_CBWR", "mkl"), ("OPENBLAS_CORETYPE", "openblas"),
    ("OMP_NUM_THREADS", "threads")])
def test_each_variable_changes_results_here(variable, changes):
    native = _probe({})
    value = _other_cpu()[variable]
    if variable == "ATEN_CPU_CAPABILITY" and native["capability"] == "DEFAULT":
        pytest.skip("this CPU already runs ATen's portable kernels")
    if variable == "OMP_NUM_THREADS" and native["num_threads"] == 1:
        pytest.skip("this machine already runs one thread")
    other = _probe({variable: value})
    assert other[changes] != native[changes], (
        f"{variable}={value} no longer changes {changes}'s results on this machine: "
        "make nbval-other-cpu would repeat make nbval there")
    if variable == "ATEN_CPU_CAPABILITY":
        assert other["capability"] == "DEFAULT"
