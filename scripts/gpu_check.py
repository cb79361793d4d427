"""Everything a CUDA GPU can check that the CPU cannot, in one command, with a report.

Usage: ``python scripts/gpu_check.py [--out DIR]`` (``make gpu-check``), on any machine with a
CUDA GPU, a Colab runtime included. It writes ``DIR/report.md`` (default ``_build/gpu_check``)
with:

1. the GPU, its compute capability and the library's launch configurations for it;
2. every lab executed on the GPU (nbval in lax mode: every cell must run; outputs that depend
   on the device, such as "compiled Triton, on the GPU", are not compared with the stored CPU
   outputs);
3. the compiled kernels against a float64 reference and SDPA (tests/test_triton_gpu.py:
   float16, bfloat16, float32 at each precision, grouped heads, T_q != T_k, Flash-Decoding);
4. the kernels against SDPA, timed with attnbook.gpu.timing.benchmark (CUDA events, warm-up,
   one synchronisation, median and quartiles).

Without a GPU it says so and exits with status 2, writing nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str], env: dict | None = None) -> tuple[int, str]:
    """Run a command in the repository; return its status and the tail of its output."""
    out = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True,
                         text=True)
    return out.returncode, (out.stdout + out.stderr)[-4000:]


def benchmark_table() -> str:
    """flash_attention and flash_decoding against SDPA, float16, on this GPU."""
    import torch
    import torch.nn.functional as F

    from attnbook.gpu import flash_attention, flash_decoding
    from attnbook.gpu.timing import benchmark

    dev = torch.device("cuda")
    lines = ["| case | Triton kernel | SDPA | kernel / SDPA |", "|---|---|---|---|"]

    def row(label, ours_fn, sdpa_fn, extra=""):
        ours, sdpa = benchmark(ours_fn, dev), benchmark(sdpa_fn, dev)
        lines.append(f"| {label}{extra} | {ours} | {sdpa} | "
                     f"{ours.median_ms / sdpa.median_ms:.2f} |")
        return ours

    for B, h, T, d in [(4, 16, 1024, 64), (4, 16, 4096, 64), (1, 16, 8192, 128)]:
        q, k, v = (torch.randn(B, h, T, d, device=dev, dtype=torch.float16, requires_grad=True)
                   for _ in range(3))
        case = f"B={B} h={h} T={T} d={d}"
        row(f"forward, causal, {case}", lambda q=q, k=k, v=v: flash_attention(q, k, v),
            lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        out = flash_attention(q, k, v)
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(out)
        row(f"backward, causal, {case}",
            lambda out=out, g=g: out.backward(g, retain_graph=True),
            lambda ref=ref, g=g: ref.backward(g, retain_graph=True))
    for h_kv in (16, 2):
        q = torch.randn(1, 16, 1, 128, device=dev, dtype=torch.float16)
        k, v = (torch.randn(1, h_kv, 32768, 128, device=dev, dtype=torch.float16)
                for _ in range(2))
        ours = row(f"decoding, h=16 h_kv={h_kv} T=32768 d=128, n_split=16",
                   lambda q=q, k=k, v=v: flash_decoding(q, k, v, n_split=16),
                   lambda q=q, k=k, v=v, gqa=h_kv != 16: F.scaled_dot_product_attention(
                       q, k, v, enable_gqa=gqa))
        gbs = 2 * k.numel() * 2 / (ours.median_ms / 1e3) / 1e9
        lines[-1] = lines[-1].replace("n_split=16 |", f"n_split=16 ({gbs:.0f} GB/s) |", 1)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "_build" / "gpu_check"))
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu-check needs a CUDA GPU; none is visible here (torch.cuda.is_available() is "
              "False). On Colab: Runtime -> Change runtime type -> GPU.")
        return 2
    import triton

    from attnbook.gpu.configs import (
        backward_config,
        decoding_config,
        default_precision,
        device_arch,
        forward_config,
    )

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    arch = device_arch(dev)
    report = [
        "# GPU check",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {torch.cuda.get_device_name()}, "
        f"compute capability {torch.cuda.get_device_capability()}, table row sm{arch}; "
        f"torch {torch.__version__}, Triton {triton.__version__}, Python "
        f"{platform.python_version()}.",
        "",
        "## Launch configurations for this GPU",
        "",
    ]
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for d in (64, 128):
            report.append(f"- {dtype}, d={d}: forward {forward_config(arch, dtype, d)}, "
                          f"backward {backward_config(arch, dtype, d)}, decoding "
                          f"{decoding_config(arch, dtype, d)}, precision "
                          f"{default_precision(arch, dtype)}")
    status = 0
    py = sys.executable
    steps = [
        ("Compiled kernels against float64 and SDPA",
         [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_triton_gpu.py"]),
        ("Compile check (sm75, sm80, sm90)",
         [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_triton_compile.py"]),
        ("Every lab on the GPU (nbval, lax: every cell runs)",
         [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax", "notebooks",
          "--nbval-cell-timeout", "900"]),
    ]
    for title, cmd in steps:
        start = time.perf_counter()
        code, tail = run(cmd, env={"TRITON_INTERPRET": "0"})
        status |= code != 0
        report += ["", f"## {title}: {'passed' if code == 0 else 'FAILED'} "
                   f"({time.perf_counter() - start:.0f} s)", "", "```text", tail.strip()[-2500:],
                   "```"]
        print(f"{title}: {'passed' if code == 0 else 'FAILED'}", flush=True)
    report += ["", "## Kernels against SDPA (float16; ms per call, median and quartiles)", "",
               benchmark_table()]
    path = out_dir / "report.md"
    path.write_text("\n".join(report) + "\n", encoding="utf-8")
    print(f"report: {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
