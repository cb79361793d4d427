"""The attention benchmark's Markdown report and its verdict on each target."""

from __future__ import annotations

import math

from bench_kv import GENERATORS
from bench_methods import METHODS, MODES, PADDED
from bench_timing import attention_flops


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3g}" if s < 1 else f"{s * 1e3:.0f}"


def cell(t, ref) -> str:
    """Median ms, ratio to ``ref``'s median, and the spread of the repeats."""
    return f"{fmt_ms(t.median)} ({t.median / ref.median:.2f}×, ±{50 * t.spread:.0f}%)"


def report(cfg, times, memory, gflops, kv, machine) -> tuple[str, list]:
    """The Markdown tables and the verdict on each target."""
    lines = [f"Machine: {machine}", "",
             f"Matmul throughput (float32, {cfg.matmul_n}² @ {cfg.matmul_n}²): "
             f"{gflops:.1f} GFLOP/s", "",
             "Each time cell: median ms over the repeats, after two warm-up rounds (ratio of "
             "medians; ± half the spread (max − min) of the repeats, in % of the median). The "
             "repeats interleave the methods. Repeats per point in the last column.", ""]
    for mode in MODES:
        lines += [f"### Time, {mode} (ms; ratio to sdpa), B={cfg.B}", "",
                  "| d | T | " + " | ".join(METHODS) + " | fused GFLOP/s (% of matmul) | repeats |",
                  "|---|---|" + "---|" * (len(METHODS) + 2)]
        for d in cfg.widths:
            for T in cfg.lengths:
                t = times[(d, T, mode)]
                rate = attention_flops(cfg.B, T, d, mode) / t["fused"].median / 1e9
                lines.append(f"| {d} | {T} | " + " | ".join(cell(t[m], t["sdpa"]) for m in METHODS)
                             + f" | {rate:.1f} ({100 * rate / gflops:.0f}%) | "
                             f"{min(x.repeats for x in t.values())} |")
        lines.append("")
        lines += [f"### Padded rows, {mode} (ms; ratio to the unpadded fused path), B={cfg.B}", "",
                  "| d | T | fused | " + " | ".join(PADDED) + " |",
                  "|---|---|---|" + "---|" * len(PADDED)]
        for d in cfg.widths:
            for T in cfg.lengths:
                t = times[(d, T, mode)]
                lines.append(f"| {d} | {T} | {fmt_ms(t['fused'].median)} | "
                             + " | ".join(cell(t[m], t["fused"]) for m in PADDED) + " |")
        lines.append("")
    lines += ["### One thread each, fwd (ms)", "",
              "| d | T | online | sdpa | online / sdpa | fused | fused, mixed padding | "
              "padded / unpadded |", "|---|---|---|---|---|---|---|---|"]
    for d in cfg.widths:
        for T in cfg.lengths:
            t = times[(d, T, "fwd")]
            lines.append(
                f"| {d} | {T} | {fmt_ms(t['online_1t'].median)} | {fmt_ms(t['sdpa_1t'].median)} "
                f"| {t['online_1t'].median / t['sdpa_1t'].median:.2f}× | "
                f"{fmt_ms(t['fused_1t'].median)} | {fmt_ms(t['fused_mixed_1t'].median)} | "
                f"{t['fused_mixed_1t'].median / t['fused_1t'].median:.2f}× |")
    lines.append("")
    if memory:
        mem_methods = [m for m in METHODS + PADDED + ["online_autograd"]
                       if any(k[0] == m for k in memory)]
        lines += ["### Peak memory above the inputs (MiB), each in a fresh process", "",
                  "| d | T | mode | " + " | ".join(mem_methods) + " |",
                  "|---|---|---|" + "---|" * len(mem_methods)]
        for d in cfg.widths:
            for T in cfg.lengths:
                for mode in MODES:
                    row = [memory.get((m, d, T), {}).get(mode) for m in mem_methods]
                    lines.append(f"| {d} | {T} | {mode} | "
                                 + " | ".join("–" if v is None else f"{v:.1f}" for v in row)
                                 + " |")
        lines.append("")
    lines += kv_table(kv)
    verdicts = targets(cfg, times, memory, gflops, kv)
    lines += ["### Targets", "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {measured} | {'yes' if ok else 'NO'} |"
              for name, measured, ok in verdicts]
    return "\n".join(lines), verdicts


def kv_table(kv) -> list[str]:
    lines = [f"### KV cache: {kv['tokens']} tokens after a {kv['prompt']}-token prompt, "
             f"B={kv['B']}, d={kv['d']} (median of {kv['repeats']} generations)", "",
             "Each repeat runs every row, 1 and 2 threads, in turn. Load: " + kv["load"] + ".",
             "",
             "| generator | threads | with cache (s) | recomputing (s) | speed-up |",
             "|---|---|---|---|---|"]
    for name in GENERATORS:
        for n in kv["threads"]:
            c, r = kv["times"][name, True, n], kv["times"][name, False, n]
            lines.append(f"| {name} | {n} | {c.median:.3f} ±{50 * c.spread:.0f}% | "
                         f"{r.median:.3f} ±{50 * r.spread:.0f}% | {r.median / c.median:.1f}× |")
    if len(kv["threads"]) == 2:  # what the second thread does to each side of the ratio
        n1, n2 = kv["threads"]

        def gain(cache: bool) -> str:
            return ", ".join(f"{name} {kv['times'][name, cache, n2].median / kv['times'][name, cache, n1].median:.2f}×"  # noqa: E501
                             for name in GENERATORS)
        lines += ["", f"Time on {n2} threads ÷ time on {n1} (this run): with the cache "
                  f"{gain(True)}; recomputing {gain(False)}. A cached step's operations are "
                  "small (one row of projections, one row of scores); recomputing runs matrix "
                  "products over the whole sequence, which split over two cores. So the "
                  "cache's speed-up on two threads is its one-thread speed-up times the "
                  "recomputing number divided by the cache's."]
    diffs = ", ".join(f"{k}: {v:.1e}" for k, v in kv["max_diff"].items())
    lines += ["", f"Largest difference, cache against recomputing (float32): {diffs}; tiny "
              f"model, the same tokens: {'yes' if kv['same_tokens'] else 'NO'}.", ""]
    return lines


def targets(cfg, times, memory, gflops, kv):
    big = [T for T in cfg.lengths if T >= 512] or list(cfg.lengths)
    T_max = max(cfg.lengths)
    keys = [(d, T, mode) for d in cfg.widths for T in big for mode in MODES]
    out = []

    def worst(num, den, ks=keys):
        k = max(ks, key=lambda k: times[k][num].median / times[k][den].median)
        return k, times[k][num].median / times[k][den].median

    for side in ("left", "right", "mixed"):
        k, r = worst(f"fused_{side}", "fused")
        out.append((f"fused with {side} padding ≤ 1.3× fused without, every T ≥ 512, fwd and "
                    f"fwd+bwd", f"worst {r:.2f}× (d={k[0]}, T={k[1]}, {k[2]})", r <= 1.3))
    if memory:
        for side in ("left", "right", "mixed"):
            rs = {(d, T): memory[(f"fused_{side}", d, T)]["fwd"]
                  / max(memory[("fused", d, T)]["fwd"], 1e-3)
                  for d in cfg.widths for T in big if (f"fused_{side}", d, T) in memory}
            if rs:
                (d, T), r = max(rs.items(), key=lambda kv_: kv_[1])
                out.append((f"fused with {side} padding: fwd peak memory ≤ 2× unpadded, "
                            "every T ≥ 512", f"worst {r:.2f}× (d={d}, T={T})", r <= 2))
    k, r = worst("fused_general", "fused")
    out.append(("general route (mixed padding, (B, 1, T, T) mask): its cost, stated",
                f"worst {r:.2f}× the unpadded fused path (d={k[0]}, T={k[1]}, {k[2]})", True))
    k, r = worst("fused", "sdpa")
    out.append(("fused ≤ 1.1× sdpa, every T ≥ 512, fwd and fwd+bwd",
                f"worst {r:.2f}× (d={k[0]}, T={k[1]}, {k[2]})", r <= 1.1))
    k, r = worst("fused", "mha")
    out.append(("fused faster than nn.MultiheadAttention, every T ≥ 512",
                f"worst fused/mha {r:.2f}× (d={k[0]}, T={k[1]}, {k[2]})", r < 1))
    for mode in MODES:
        rates = {d: attention_flops(cfg.B, T_max, d, mode)
                 / times[(d, T_max, mode)]["fused"].median / 1e9 for d in cfg.widths}
        sdpa = {d: attention_flops(cfg.B, T_max, d, mode)
                / times[(d, T_max, mode)]["sdpa"].median / 1e9 for d in cfg.widths}
        text = ", ".join(f"d={d}: {100 * v / gflops:.0f}% (raw SDPA, same projections: "
                         f"{100 * sdpa[d] / gflops:.0f}%)" for d, v in rates.items())
        out.append((f"fused ≥ 75% of matmul throughput at T={T_max}, {mode}", text,
                    min(rates.values()) >= 0.75 * gflops))
    if memory and all(("online", d, T_max) in memory for d in cfg.widths):
        ratios = {d: memory[("online", d, T_max)]["fwd"]
                  / max(memory[("sdpa", d, T_max)]["fwd"], 1e-3) for d in cfg.widths}
        out.append((f"online fwd peak memory ≤ 1.5× sdpa at T={T_max}",
                    ", ".join(f"d={d}: {r:.2f}×" for d, r in ratios.items()),
                    max(ratios.values()) <= 1.5))
        for d in cfg.widths:
            slope = growth_exponent(cfg.lengths, [memory[("online", d, T)]["fwd"]
                                                  for T in cfg.lengths])
            out.append((f"online memory grows ~linearly in T (d={d})", f"exponent {slope:.2f}",
                        slope <= 1.25))
    fwd = [(d, T, "fwd") for d in cfg.widths for T in big]
    k, r = worst("online", "sdpa", fwd)
    r1 = max(times[k_]["online_1t"].median / times[k_]["sdpa_1t"].median for k_ in fwd)
    out.append(("online fwd time ≤ 2× sdpa, every T ≥ 512",
                f"worst {r:.2f}× (d={k[0]}, T={k[1]}); one thread each: worst {r1:.2f}×", r <= 2))
    for name in GENERATORS:
        speeds = {n: kv["times"][name, False, n].median / kv["times"][name, True, n].median
                  for n in kv["threads"]}
        out.append((f"KV cache ≥ 5× faster than recomputing, {kv['tokens']} tokens, {name}",
                    ", ".join(f"{n} thread{'s' if n > 1 else ''}: {s:.1f}×"
                              for n, s in speeds.items()), min(speeds.values()) >= 5))
    out.append(("tiny model: the same tokens with and without the cache",
                "equal" if kv["same_tokens"] else "different", kv["same_tokens"]))
    return out


def growth_exponent(lengths, values) -> float:
    """Slope of log(value) against log(T) between the two largest T (1 = linear, 2 = quadratic)."""
    (t1, v1), (t2, v2) = sorted(zip(lengths, values))[-2:]
    return math.log(max(v2, 1e-9) / max(v1, 1e-9)) / math.log(t2 / t1)
