"""Part VI, attention on a GPU: the roofline, the programs of the forward and backward kernels,
and Flash-Decoding's split of one query's keys."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attnbook.gpu.io_cost import A100, H100, attainable_flops, flash_io, standard_io  # noqa: E402
from figures import save  # noqa: E402

BLUE, GREEN, PALE, ORANGE = "#4c72b0", "#55a868", "#e8f0e8", "#dd8452"


def roofline(outdir: Path) -> Path:
    """Rooflines of two GPUs with causal prefill (standard and flash) and decoding, float16."""
    T, d, b = 4096, 128, 128
    points = {
        "decoding (one query)": 4 * T * d / (2 * (2 * T * d + 2 * d)),
        "prefill, standard (Algorithm 0)": 4 * T * T * d / (2 * standard_io(T, d)),
        "prefill, flash kernel": 2 * T * T * d / (2 * flash_io(T, d, b, b, causal=True)),
    }
    xs = np.logspace(-1, 3.5, 200)
    fig, ax = plt.subplots(figsize=(6.2, 3.8))
    for gpu, ls in ((H100, "-"), (A100, "--")):
        ax.loglog(xs, [attainable_flops(x, gpu) / 1e12 for x in xs], ls, color="black", lw=1.2,
                  label=f"{gpu.name} (ridge {gpu.ridge:.0f})")
    for (label, x), colour in zip(points.items(), (ORANGE, "tab:red", GREEN)):
        ax.plot(x, attainable_flops(x, H100) / 1e12, "o", color=colour, ms=7,
                label=f"{label}: {x:.0f} FLOP/byte")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.set_title(f"Roofline, float16, T = {T}, d = {d}", fontsize=10)
    ax.legend(fontsize=7.5, loc="lower right")
    return save(fig, outdir, "memory_roofline.png")


def _tiles(ax, T, b, causal=True):
    """Draw the (query block, key block) tiles: full, diagonal (masked part pale and hatched),
    skipped (white, marked "skip"), so that colour is not the only cue."""
    n = T // b
    for I in range(n):
        for J in range(n):
            if causal and J > I:
                colour = "white"
                ax.text(J * b + b / 2, I * b + b / 2, "skip", ha="center", va="center",
                        fontsize=7, color="dimgrey")
            else:
                colour = GREEN if J == I else BLUE
            ax.add_patch(Rectangle((J * b, I * b), b, b, fc=colour, ec="grey", lw=0.8))
            if J == I:
                for i in range(b):
                    ax.add_patch(Rectangle((J * b + i + 1, I * b + i), b - i - 1, 1, fc=PALE,
                                           ec="#4d4d4d", hatch="////", lw=0))
    ax.set_xlim(0, T)
    ax.set_ylim(T, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_xticks(range(0, T + 1, b))
    ax.set_yticks(range(0, T + 1, b))


def forward_programs(outdir: Path) -> Path:
    """The forward grid: one program per query block, looping along its row of key blocks."""
    T, b = 16, 4
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    _tiles(ax, T, b)
    for I in range(T // b):
        y = I * b + b / 2
        ax.annotate("", xy=((I + 1) * b - 0.4, y), xytext=(0.3, y),
                    arrowprops=dict(arrowstyle="->", lw=1.6, color="black"))
        ax.text(T + 0.4, y, f"program {I}", va="center", fontsize=8)
    ax.set_title("Forward: a program per query block,\nits loop runs along the keys", fontsize=9)
    return save(fig, outdir, "tfwd_programs.png")


def backward_programs(outdir: Path) -> Path:
    """The backward grid: one program per key block, looping down its column of query blocks."""
    T, b = 16, 4
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    _tiles(ax, T, b)
    for J in range(T // b):
        x = J * b + b / 2
        ax.annotate("", xy=(x, T - 0.3), xytext=(x, J * b + 0.4),
                    arrowprops=dict(arrowstyle="->", lw=1.6, color="black"))
        ax.text(x, -0.6, f"program {J}", ha="center", fontsize=8)
    ax.text(T + 0.4, T / 2, "dQ rows:\natomic adds\nfrom every\nprogram\nin the row", va="center",
            fontsize=8)
    ax.set_title("Backward: a program per key block, its loop runs\ndown the queries; "
                 "dK, dV stay in registers", fontsize=9, pad=18)
    return save(fig, outdir, "tbwd_programs.png")


def decoding_splits(outdir: Path) -> Path:
    """Flash-Decoding: one query's keys in four chunks, one program each, then one merge."""
    T, n_split = 32, 4
    chunk = T // n_split
    colours = [BLUE, GREEN, ORANGE, "tab:purple"]
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    for s in range(n_split):
        ax.add_patch(Rectangle((s * chunk, 2), chunk, 1, fc=colours[s], ec="white", alpha=0.85))
        ax.text(s * chunk + chunk / 2, 2.5, f"keys {s * chunk}..{(s + 1) * chunk - 1}",
                ha="center", va="center", fontsize=8, color="white")
        ax.annotate("", xy=(s * chunk + chunk / 2, 1.25), xytext=(s * chunk + chunk / 2, 1.95),
                    arrowprops=dict(arrowstyle="->", color="black"))
        ax.text(s * chunk + chunk / 2, 1.0, f"program {s}: $y_{s}, L_{s}$", ha="center",
                va="center", fontsize=8)
        ax.annotate("", xy=(T / 2, -0.25), xytext=(s * chunk + chunk / 2, 0.75),
                    arrowprops=dict(arrowstyle="->", color="grey"))
    ax.text(T / 2, -0.55, r"merge: $y = \sum_u e^{L_u - m} y_u \,/\, \sum_u e^{L_u - m}$",
            ha="center", va="center", fontsize=9)
    ax.text(-0.5, 2.5, "one query's\ncached keys", ha="right", va="center", fontsize=8)
    ax.set_xlim(-7, T + 1)
    ax.set_ylim(-0.9, 3.2)
    ax.axis("off")
    return save(fig, outdir, "fdec_splits.png")


def main(outdir: Path) -> list[Path]:
    return [roofline(outdir), forward_programs(outdir), backward_programs(outdir),
            decoding_splits(outdir)]
