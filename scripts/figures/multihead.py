"""Figures for "From one head to many": how d splits into heads, and two heads vs one."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attnbook.lab.plotting import plot_attention  # noqa: E402
from attnbook.multihead import MultiHeadAttention  # noqa: E402
from figures import save  # noqa: E402

COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
TOKENS = ["a", "b", "x", "c"]


def two_heads_example(sharpness: float = 8.0) -> MultiHeadAttention:
    """d = 4, two heads of width 2; token c's head 0 looks for a, its head 1 looks for b.

    Tokens are one-hot vectors (a, b, x, c). Both heads' values say which token was read:
    value slice (is_a, is_b).
    """
    m = MultiHeadAttention(4, 4, n_heads=2).double()
    Wq = torch.zeros(4, 4, dtype=torch.float64)  # math convention: Q = X Wq, rows = inputs
    Wk = torch.zeros(4, 4, dtype=torch.float64)
    Wv = torch.zeros(4, 4, dtype=torch.float64)
    Wq[3, 0] = Wq[3, 2] = sharpness  # c asks head 0 (column 0) and head 1 (column 2)
    Wk[0, 0] = 1.0  # a answers head 0
    Wk[1, 2] = 1.0  # b answers head 1
    Wv[0, 0] = Wv[0, 2] = 1.0  # value features 0, 2: "is a"
    Wv[1, 1] = Wv[1, 3] = 1.0  # value features 1, 3: "is b"
    with torch.no_grad():  # nn.Linear stores the transpose
        m.query.weight.copy_(Wq.T)
        m.key.weight.copy_(Wk.T)
        m.value.weight.copy_(Wv.T)
        m.out.weight.copy_(torch.eye(4, dtype=torch.float64))
    return m


def one_head_weights(m: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """The same Q, K, V used as one head of width d: the heads' scores add up in one row."""
    single = MultiHeadAttention(4, 4, n_heads=1).double()
    single.load_state_dict(m.state_dict())
    _, w = single(x, return_weights=True)  # (B, 1, T, T)
    return w[0, 0]


def draw_two_heads(outdir: Path) -> Path:
    m = two_heads_example()
    x = torch.eye(4, dtype=torch.float64)[None]  # (1, T, d): one-hot a, b, x, c
    y, w = m(x, return_weights=True)  # (1, T, d), (1, 2, T, T)
    w1 = one_head_weights(m, x)
    fig, axes = plt.subplots(1, 3, figsize=(11.5, 3.9))
    panels = [(w[0, 0], "head 0 (features 0-1)"), (w[0, 1], "head 1 (features 2-3)"),
              (w1, "one head of width 4, same weights")]
    for ax, (weights, title) in zip(axes, panels):
        plot_attention(weights, TOKENS, ax=ax, title=title)
    y1 = (w1 @ x[0] @ m.value.weight.T)[3]
    fig.suptitle("Query c: two heads read a and b separately, output "
                 f"{[round(v, 2) for v in y[0, 3].tolist()]};  one head must average them, "
                 f"output {[round(v, 2) for v in y1.tolist()]}", fontsize=10, y=1.02)
    fig.tight_layout()
    return save(fig, outdir, "mha_two_heads.png")


def draw_split(outdir: Path) -> Path:
    T, d, h = 6, 8, 4
    torch.manual_seed(3)
    m = MultiHeadAttention(d, T, h)
    with torch.no_grad():  # larger weights give sharper, more distinct heads to look at
        for lin in (m.query, m.key):
            lin.weight.mul_(4)
    _, w = m(torch.randn(1, T, d), return_weights=True)  # (1, h, T, T)
    fig = plt.figure(figsize=(11, 3.1))
    grid = fig.add_gridspec(2, h + 2, width_ratios=[1.6] + [1] * h + [1.6], hspace=0.5)
    labels = ((0, "Q, K, V  (T, d) each,\ncut into heads"),
              (h + 1, "concat heads  (T, d)\nthen $W_o$"))
    for col, label in labels:
        ax = fig.add_subplot(grid[:, col])
        for i in range(h):
            ax.add_patch(Rectangle((i * d // h, 0), d // h, T, fc=COLOURS[i], ec="white",
                                   alpha=0.85))
            ax.text(i * d // h + d / h / 2, T / 2, f"head {i}", rotation=90, ha="center",
                    va="center", color="white", fontsize=9)
        ax.set_xlim(0, d)
        ax.set_ylim(T, 0)
        ax.set_xticks([0, d // h, d], ["0", r"$d_h$", "d"])
        ax.set_yticks([])
        ax.set_title(label, fontsize=10)
        ax.set_aspect("equal")
    for i in range(h):
        ax = fig.add_subplot(grid[:, 1 + i])
        ax.imshow(w[0, i].detach(), cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_edgecolor(COLOURS[i])
            spine.set_linewidth(3)
        ax.set_title(f"head {i}: softmax(\n" + rf"$Q^{{({i})}} K^{{({i})\top}} / \sqrt{{d_h}}$)",
                     fontsize=9)
    fig.suptitle(f"d = {d} split into h = {h} heads of width d_h = {d // h}; each head has its "
                 "own (T, T) weights", fontsize=11, y=0.9)
    return save(fig, outdir, "mha_split.png")


def main(outdir: Path) -> Path:
    draw_split(outdir)
    return draw_two_heads(outdir)
