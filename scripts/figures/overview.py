"""The six steps of single-head causal self-attention, as one flow diagram."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from figures import save  # noqa: E402

STEPS = [
    ("1  Project", r"$Q = XW_q,\ K = XW_k,\ V = XW_v$", "3 x (B, T, d)"),
    ("2  Score", r"raw scores $QK^\top$", "(B, T, T)"),
    ("3  Scale", r"$S = QK^\top / \sqrt{d}$", "(B, T, T)"),
    ("4  Mask", r"$s_{ij} = -\infty$ if $j > i$ or $j$ is padding", "(B, T, T)"),
    ("5  Softmax", r"$A = \mathrm{softmax}(S)$, row by row", "(B, T, T)"),
    ("6  Weighted sum", r"$Y = AV$", "(B, T, d)"),
]


def main(outdir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7.2, 6.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.3, len(STEPS) + 1.2)
    ax.axis("off")
    top = len(STEPS) + 0.6
    ax.text(5, top + 0.35, "X: token vectors  (B, T, d)", ha="center", va="center", fontsize=11,
            fontweight="bold")
    for n, (name, formula, shape) in enumerate(STEPS):
        y = top - 1 - n
        colour = "#dbe9f6" if n != 3 else "#fde2cf"
        ax.add_patch(FancyBboxPatch((0.4, y - 0.33), 9.2, 0.66, boxstyle="round,pad=0.05",
                                    fc=colour, ec="#4a6fa5", lw=1.2))
        ax.text(0.7, y, name, va="center", fontsize=11, fontweight="bold")
        ax.text(3.9, y, formula, va="center", fontsize=10.5)
        ax.text(9.4, y, shape, va="center", ha="right", fontsize=9, color="#444")
        ax.annotate("", xy=(5, y + 0.4), xytext=(5, y + 0.62),
                    arrowprops=dict(arrowstyle="->", color="#4a6fa5"))
    ax.text(5, top - len(STEPS) - 0.65, "Y: one output per token  (B, T, d)", ha="center",
            va="center", fontsize=11, fontweight="bold")
    return save(fig, outdir, "overview_six_steps.png")
