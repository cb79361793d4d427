"""Chapter 2 figures: the tiny example's raw scores and one query's row, and their measured cost."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from attnbook import attention_scores  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from projections import TOKENS, tiny_example  # noqa: E402

from figures import save  # noqa: E402

QUERY = 2  # "sat"


def heatmap(outdir: Path) -> Path:
    x, attn = tiny_example()
    with torch.no_grad():
        s = attention_scores(attn.query(x), attn.key(x))[0]  # (T, T)
    vmax = float(s.abs().max())
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(8.6, 3.6), gridspec_kw={"width_ratios": [1, 1.1]})
    ax.imshow(s, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    for i in range(len(TOKENS)):
        for j in range(len(TOKENS)):
            colour = "white" if abs(s[i, j]) > 0.6 * vmax else "black"
            ax.text(j, i, f"{s[i, j]:.2f}", ha="center", va="center", fontsize=7.5, color=colour)
    ax.add_patch(Rectangle((-0.5, QUERY - 0.5), len(TOKENS), 1, fill=False, ec="#e07b00", lw=2))
    ax.set_xticks(range(len(TOKENS)), TOKENS, rotation=45, ha="right")
    ax.set_yticks(range(len(TOKENS)), TOKENS)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(r"raw scores $QK^\top$  (T, T)", fontsize=10)
    row = s[QUERY]
    bx.bar(range(len(TOKENS)), row, color=["#c0392b" if v > 0 else "#2e6fad" for v in row])
    bx.axhline(0, color="#444", lw=0.8)
    bx.set_xticks(range(len(TOKENS)), TOKENS)
    bx.set_ylabel(r"$s_{ij} = q_i \cdot k_j$")
    bx.set_title(f"row {QUERY}: query \"{TOKENS[QUERY]}\" against every key", fontsize=10)
    for spine in ("top", "right"):
        bx.spines[spine].set_visible(False)
    fig.tight_layout()
    return save(fig, outdir, "scores_heatmap.png")


def _seconds(T: int, d: int, repeats: int = 15) -> float:
    """Best of ``repeats`` wall-clock times of one (1, T, d) @ (1, d, T) score product."""
    q, k = torch.randn(1, T, d), torch.randn(1, T, d)
    attention_scores(q, k)  # warm up
    best = float("inf")
    for _ in range(repeats):  # the best run is the one least disturbed by other processes
        start = time.perf_counter()
        attention_scores(q, k)
        best = min(best, time.perf_counter() - start)
    return best


def cost(outdir: Path) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: steadier timings on a shared machine
    try:
        Ts = [64, 128, 256, 512, 1024]
        ds = [16, 32, 64, 128, 256]
        t_of_T = [_seconds(T, 64) for T in Ts]
        t_of_d = [_seconds(512, d) for d in ds]
    finally:
        torch.set_num_threads(threads)
    mib = [T * T * 4 / 2**20 for T in Ts]  # float32 scores of one sequence
    with plt.rc_context({"font.size": 12, "legend.fontsize": 11}):
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
        ax = axes[0]
        ax.loglog(Ts, [1e3 * t for t in t_of_T], "o-", label="measured")
        ax.loglog(Ts, [1e3 * t_of_T[-1] * (T / Ts[-1]) ** 2 for T in Ts], "--", color="grey",
                  label=r"$\propto T^2$")
        ax.set_xlabel("T (tokens), d = 64")
        ax.set_ylabel("time (ms)")
        ax.set_title("time grows as T²")
        ax = axes[1]
        ax.loglog(ds, [1e3 * t for t in t_of_d], "o-", color="tab:green", label="measured")
        ax.loglog(ds, [1e3 * t_of_d[-1] * d / ds[-1] for d in ds], "--", color="grey",
                  label=r"$\propto d$")
        ax.set_xlabel("d (width), T = 512")
        ax.set_ylabel("time (ms)")
        ax.set_title("and linearly in d")
        ax = axes[2]
        ax.loglog(Ts, mib, "o-", color="tab:purple", label=r"$4T^2$ bytes")
        ax.set_xlabel("T (tokens)")
        ax.set_ylabel("MiB")
        ax.set_title(r"memory of $QK^\top$ (float32), any d")
        for ax in axes:
            ax.legend(frameon=False)
            ax.set_xticks([], minor=True)
            lo, hi = ax.get_ylim()
            ax.set_yticks([t for t in (m * 10.0**e for e in range(-3, 3) for m in (1, 2, 5))
                           if lo <= t <= hi])
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        axes[0].set_xticks(Ts, [str(T) for T in Ts])
        axes[1].set_xticks(ds, [str(d) for d in ds])
        axes[2].set_xticks(Ts, [str(T) for T in Ts])
        fig.tight_layout()
        out = save(fig, outdir, "scores_cost.png")
    for T, t in zip(Ts, t_of_T):
        print(f"  T={T:5d} d=64: {1e3 * t:8.3f} ms")
    for d, t in zip(ds, t_of_d):
        print(f"  T=  512 d={d:3d}: {1e3 * t:8.3f} ms")
    return out


def main(outdir: Path) -> Path:
    cost(outdir)
    return heatmap(outdir)
