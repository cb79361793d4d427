"""Online softmax, drawn: the running maximum and sum over key blocks, and the causal tile grid."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from attnbook.online import online_softmax_stats  # noqa: E402
from figures import save  # noqa: E402


def running_stats(outdir: Path) -> Path:
    """One row of 12 scores read in blocks of 4: m and l after each block."""
    torch.manual_seed(3)
    s = torch.randn(12, dtype=torch.float64) * 2
    s[9] = 4.5  # a late, larger maximum forces a rescale
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 4.6), sharex=True,
                                   gridspec_kw={"height_ratios": [2, 1.3]})
    colours = ["tab:blue", "tab:orange", "tab:green"]
    for b in range(3):
        idx = np.arange(4 * b, 4 * b + 4)
        ax1.bar(idx, s[idx].numpy(), color=colours[b], label=f"block {b + 1}")
    ms, ls = [], []
    for b in range(1, 4):
        m, l = online_softmax_stats(s[: 4 * b], block_size=4)
        ms.append(m.item())
        ls.append(l.item())
        ax1.hlines(m.item(), 0 - 0.4, 4 * b - 0.6, color="black", lw=1.2,
                   ls=["-", "--", ":"][b - 1])
        ax1.annotate(f"m after block {b} = {m.item():.2f}", (4 * b - 0.6, m.item()),
                     textcoords="offset points", xytext=(0, 3), fontsize=8, va="bottom",
                     ha="right", bbox=dict(fc="white", ec="none", pad=0.5))
    ax1.axhline(0, color="grey", lw=0.6)
    ax1.set_ylim(top=max(ms) + 1.2)  # room for the last label below the title
    ax1.set_ylabel("score $s_j$")
    ax1.legend(fontsize=8, loc="lower left")
    ax1.set_title("Online softmax: one pass over the blocks keeps only m and l")
    ax2.step([3.5, 7.5, 11.5], ls, where="mid", color="black")
    ax2.plot([3.5, 7.5, 11.5], ls, "o", color="black")
    for x, l in zip([3.5, 7.5, 11.5], ls):
        ax2.annotate(f"l = {l:.2f}", (x, l), textcoords="offset points", xytext=(4, 4),
                     fontsize=8)
    ax2.set_ylabel("running sum l")
    ax2.set_xlabel("key j")
    ax2.set_xticks(range(12))
    ax2.set_ylim(0, max(ls) * 1.4)
    return save(fig, outdir, "online_running_stats.png")


def tile_grid(outdir: Path) -> Path:
    """Which (query block, key block) tiles causal tiled attention computes, for T=16, b=4."""
    T, b = 16, 4
    grid = np.zeros((T, T))
    for i0 in range(0, T, b):
        for j0 in range(0, T, b):
            if j0 > i0:
                continue  # a tile wholly in the future: skipped
            grid[i0 : i0 + b, j0 : j0 + b] = 1 if j0 < i0 else 2
    grid[np.triu_indices(T, 1)] = np.where(grid[np.triu_indices(T, 1)] == 2, 3, 0)
    fig, ax = plt.subplots(figsize=(4.6, 5.2))
    cmap = matplotlib.colors.ListedColormap(["white", "tab:blue", "tab:green", "#cfe8cf"])
    ax.imshow(grid, cmap=cmap, vmin=0, vmax=3)
    # Colour is not the only carrier: masked entries are hatched and every tile is named.
    for i, j in zip(*np.nonzero(grid == 3)):
        ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                                  hatch="////", edgecolor="#4d4d4d", lw=0))
    for i0 in range(0, T, b):
        for j0 in range(0, T, b):
            name, colour = (("skip", "black") if j0 > i0 else ("full", "white") if j0 < i0
                            else ("diag", "white"))
            y = i0 + (b - 1) / 2 + (1.0 if j0 == i0 else 0)
            x = j0 + (b - 1) / 2 - (0.8 if j0 == i0 else 0)
            ax.text(x, y, name, ha="center", va="center", color=colour, fontsize=8,
                    fontweight="bold")
    for k in range(0, T + 1, b):
        ax.axhline(k - 0.5, color="black", lw=1)
        ax.axvline(k - 0.5, color="black", lw=1)
    ax.set_xticks(range(0, T, b), [f"{j}" for j in range(0, T, b)])
    ax.set_yticks(range(0, T, b), [f"{i}" for i in range(0, T, b)])
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title("Tiles computed (T=16, block 4)", fontsize=10)
    handles = [matplotlib.patches.Patch(color="tab:blue", label="full: tile with no mask"),
               matplotlib.patches.Patch(color="tab:green", label="diag: diagonal tile, visible"),
               matplotlib.patches.Patch(facecolor="#cfe8cf", edgecolor="#4d4d4d", hatch="////",
                                        label="diagonal tile, masked"),
               matplotlib.patches.Patch(facecolor="white", edgecolor="black",
                                        label="skip: all future, skipped")]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13),
              ncol=2, frameon=False)
    return save(fig, outdir, "online_tiles.png")


def main(outdir: Path) -> Path:
    running_stats(outdir)
    return tile_grid(outdir)
