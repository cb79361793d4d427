"""Time and memory of causal self-attention, five ways, and of generating with a KV cache.

One run measures, on this machine:

* time (median of repeated runs after a warm-up), forward and forward+backward, of
  ``explicit`` (attnbook.Attention, step by step), ``fused`` (attnbook.Attention(fused=True)),
  ``online`` (attnbook.online.tiled_attention with its recomputing backward), ``mha``
  (nn.MultiheadAttention, one head, bool causal mask) and ``sdpa`` (the same projections, then
  F.scaled_dot_product_attention on (B, 1, T, d) with is_causal=True: the best raw call);
* peak memory of each, forward and forward+backward, every configuration in a fresh process
  (so nothing earlier inflates it), as the rise of the resident set size above the inputs;
* the machine's float32 matmul throughput (a large square matmul): the ceiling for the FLOPs;
* generating 512 tokens with a KV cache against recomputing every step with SDPA.

It prints Markdown tables (times, ratios, memory, targets met or not) and writes the figures
the book shows. Usage:

    python benchmarks/attention_bench.py                 # full run, figures into book/figures
    python benchmarks/attention_bench.py --quick --figures /tmp/figs   # seconds, a smoke test
"""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Fixed (not adaptive) malloc threshold: freed blocks go back to the OS at once, so the
# resident set size of the memory probes rises and falls with the tensors alive.
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from attnbook import Attention  # noqa: E402
from attnbook.kv_cache import generate  # noqa: E402
from attnbook.online import tiled_attention  # noqa: E402

METHODS = ["explicit", "fused", "online", "mha", "sdpa"]
# Diagnostic, forward only: the online method and SDPA with one thread each. The online method
# runs ~10 operations per tile, each a parallel region; on a busy machine every region can wait
# a whole scheduler time slice for its second thread, which one fused call pays only once.
SINGLE_THREAD = ["online_1t", "sdpa_1t"]
MODES = ["fwd", "fwd+bwd"]
MiB = 2**20


@dataclass
class Config:
    """What one run measures."""

    B: int = 4
    widths: tuple[int, ...] = (64, 256)
    lengths: tuple[int, ...] = (128, 512, 1024, 2048, 4096)
    repeats: int = 9  # timed runs per point (fewer for slow points, see time_point)
    budget_s: float = 2.5  # stop repeating a point after about this long (at least 3 runs)
    kv_tokens: int = 512
    kv_prompt: int = 16
    kv_width: int = 64
    matmul_n: int = 2048
    memory_methods: tuple[str, ...] = (*METHODS, "online_autograd")
    figures: Path | None = field(default_factory=lambda: ROOT / "book" / "figures")


QUICK = dict(B=2, widths=(16,), lengths=(32, 64), repeats=1, budget_s=0.1, kv_tokens=16,
             kv_prompt=4, kv_width=16, matmul_n=128, memory_methods=("online", "sdpa"))


def build(method: str, d: int, T: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The method as a function x -> y, all with the same seeded projection weights."""
    if method.endswith("_1t"):
        inner = build(method[:-3], d, T)

        def one_thread(x):
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                return inner(x)
            finally:
                torch.set_num_threads(threads)
        one_thread.module = parameters_module(inner)
        return one_thread
    torch.manual_seed(0)
    ref = Attention(d, T)
    if method == "explicit":
        return ref
    if method == "fused":
        ref.fused = True
        return ref
    if method in ("online", "online_autograd"):
        recompute = method == "online"
        return lambda x: tiled_attention(ref.query(x), ref.key(x), ref.value(x),
                                         recompute=recompute)
    if method == "sdpa":
        def sdpa(x):
            q, k, v = ref.query(x)[:, None], ref.key(x)[:, None], ref.value(x)[:, None]
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)[:, 0]
        sdpa.module = ref
        return sdpa
    if method == "mha":
        mha = nn.MultiheadAttention(d, num_heads=1, bias=False, batch_first=True)
        with torch.no_grad():  # the same W_q, W_k, W_v, stacked; MHA adds an output projection
            mha.in_proj_weight.copy_(torch.cat([ref.query.weight, ref.key.weight,
                                                ref.value.weight]))
        blocked = ref.mask[:T, :T]  # MHA's bool attn_mask: True = blocked, like ours

        def run_mha(x):
            return mha(x, x, x, attn_mask=blocked, need_weights=False)[0]
        run_mha.module = mha
        return run_mha
    raise ValueError(f"unknown method {method!r}")


def parameters_module(f) -> nn.Module:
    """The module holding a method's parameters."""
    module = f if isinstance(f, nn.Module) else getattr(f, "module", None)
    if module is None:  # the online lambdas close over an Attention
        module = next(c.cell_contents for c in f.__closure__
                      if isinstance(c.cell_contents, nn.Module))
    return module


def parameters(f) -> list[torch.Tensor]:
    return list(parameters_module(f).parameters())


def step(f, x: torch.Tensor, mode: str, grad: torch.Tensor | None = None):
    """One forward (no autograd) or one forward+backward."""
    if mode == "fwd":
        with torch.no_grad():
            return f(x)
    for p in [x, *parameters(f)]:
        p.grad = None
    y = f(x)
    y.backward(grad)
    return None


def inputs(B: int, T: int, d: int, mode: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    x = torch.randn(B, T, d, requires_grad=(mode != "fwd"))
    return x, (torch.randn(B, T, d) if mode != "fwd" else None)


def time_point(cfg: Config, d: int, T: int, mode: str, methods: list[str]) -> dict[str, float]:
    """Median seconds per call of each method; repeats interleave the methods so that a change
    in the machine's load affects all of them alike."""
    x, g = inputs(cfg.B, T, d, mode)
    fns = {m: build(m, d, T) for m in methods}
    for f in fns.values():
        f.train(mode != "fwd") if isinstance(f, nn.Module) else None
        step(f, x, mode, g)  # warm-up: kernels chosen, buffers touched
    times: dict[str, list[float]] = {m: [] for m in methods}
    start = time.perf_counter()
    for r in range(cfg.repeats):
        for m, f in fns.items():
            t0 = time.perf_counter()
            step(f, x, mode, g)
            times[m].append(time.perf_counter() - t0)
        if r >= 2 and time.perf_counter() - start > cfg.budget_s:
            break  # slow points: three interleaved repeats are enough for a median
    return {m: statistics.median(ts) for m, ts in times.items()}


def matmul_gflops(n: int, repeats: int = 5) -> float:
    """Float32 throughput of an (n, n) @ (n, n) matmul, 2n³ FLOPs, median of ``repeats``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(ts) / 1e9


def attention_flops(B: int, T: int, d: int, mode: str) -> float:
    """Useful FLOPs: causal attention counts 2·B·T²·d per matmul pair (half of 2 · 2·B·T²·d),
    plus the three projections, 3 · 2·B·T·d². A backward does twice the forward's matmuls."""
    fwd = 2 * B * T * T * d + 6 * B * T * d * d
    return fwd if mode == "fwd" else 3 * fwd


# ---- memory, each configuration in a fresh process ------------------------------------------

def _status(field_name: str) -> int:
    """A field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field_name)


def _peak_above_baseline(run: Callable[[], object]) -> float:
    """Peak rise of the resident set during ``run()``, in MiB (Linux: reset the high-water mark)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # "5": reset VmHWM to the current resident set size
    base = _status("VmRSS")
    out = run()
    peak = _status("VmHWM")
    del out
    return (peak - base) / MiB


def memory_probe(args: tuple[str, int, int, int, tuple[str, ...]]) -> dict[str, float]:
    """In a fresh process: peak memory of one method at one (B, T, d), for each mode."""
    method, B, T, d, modes = args
    torch.set_num_threads(max(1, torch.get_num_threads()))
    result = {}
    for mode in modes:
        for size in (min(T, 64), T):  # warm up on a small input, then measure the real one
            x, g = inputs(B, size, d, mode)
            f = build(method, d, size)
            if isinstance(f, nn.Module):
                f.train(mode != "fwd")
            if size != T:
                step(f, x, mode, g)
                continue
            result[mode] = _peak_above_baseline(lambda f=f, x=x, g=g, mode=mode:
                                                step(f, x, mode, g))
        del x, g, f
    return result


def measure_memory(cfg: Config, jobs: list[tuple[str, int, int, tuple[str, ...]]]):
    """Run every memory probe in its own process (forked from a server that only imported
    torch, so each starts clean and fast). Returns {(method, d, T): {mode: MiB}}."""
    if not Path("/proc/self/clear_refs").exists():
        print("note: no /proc/self/clear_refs (not Linux); memory is not measured")
        return {}
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "attnbook", "attnbook.online"])
    args = [(m, cfg.B, T, d, modes) for m, d, T, modes in jobs]
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx, max_tasks_per_child=1) as pool:
        results = list(pool.map(memory_probe, args))
    return {(m, d, T): r for (m, d, T, _), r in zip(jobs, results)}


# ---- KV cache ---------------------------------------------------------------------------------

def kv_benchmark(cfg: Config) -> dict:
    """Generate cfg.kv_tokens tokens with the cache and by recomputing with SDPA every step."""
    torch.manual_seed(0)
    d, context = cfg.kv_width, cfg.kv_prompt + cfg.kv_tokens + 1
    attn = Attention(d, context, fused=True).eval()  # recomputing uses the fused SDPA path
    prompt = torch.randn(cfg.B, cfg.kv_prompt, d)
    generate(attn, prompt, 4)  # warm-up
    generate(attn, prompt, 4, use_cache=False)
    t0 = time.perf_counter()
    cached = generate(attn, prompt, cfg.kv_tokens)
    t_cache = time.perf_counter() - t0
    t0 = time.perf_counter()
    recomputed = generate(attn, prompt, cfg.kv_tokens, use_cache=False)
    t_recompute = time.perf_counter() - t0
    # Time of one step at a few lengths, for the figure (median of 5).
    from attnbook.kv_cache import KVCache, cached_attention

    lengths = sorted({max(1, cfg.kv_tokens * f // 8) for f in range(1, 9)})
    per_step = {"length": lengths, "cache": [], "recompute": []}
    with torch.no_grad():
        for L in lengths:
            x = torch.randn(cfg.B, L + 1, d)
            cache = KVCache.for_module(attn, cfg.B)
            cached_attention(attn, x[:, :L], cache)
            ts_c, ts_r = [], []
            for _ in range(5):
                cache.length = L
                t0 = time.perf_counter()
                cached_attention(attn, x[:, L:], cache)
                ts_c.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                attn(x)
                ts_r.append(time.perf_counter() - t0)
            per_step["cache"].append(statistics.median(ts_c))
            per_step["recompute"].append(statistics.median(ts_r))
    err = (cached - recomputed).abs().max().item()
    return dict(t_cache=t_cache, t_recompute=t_recompute, max_diff=err, per_step=per_step,
                d=d, tokens=cfg.kv_tokens, prompt=cfg.kv_prompt)


# ---- the report --------------------------------------------------------------------------------

def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3g}" if s < 1 else f"{s * 1e3:.0f}"


def report(cfg, times, memory, gflops, kv, machine) -> tuple[str, dict]:
    """The Markdown tables and the verdict on each target."""
    lines = [f"Machine: {machine}", "",
             f"Matmul throughput (float32, {cfg.matmul_n}² @ {cfg.matmul_n}²): "
             f"{gflops:.1f} GFLOP/s", ""]
    for mode in MODES:
        lines += [f"### Time, {mode} (ms, median; ratio to sdpa in brackets), B={cfg.B}", "",
                  "| d | T | " + " | ".join(METHODS) + " | fused GFLOP/s (% of matmul) |",
                  "|---|---|" + "---|" * (len(METHODS) + 1)]
        for d in cfg.widths:
            for T in cfg.lengths:
                t = times[(d, T, mode)]
                cells = [f"{fmt_ms(t[m])} ({t[m] / t['sdpa']:.2f}×)" for m in METHODS]
                rate = attention_flops(cfg.B, T, d, mode) / t["fused"] / 1e9
                lines.append(f"| {d} | {T} | " + " | ".join(cells)
                             + f" | {rate:.1f} ({100 * rate / gflops:.0f}%) |")
        lines.append("")
    lines += ["### Single-thread check, fwd (ms; online / sdpa with one thread each)", "",
              "| d | T | online, 1 thread | sdpa, 1 thread | ratio |", "|---|---|---|---|---|"]
    for d in cfg.widths:
        for T in cfg.lengths:
            t = times[(d, T, "fwd")]
            lines.append(f"| {d} | {T} | {fmt_ms(t['online_1t'])} | {fmt_ms(t['sdpa_1t'])} | "
                         f"{t['online_1t'] / t['sdpa_1t']:.2f}× |")
    lines.append("")
    if memory:
        lines += ["### Peak memory above the inputs (MiB), each in a fresh process", "",
                  "| d | T | mode | " + " | ".join(METHODS + ["online_autograd"]) + " |",
                  "|---|---|---|" + "---|" * (len(METHODS) + 1)]
        for d in cfg.widths:
            for T in cfg.lengths:
                for mode in MODES:
                    row = [memory.get((m, d, T), {}).get(mode) for m in METHODS
                           + ["online_autograd"]]
                    lines.append(f"| {d} | {T} | {mode} | "
                                 + " | ".join("–" if v is None else f"{v:.1f}" for v in row)
                                 + " |")
        lines.append("")
    lines += [f"### KV cache: {kv['tokens']} tokens after a {kv['prompt']}-token prompt, "
              f"B={cfg.B}, d={kv['d']}", "",
              "| with cache | recomputing with SDPA | speed-up | max difference |",
              "|---|---|---|---|",
              f"| {kv['t_cache']:.3f} s | {kv['t_recompute']:.3f} s | "
              f"{kv['t_recompute'] / kv['t_cache']:.1f}× | {kv['max_diff']:.1e} |", ""]
    verdicts = targets(cfg, times, memory, gflops, kv)
    lines += ["### Targets", "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {measured} | {'yes' if ok else 'NO'} |"
              for name, measured, ok in verdicts]
    return "\n".join(lines), verdicts


def targets(cfg, times, memory, gflops, kv):
    big = [T for T in cfg.lengths if T >= 512] or list(cfg.lengths)
    T_max = max(cfg.lengths)
    keys = [(d, T, mode) for d in cfg.widths for T in big for mode in MODES]
    out = []
    worst = max(keys, key=lambda k: times[k]["fused"] / times[k]["sdpa"])
    r = times[worst]["fused"] / times[worst]["sdpa"]
    out.append(("fused ≤ 1.1× sdpa, every T ≥ 512, fwd and fwd+bwd",
                f"worst {r:.2f}× (d={worst[0]}, T={worst[1]}, {worst[2]})", r <= 1.1))
    worst = max(keys, key=lambda k: times[k]["fused"] / times[k]["mha"])
    r = times[worst]["fused"] / times[worst]["mha"]
    out.append(("fused faster than nn.MultiheadAttention, every T ≥ 512",
                f"worst fused/mha {r:.2f}× (d={worst[0]}, T={worst[1]}, {worst[2]})", r < 1))
    for mode in MODES:
        rates = {d: attention_flops(cfg.B, T_max, d, mode) / times[(d, T_max, mode)]["fused"]
                 / 1e9 for d in cfg.widths}
        best = max(rates.values())
        text = ", ".join(f"d={d}: {100 * v / gflops:.0f}%" for d, v in rates.items())
        out.append((f"fused ≥ 75% of matmul throughput at T={T_max}, {mode}", text,
                    best >= 0.75 * gflops and min(rates.values()) >= 0.75 * gflops))
    if memory:
        ratios = {d: memory[("online", d, T_max)]["fwd"]
                  / max(memory[("sdpa", d, T_max)]["fwd"], 1e-3) for d in cfg.widths}
        out.append((f"online fwd peak memory ≤ 1.5× sdpa at T={T_max}",
                    ", ".join(f"d={d}: {r:.2f}×" for d, r in ratios.items()),
                    max(ratios.values()) <= 1.5))
        for d in cfg.widths:
            slope = growth_exponent(cfg.lengths, [memory[("online", d, T)]["fwd"]
                                                  for T in cfg.lengths])
            text = f"exponent {slope:.2f}"
            if ("explicit", d, T_max) in memory:
                text += " (explicit: {:.2f})".format(growth_exponent(
                    cfg.lengths, [memory[("explicit", d, T)]["fwd"] for T in cfg.lengths]))
            out.append((f"online memory grows ~linearly in T (d={d})", text, slope <= 1.25))
    worst = max(((d, T) for d in cfg.widths for T in big),
                key=lambda k: times[(*k, "fwd")]["online"] / times[(*k, "fwd")]["sdpa"])
    r = times[(*worst, "fwd")]["online"] / times[(*worst, "fwd")]["sdpa"]
    r1 = max(times[(d, T, "fwd")]["online_1t"] / times[(d, T, "fwd")]["sdpa_1t"]
             for d in cfg.widths for T in big)
    out.append(("online fwd time ≤ 2× sdpa, every T ≥ 512",
                f"worst {r:.2f}× (d={worst[0]}, T={worst[1]}); one thread each: worst {r1:.2f}×",
                r <= 2))
    speed = kv["t_recompute"] / kv["t_cache"]
    out.append((f"KV cache ≥ 5× faster than recomputing, {kv['tokens']} tokens",
                f"{speed:.1f}×", speed >= 5))
    return out


def growth_exponent(lengths, values) -> float:
    """Slope of log(value) against log(T) between the two largest T (1 = linear, 2 = quadratic)."""
    (t1, v1), (t2, v2) = sorted(zip(lengths, values))[-2:]
    return math.log(max(v2, 1e-9) / max(v1, 1e-9)) / math.log(t2 / t1)


# ---- figures -----------------------------------------------------------------------------------

COLOURS = {"explicit": "tab:red", "fused": "tab:blue", "online": "tab:green", "mha": "tab:purple",
           "sdpa": "black", "online_autograd": "tab:olive"}
LABELS = {"explicit": "explicit (attnbook.Attention)", "fused": "fused (Attention(fused=True))",
          "online": "online / tiled (custom backward)", "mha": "nn.MultiheadAttention",
          "sdpa": "raw SDPA", "online_autograd": "online, plain autograd"}


def figures(cfg, times, memory, kv, gflops, outdir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    d0 = cfg.widths[0]
    Ts = list(cfg.lengths)

    def save(fig, name):
        path = outdir / name
        fig.savefig(path, dpi=130, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

    def guide(ax, ys, power, label):  # a dotted reference slope through the last point
        ax.plot(Ts, [ys[-1] * (T / Ts[-1]) ** power for T in Ts], ":", color="grey", lw=1)
        ax.annotate(label, (Ts[-1], ys[-1]), fontsize=8, color="grey", ha="left", va="top")

    # 1. time against T, every method
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, MODES):
        for m in METHODS:
            ys = [times[(d0, T, mode)][m] * 1e3 for T in Ts]
            ax.loglog(Ts, ys, "o-", color=COLOURS[m], label=LABELS[m], ms=4)
        guide(ax, [times[(d0, T, mode)]["explicit"] * 1e3 for T in Ts], 2, "∝ T²")
        ax.set_xlabel("sequence length T")
        ax.set_title(f"{mode}, B={cfg.B}, d={d0}, float32")
        ax.set_xticks(Ts, [str(T) for T in Ts])
        ax.minorticks_off()
    axes[0].set_ylabel("time per call (ms)")
    axes[0].legend(fontsize=8)
    save(fig, "cost_time.png")

    # 2. peak memory against T
    if memory:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, mode in zip(axes, MODES):
            for m in METHODS + (["online_autograd"] if mode != "fwd" else []):
                ys = [memory.get((m, d0, T), {}).get(mode) for T in Ts]
                if None in ys:
                    continue
                ax.loglog(Ts, [max(y, 0.01) for y in ys], "o-", color=COLOURS[m],
                          label=LABELS[m], ms=4)
            if ("explicit", d0, Ts[0]) in memory:
                guide(ax, [max(memory[("explicit", d0, T)][mode], 0.01) for T in Ts], 2, "∝ T²")
            guide(ax, [max(memory[("sdpa", d0, T)][mode], 0.01) for T in Ts], 1, "∝ T")
            ax.set_xlabel("sequence length T")
            ax.set_title(f"peak memory, {mode}, B={cfg.B}, d={d0}")
            ax.set_xticks(Ts, [str(T) for T in Ts])
            ax.minorticks_off()
        axes[0].set_ylabel("MiB above the inputs")
        axes[1].legend(fontsize=8)
        save(fig, "cost_memory.png")

    # 3. ratios to raw SDPA: how close the fused path and the alternatives come
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, MODES):
        for m in ["fused", "mha", "online", "explicit"]:
            for d, style in zip(cfg.widths, ["o-", "s--"]):
                ys = [times[(d, T, mode)][m] / times[(d, T, mode)]["sdpa"] for T in Ts]
                ax.semilogy(Ts, ys, style, color=COLOURS[m], ms=4,
                            label=f"{m}, d={d}")
        ax.axhline(1.0, color="black", lw=1)
        ax.axhline(1.1, color="black", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xticks(Ts, [str(T) for T in Ts])
        ax.minorticks_off()
        ax.set_xlabel("sequence length T")
        ax.set_title(f"time relative to raw SDPA, {mode}")
    axes[0].set_ylabel("time / time of raw SDPA")
    axes[1].legend(fontsize=7, ncol=2)
    save(fig, "fused_ratios.png")

    # 4. KV cache: time of one generation step against the length so far
    ps = kv["per_step"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(ps["length"], [t * 1e3 for t in ps["recompute"]], "o-", color="tab:red",
            label="recompute everything (SDPA)")
    ax.plot(ps["length"], [t * 1e3 for t in ps["cache"]], "o-", color="tab:blue",
            label="KV cache")
    ax.set_xlabel("tokens already in the sequence")
    ax.set_ylabel("time of one step (ms)")
    ax.set_title(f"one generation step, B={cfg.B}, d={kv['d']}")
    ax.legend(fontsize=8)
    save(fig, "kv_step_time.png")
    return written


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            names = [ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), Python {platform.python_version()}, "
            f"{platform.system()}; load average (1, 5, 15 min) {load}")


def run(cfg: Config) -> str:
    start = time.perf_counter()
    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    gflops = matmul_gflops(cfg.matmul_n)
    times = {}
    for d in cfg.widths:
        for T in cfg.lengths:
            for mode in MODES:
                methods = METHODS + (SINGLE_THREAD if mode == "fwd" else [])
                times[(d, T, mode)] = time_point(cfg, d, T, mode, methods)
                print(f"  timed d={d} T={T} {mode}", file=sys.stderr, flush=True)
    jobs = [(m, d, T, ("fwd+bwd",) if m == "online_autograd" else tuple(MODES))
            for d in cfg.widths for T in cfg.lengths for m in cfg.memory_methods]
    print(f"  timing done after {time.perf_counter() - start:.0f} s", file=sys.stderr)
    memory = measure_memory(cfg, jobs)
    print(f"  memory done after {time.perf_counter() - start:.0f} s", file=sys.stderr)
    kv = kv_benchmark(cfg)
    print(f"  KV cache done after {time.perf_counter() - start:.0f} s", file=sys.stderr)
    gflops = max(gflops, matmul_gflops(cfg.matmul_n))  # again at the end: the better of two
    machine = machine_description() + f" at the end ({load_before} at the start)"
    text, _ = report(cfg, times, memory, gflops, kv, machine)
    text += f"\n\nWhole run: {time.perf_counter() - start:.0f} s.\n"
    if cfg.figures is not None:
        for path in figures(cfg, times, memory, kv, gflops, cfg.figures):  # noqa: B007
            print(f"  wrote {path}", file=sys.stderr)
    return text


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny configuration (seconds)")
    parser.add_argument("--figures", type=Path, default=None,
                        help="folder for the figures (default: book/figures; 'none' to skip)")
    parser.add_argument("--save", type=Path, default=None,
                        help="also write the tables to this Markdown file, with date and command")
    args = parser.parse_args(argv)
    cfg = Config(**QUICK) if args.quick else Config()
    if args.figures is not None:
        cfg.figures = None if str(args.figures) == "none" else args.figures
    elif args.quick:
        cfg.figures = None  # never overwrite the book's figures with a smoke test
    text = run(cfg)
    print(text)
    if args.save is not None:
        command = "python benchmarks/attention_bench.py" + "".join(f" {a}" for a in (argv or
                                                                                  sys.argv[1:]))
        stamp = time.strftime("%Y-%m-%d %H:%M %Z")
        args.save.write_text(f"# Attention benchmark: results\n\nRun on {stamp} with "
                             f"`{command}`.\n\n{text}", encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
