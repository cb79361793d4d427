"""Chapter 4 figures: the causal buffer and its slice, masking step by step, and causality.

Writes causal_buffer.png, causal_steps.png and causal_jacobian.png under ``outdir``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attnbook import Attention, attention_scores, scale_scores  # noqa: E402
from attnbook.lab.plotting import plot_attention  # noqa: E402
from figures import save  # noqa: E402
from figures.glance import tiny_example  # noqa: E402  (chapter 0's running example, Lab 4's too)

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]
BLOCKED, ALLOWED = "#4d4d4d", "#e8f0fa"


def _draw_mask(ax, mask: torch.Tensor, labels=None, title: str = "") -> None:
    """Blocked cells dark with a cross, allowed cells light, the diagonal outlined."""
    m = mask.cpu().numpy()
    n = m.shape[0]
    rgb = np.where(m[..., None], matplotlib.colors.to_rgb(BLOCKED),
                   matplotlib.colors.to_rgb(ALLOWED))
    ax.imshow(rgb)
    for i in range(n):
        for j in range(n):
            if m[i, j]:
                ax.text(j, i, "×", ha="center", va="center", color="white", fontsize=9)
        ax.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, ec="tab:orange", lw=1.6))
    labels = labels or [str(k) for k in range(n)]
    ax.set_xticks(range(n), labels, rotation=45, ha="right")
    ax.set_yticks(range(n), labels)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=10)


def _draw_scores(ax, s: torch.Tensor, labels, title: str) -> None:
    """Scores as a heatmap; -inf cells grey and labelled."""
    a = s.detach().cpu().numpy()
    finite = np.isfinite(a)
    cmap = plt.get_cmap("RdBu_r").copy()
    cmap.set_bad("#bdbdbd")
    lim = np.abs(a[finite]).max()
    ax.imshow(np.ma.masked_where(~finite, a), cmap=cmap, vmin=-lim, vmax=lim)
    n = a.shape[0]
    for i in range(n):
        for j in range(n):
            txt = f"{a[i, j]:.1f}" if finite[i, j] else "−∞"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7.5)
    ax.set_xticks(range(n), labels, rotation=45, ha="right")
    ax.set_yticks(range(n), labels)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=10)


def buffer_figure(outdir: Path) -> Path:
    attn = Attention(d_model=8, context_length=8)
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 4.0), gridspec_kw={"width_ratios": [8, 5]})
    _draw_mask(axes[0], attn.mask, title="the buffer: context_length = 8")
    axes[0].add_patch(Rectangle((-0.5, -0.5), 5, 5, fill=False, ec="tab:red", lw=2.5, ls="--"))
    axes[0].text(2.0, 5.15, "mask[:5, :5]", color="tab:red", ha="center", va="top", fontsize=10)
    _draw_mask(axes[1], attn.mask[:5, :5], title="what a T = 5 forward uses")
    fig.tight_layout()
    return save(fig, outdir, "causal_buffer.png")


def steps_figure(outdir: Path) -> Path:
    x, attn = tiny_example()  # (B, T, d) = (1, 6, 8), float64: the example Labs 0 and 4 use
    T, d = x.shape[1], x.shape[2]
    with torch.no_grad():
        s = scale_scores(attention_scores(attn.query(x), attn.key(x)), d)[0]  # (T, T)
        masked = s.masked_fill(attn.mask[:T, :T], float("-inf"))
        w = torch.softmax(masked, dim=-1)
    fig, axes = plt.subplots(1, 3, figsize=(13.2, 4.3))
    _draw_scores(axes[0], s, TOKENS, "(a) scaled scores S")
    _draw_scores(axes[1], masked, TOKENS, "(b) future keys filled with −∞")
    plot_attention(w, TOKENS, ax=axes[2])
    axes[2].set_title("(c) softmax: weights, future exactly 0", fontsize=10)
    axes[2].set_xlabel("key j")
    axes[2].set_ylabel("query i")
    fig.tight_layout()
    return save(fig, outdir, "causal_steps.png")


def jacobian_figure(outdir: Path) -> Path:
    x, attn = tiny_example()  # the running example, as Lab 4 computes its Jacobian
    T = x.shape[1]
    J = torch.autograd.functional.jacobian(lambda z: attn(z)[0], x)[:, :, 0]  # (T, d, T, d)
    norms = J.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T): size of dy_i/dx_j
    n = norms.numpy()
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    ax.imshow(np.ma.masked_where(n == 0, n), cmap="Purples", vmin=0)
    for i in range(T):
        for j in range(T):
            colour = "white" if n[i, j] > 0.6 * n.max() else "black"
            ax.text(j, i, "0" if n[i, j] == 0 else f"{n[i, j]:.2f}", ha="center", va="center",
                    fontsize=8, color=colour)
    ax.set_xticks(range(T), [f"x{j}" for j in range(T)])
    ax.set_yticks(range(T), [f"y{i}" for i in range(T)])
    ax.set_xlabel("input token j")
    ax.set_ylabel("output token i")
    ax.set_title("‖∂y_i / ∂x_j‖: exactly 0 for j > i", fontsize=10)
    return save(fig, outdir, "causal_jacobian.png")


def main(outdir: Path) -> Path:
    """Draw the chapter's three figures; return the first."""
    first = buffer_figure(outdir)
    steps_figure(outdir)
    jacobian_figure(outdir)
    return first
