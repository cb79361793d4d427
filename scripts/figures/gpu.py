"""Part VI, attention on a GPU: the roofline, the programs of the forward and backward kernels,
and Flash-Decoding's split of one query's keys."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attnbook.gpu.io_cost import H100, T4  # noqa: E402
from attnbook.gpu.roofline import KERNELS, count_kernel, draw_roofline  # noqa: E402
from figures import save  # noqa: E402

BLUE, GREEN, PALE, ORANGE = "#4c72b0", "#55a868", "#e8f0e8", "#dd8452"


def roofline(outdir: Path) -> Path:
    """Rooflines of a T4 and an H100, each with both roofs (tensor cores, float32 FMA), and the
    three kernels at T = 4096, d = 128, float16, counted by attnbook.gpu.roofline with the
    blocks the library launches on each GPU, each under the roof of the unit it runs on."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
    for ax, gpu in zip(axes, (T4, H100)):
        draw_roofline([count_kernel(name, 4096, 128, gpu=gpu) for name in KERNELS], gpu,
                      highlight="fused", ax=ax)
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
