"""Chapter 1 figures: the tiny example's X, Q, K, V, and how nn.Linear stores its matrix."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from torch import nn  # noqa: E402

from attnbook import Attention  # noqa: E402
from figures import save  # noqa: E402

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def tiny_example(d: int = 4):
    """Lab 1's example, draw for draw: a toy embedding table, then an untrained module (seed 0)."""
    torch.manual_seed(0)
    vocab = sorted(set(TOKENS))
    embedding = torch.randn(len(vocab), d).double()  # (vocab, d), float64 as in the lab
    ids = torch.tensor([vocab.index(t) for t in TOKENS])
    x = embedding[ids].unsqueeze(0)  # (B, T, d) = (1, 6, d)
    attn = Attention(d_model=d, context_length=8).double()
    return x, attn


def _matrix(ax, m, title, rows=None, cols=None, vmax=None):
    m = m.detach().numpy()
    vmax = vmax or float(abs(m).max())
    ax.imshow(m, cmap="RdBu_r", vmin=-vmax, vmax=vmax)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            colour = "white" if abs(m[i, j]) > 0.6 * vmax else "black"
            ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7.5,
                    color=colour)
    ax.set_title(title, fontsize=10)
    ax.set_xticks(range(m.shape[1]), cols if cols is not None else range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]), rows if rows is not None else range(m.shape[0]))
    ax.tick_params(length=0, labelsize=8)


def qkv(outdir: Path) -> Path:
    x, attn = tiny_example()
    with torch.no_grad():
        mats = [x[0], attn.query(x)[0], attn.key(x)[0], attn.value(x)[0]]  # 4 x (T, d)
    titles = [r"$X$  (T, d)", r"$Q = XW_q$", r"$K = XW_k$", r"$V = XW_v$"]
    vmax = max(float(m.abs().max()) for m in mats)
    fig, axes = plt.subplots(1, 4, figsize=(9.6, 3.3))
    for n, (ax, m, title) in enumerate(zip(axes, mats, titles)):
        _matrix(ax, m, title, rows=TOKENS if n == 0 else [""] * len(TOKENS), vmax=vmax)
        ax.set_xlabel("feature")
        for row in (0, 4):  # the two "the": same input row, so the same q, k and v
            ax.add_patch(Rectangle((-0.5, row - 0.5), m.shape[1], 1, fill=False,
                                   ec="#e07b00", lw=2))
    fig.suptitle("Step 1 works on each token alone: both \"the\" rows (boxed) come out equal",
                 fontsize=10)
    fig.tight_layout()
    return save(fig, outdir, "proj_qkv.png")


def linear_layout(outdir: Path) -> Path:
    torch.manual_seed(1)
    layer = nn.Linear(4, 3, bias=False)  # in = 4 features, out = 3 features
    w = layer.weight.detach()  # (out, in) = (3, 4)
    fig, axes = plt.subplots(1, 2, figsize=(6.4, 2.9), gridspec_kw={"width_ratios": [4, 3]})
    vmax = float(w.abs().max())
    _matrix(axes[0], w, "layer.weight: (out, in) = (3, 4)", rows=["out 0", "out 1", "out 2"],
            cols=["in 0", "in 1", "in 2", "in 3"], vmax=vmax)
    _matrix(axes[1], w.T, r"$W$ = weight.T: (in, out) = (4, 3)",
            rows=["in 0", "in 1", "in 2", "in 3"], cols=["out 0", "out 1", "out 2"], vmax=vmax)
    fig.suptitle(r"layer(x) = x @ weight.T = $xW$:   (1, 4) @ (4, 3) $\to$ (1, 3)", fontsize=10)
    fig.tight_layout()
    return save(fig, outdir, "proj_linear_layout.png")


def main(outdir: Path) -> Path:
    linear_layout(outdir)
    return qkv(outdir)
