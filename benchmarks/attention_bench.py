"""Time and memory of causal self-attention, many ways, with padding, and of KV-cache generation.

One run measures, on this machine, and prints Markdown tables (times with their spread, ratios,
memory, targets met or not), then writes the figures the book shows. The parts, one file each:

* ``bench_methods.py``: what is compared (explicit, fused, online, nn.MultiheadAttention with and
  without is_causal, raw 4-D and 3-D SDPA, padded rows: left, right, mixed, the general route);
* ``bench_timing.py``: interleaved repeats per point (the labs' protocol, ``attnbook.lab.measure``),
  the matmul ceiling, FLOP counts;
* ``bench_memory.py``: peak memory, each configuration in a fresh process;
* ``bench_kv.py``: generation with and without the KV cache, 1 and 2 threads, interleaved;
* ``bench_report.py``: the tables and the targets; ``bench_figures.py``: the figures;
  ``bench_results.py``: ``--save`` writes the Markdown and the JSON of its values (the book
  pastes numbers from the JSON with its ``{bench}`` role).

Usage:

    python benchmarks/attention_bench.py --save benchmarks/results.md   # full run, figures too
    python benchmarks/attention_bench.py --quick --figures /tmp/figs    # seconds, a smoke test
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from bench_figures import figures  # noqa: E402
from bench_kv import kv_benchmark  # noqa: E402
from bench_memory import measure_memory  # noqa: E402
from bench_methods import METHODS, MODES, PADDED, SINGLE_THREAD  # noqa: E402
from bench_report import report  # noqa: E402
from bench_results import add_load_argument, check_load, write_results  # noqa: E402
from bench_timing import matmul_gflops, time_point  # noqa: E402

from attnbook.lab.measure import conditions, keep_freed_memory  # noqa: E402


@dataclass
class Config:
    """What one run measures."""

    B: int = 4
    widths: tuple[int, ...] = (64,)
    lengths: tuple[int, ...] = (128, 512, 1024, 2048, 4096)
    repeats: int = 7  # timed runs per point (fewer for slow points, see time_point)
    budget_s: float = 2.0  # stop repeating a point after about this long (at least 3 runs)
    kv_tokens: int = 256
    kv_prompt: int = 16
    kv_width: int = 64
    kv_repeats: int = 5
    matmul_n: int = 2048
    memory_methods: tuple[str, ...] = ("explicit", "fused", "online", "mha", "sdpa",
                                       "online_autograd", "fused_left", "fused_right",
                                       "fused_mixed", "fused_general", "online_mixed")
    figures: Path | None = field(default_factory=lambda: ROOT / "book" / "figures")


QUICK = dict(B=3, widths=(16,), lengths=(32, 64), repeats=1, budget_s=0.1, kv_tokens=8,
             kv_prompt=4, kv_width=16, kv_repeats=1, matmul_n=128,
             memory_methods=("online", "sdpa", "fused", "fused_mixed"))


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            names = [ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), Python {platform.python_version()}, "
            f"{platform.system()}")


def run(cfg: Config) -> str:
    start = time.perf_counter()
    kept = keep_freed_memory()  # the labs' allocator setting: freed buffers are reused
    load = {"start": conditions()}
    gflops = matmul_gflops(cfg.matmul_n)
    times = {}
    for d in cfg.widths:
        for T in cfg.lengths:
            for mode in MODES:
                methods = METHODS + PADDED + (SINGLE_THREAD if mode == "fwd" else [])
                times[(d, T, mode)] = time_point(cfg.B, d, T, mode, methods, cfg.repeats,
                                                 cfg.budget_s)
                print(f"  timed d={d} T={T} {mode}", file=sys.stderr, flush=True)
    jobs = [(m, d, T, ("fwd+bwd",) if m == "online_autograd" else tuple(MODES))
            for d in cfg.widths for T in cfg.lengths for m in cfg.memory_methods]
    print(f"  timing done after {time.perf_counter() - start:.0f} s", file=sys.stderr)
    load["after the timing"] = conditions()
    memory = measure_memory(cfg.B, jobs)
    print(f"  memory done after {time.perf_counter() - start:.0f} s", file=sys.stderr)
    kv = kv_benchmark(cfg.B, cfg.kv_width, cfg.kv_prompt, cfg.kv_tokens, cfg.kv_repeats)
    print(f"  KV cache done after {time.perf_counter() - start:.0f} s", file=sys.stderr)
    gflops = max(gflops, matmul_gflops(cfg.matmul_n))  # again at the end: the better of two
    load["end"] = conditions()
    machine = machine_description() + (
        "\n\nConditions (the one record of them; the book cites it): "
        + "; ".join(f"{when}: {what}" for when, what in load.items())
        + ". A load average near or above the core count means other programs were running "
        "during the run: read single times with care, and the ratios (every repeat interleaves "
        "the methods it compares) with less. Timing protocol: `attnbook.lab.measure.compare`, two "
        "warm-up rounds, then interleaved repeats, medians; the C allocator "
        + ("keeps freed buffers for reuse (`keep_freed_memory`)" if kept else
           "with its default settings (no glibc here)") + ".")
    text, _ = report(cfg, times, memory, gflops, kv, machine)
    text += f"\n\nWhole run: {time.perf_counter() - start:.0f} s.\n"
    if cfg.figures is not None:
        for path in figures(cfg, times, memory, kv, cfg.figures):
            print(f"  wrote {path}", file=sys.stderr)
    return text


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny configuration (seconds)")
    parser.add_argument("--figures", type=Path, default=None,
                        help="folder for the figures (default: book/figures; 'none' to skip)")
    parser.add_argument("--save", type=Path, default=None,
                        help="also write the tables to this Markdown file, with date and "
                        "command, and their values to the .json next to it")
    add_load_argument(parser)
    args = parser.parse_args(argv)
    # The load rule ("How we measure"): a run that saves starts on a machine no busier
    # than its cores.
    load = check_load(args.allow_loaded) if args.save is not None else None
    cfg = Config(**QUICK) if args.quick else Config()
    if args.figures is not None:
        cfg.figures = None if str(args.figures) == "none" else args.figures
    elif args.quick:
        cfg.figures = None  # never overwrite the book's figures with a smoke test
    text = run(cfg)
    print(text)
    if args.save is not None:
        command = "python benchmarks/attention_bench.py" + "".join(
            f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
        # The Markdown and, next to it, the JSON the book's {bench} role pastes from.
        write_results(args.save, text, "Attention benchmark: results", command, kind="results",
                      load=load)
    return text


if __name__ == "__main__":
    main()
