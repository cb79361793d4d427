"""The figures the book shows from the attention benchmark (book/figures/cost_*, fused_*, kv_*)."""

from __future__ import annotations

from pathlib import Path

from bench_kv import GENERATORS
from bench_methods import MODES

COLOURS = {"explicit": "tab:red", "fused": "tab:blue", "online": "tab:green", "mha": "tab:purple",
           "sdpa": "black", "online_autograd": "tab:olive", "sdpa_3d": "tab:brown",
           "mha_causal": "tab:pink", "fused_left": "tab:cyan", "fused_right": "tab:orange",
           "fused_mixed": "tab:blue", "fused_general": "tab:red", "online_mixed": "tab:green"}
LABELS = {"explicit": "explicit (attnbook.Attention)",
          "fused": "fused (AttentionLayer(fused=True))",
          "online": "online / tiled (custom backward)", "mha": "nn.MultiheadAttention",
          "sdpa": "raw SDPA", "online_autograd": "online, plain autograd",
          "sdpa_3d": "raw SDPA, 3-D input (math kernel)",
          "mha_causal": "nn.MultiheadAttention, is_causal=True",
          "fused_left": "fused, left padding", "fused_right": "fused, right padding",
          "fused_mixed": "fused, mixed padding",
          "fused_general": "general route, (B, 1, T, T) mask",
          "online_mixed": "online, mixed padding"}
MAIN = ["explicit", "fused", "online", "mha", "sdpa"]
# Colour is never the only mark: each method also has its own marker and line style.
MARKERS = {"explicit": "o-", "fused": "s-", "online": "^--", "mha": "D-.", "sdpa": "x:",
           "online_autograd": "v--", "sdpa_3d": "P-.", "mha_causal": "d:"}
PAD_MARKERS = {"fused_left": "o-", "fused_right": "s-", "fused_mixed": "^-",
               "fused_general": "D-.", "online_mixed": "v--"}


def _T_axis(ax, Ts, title: str) -> None:
    """T on a log axis, ticked at the measured lengths, and the panel's title."""
    ax.set_xscale("log")
    ax.set_xticks(Ts, [str(T) for T in Ts])
    ax.minorticks_off()
    ax.set_xlabel("sequence length T")
    ax.set_title(title)


def _ratio_axes(ax, Ts, target: float, title: str) -> None:
    """A ratio plot against T: the line 1 and the target, dotted."""
    ax.axhline(1.0, color="black", lw=1)
    ax.axhline(target, color="black", lw=0.8, ls=":")
    _T_axis(ax, Ts, title)


def figures(cfg, times, memory, kv, outdir: Path) -> list[Path]:
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

    def med(d, T, mode, m):
        return times[(d, T, mode)][m].median

    # 1. time against T, every method
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, MODES):
        for m in MAIN:
            ax.loglog(Ts, [med(d0, T, mode, m) * 1e3 for T in Ts], MARKERS[m], color=COLOURS[m],
                      label=LABELS[m], ms=4)
        guide(ax, [med(d0, T, mode, "explicit") * 1e3 for T in Ts], 2, "∝ T²")
        _T_axis(ax, Ts, f"{mode}, B={cfg.B}, d={d0}, float32")
    axes[0].set_ylabel("time per call (ms)")
    axes[0].legend(fontsize=8)
    save(fig, "cost_time.png")

    # 2. peak memory against T
    if memory:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, mode in zip(axes, MODES):
            for m in MAIN + (["online_autograd"] if mode != "fwd" else []):
                ys = [memory.get((m, d0, T), {}).get(mode) for T in Ts]
                if None in ys:
                    continue
                ax.loglog(Ts, [max(y, 0.01) for y in ys], MARKERS[m], color=COLOURS[m],
                          label=LABELS[m], ms=4)
            if ("explicit", d0, Ts[0]) in memory:
                guide(ax, [max(memory[("explicit", d0, T)][mode], 0.01) for T in Ts], 2, "∝ T²")
            guide(ax, [max(memory[("sdpa", d0, T)][mode], 0.01) for T in Ts], 1, "∝ T")
            _T_axis(ax, Ts, f"peak memory, {mode}, B={cfg.B}, d={d0}")
        axes[0].set_ylabel("MiB above the inputs")
        axes[1].legend(fontsize=8)
        save(fig, "cost_memory.png")

    # 3. ratios to raw SDPA: how close the fused path and the alternatives come
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, MODES):
        for m in ["fused", "mha", "mha_causal", "online", "explicit", "sdpa_3d"]:
            for d in cfg.widths:
                ys = [med(d, T, mode, m) / med(d, T, mode, "sdpa") for T in Ts]
                ax.semilogy(Ts, ys, MARKERS[m], color=COLOURS[m], ms=4, label=f"{m}, d={d}")
        _ratio_axes(ax, Ts, 1.1, f"time relative to raw SDPA, {mode}")
    axes[0].set_ylabel("time / time of raw SDPA")
    axes[1].legend(fontsize=7, ncol=2)
    save(fig, "fused_ratios.png")

    # 4. padded rows relative to the unpadded fused path
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, MODES):
        for m in ["fused_left", "fused_right", "fused_mixed", "fused_general", "online_mixed"]:
            ys = [med(d0, T, mode, m) / med(d0, T, mode, "fused") for T in Ts]
            ax.semilogy(Ts, ys, PAD_MARKERS[m], color=COLOURS[m],
                        ms=4, label=LABELS[m])
        _ratio_axes(ax, Ts, 1.3, f"padded / unpadded fused, {mode}, B={cfg.B}, d={d0}")
    axes[0].set_ylabel("time / time of the unpadded fused path")
    axes[1].legend(fontsize=7)
    save(fig, "fused_padding.png")

    # 5. KV cache: time of one generation step against the length so far
    ps = kv["per_step"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(ps["length"], [t * 1e3 for t in ps["recompute"]], "o-", color="tab:red",
            label="recompute everything (SDPA)")
    ax.plot(ps["length"], [t * 1e3 for t in ps["cache"]], "s--", color="tab:blue",
            label="KV cache")
    ax.set_xlabel("tokens already in the sequence")
    ax.set_ylabel("time of one step (ms)")
    ax.set_title(f"one generation step, B={kv['B']}, d={kv['d']}")
    ax.legend(fontsize=8)
    save(fig, "kv_step_time.png")

    # 6. KV cache: whole generation, every generator, 1 and 2 threads
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    width = 0.2
    for i, n in enumerate(kv["threads"]):
        for j, cache in enumerate((False, True)):
            xs = [g + (2 * i + j - 1.5) * width for g in range(len(GENERATORS))]
            ys = [kv["times"][name, cache, n].median for name in GENERATORS]
            ax.bar(xs, ys, width, label=f"{'cache' if cache else 'recompute'}, {n} thread(s)",
                   color=("tab:blue" if cache else "tab:red"), alpha=0.5 + 0.5 * i,
                   hatch=("" if cache else "//") + ("" if i == 0 else ".."), edgecolor="black")
    ax.set_xticks(range(len(GENERATORS)), GENERATORS)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"generating {kv['tokens']} tokens, B={kv['B']}, d={kv['d']}")
    ax.legend(fontsize=7)
    save(fig, "kv_generation.png")
    return written
