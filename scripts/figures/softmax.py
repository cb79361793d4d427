"""Chapter 6 figures: softmax at several temperatures, and where the naive formula breaks."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from attnbook.softmax import stable_softmax, temperature_softmax  # noqa: E402
from figures import save  # noqa: E402

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]
SCORES = [0.5, 2.0, 1.0, -1.0, 0.5, 1.6]  # one query's scaled scores over six keys
BASE = [0.0, -1.0, -3.0]  # the overflow experiment: softmax([c, c - 1, c - 3])


def naive_softmax(s: torch.Tensor) -> torch.Tensor:
    e = s.exp()
    return e / e.sum(dim=-1, keepdim=True)


def temperature_figure(outdir: Path) -> Path:
    s = torch.tensor(SCORES, dtype=torch.float64)
    temps = [0.1, 0.5, 1.0, 3.0, 100.0]
    fig, axes = plt.subplots(1, len(temps), figsize=(12, 2.7), sharey=True)
    for ax, tau in zip(axes, temps):
        p = temperature_softmax(s, tau)
        top = int(s.argmax())
        colours = ["tab:orange" if i == top else "tab:blue" for i in range(len(s))]
        bars = ax.bar(range(len(s)), p, color=colours)
        bars[top].set_hatch("//")  # the argmax is marked by hatching too, not by colour alone
        ax.axhline(1 / len(s), color="grey", lw=0.8, ls=":")
        ax.set_xticks(range(len(s)), TOKENS, rotation=45)
        ax.set_title(f"τ = {tau:g}")
        ax.set_ylim(0, 1.05)
    axes[0].set_ylabel("weight")
    fig.suptitle("softmax(s / τ) of one row of scores: τ → 0 picks the argmax (orange, hatched), "
                 "τ → ∞ tends to uniform (dotted)", fontsize=10)
    fig.tight_layout()
    return save(fig, outdir, "softmax_temperature.png")


def status(p: torch.Tensor, exact: torch.Tensor) -> int:
    """0 = right to 0.01, 1 = finite but wrong, 2 = NaN or inf."""
    p = p.double()
    if not torch.isfinite(p).all():
        return 2
    return 0 if (p - exact).abs().max() < 0.01 else 1


def overflow_figure(outdir: Path) -> Path:
    base = torch.tensor(BASE, dtype=torch.float64)
    exact = torch.softmax(base, -1)
    shifts = np.arange(-130.0, 130.5, 1.0)  # integers: exact in every dtype up to 256
    rows, labels = [], []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        for fn, kind in ((naive_softmax, "naive"), (stable_softmax, "max trick")):
            rows.append([status(fn((base + c).to(dtype)), exact) for c in shifts])
            labels.append(f"{name}, {kind}")
    grid = np.array(rows)
    cmap = ListedColormap(["#9fd49f", "#f2b35c", "#d9534f"])
    fig, ax = plt.subplots(figsize=(10, 3.2))
    ax.imshow(grid, aspect="auto", cmap=cmap, vmin=0, vmax=2, interpolation="nearest",
              extent=(shifts[0], shifts[-1], len(rows) - 0.5, -0.5))
    ax.set_yticks(range(len(rows)), labels)
    for y in (1.5, 3.5):
        ax.axhline(y, color="white", lw=3)
    ax.set_xlabel("largest score c in the row [c, c − 1, c − 3]")
    ax.set_xticks(np.arange(-120, 121, 20))
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i)) for i in range(3)]
    ax.legend(handles, ["right (to 0.01)", "finite but wrong", "NaN"], loc="upper center",
              bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    ax.set_title("softmax of the same row shifted by c: the naive formula breaks, "
                 "the max trick never does", fontsize=10)
    return save(fig, outdir, "softmax_overflow.png")


def main(outdir: Path) -> Path:
    overflow_figure(outdir)
    return temperature_figure(outdir)
