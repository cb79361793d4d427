"""Chapter 7 figures: outputs inside the convex hull of the values, and permutation equivariance."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from attnbook import Attention  # noqa: E402
from attnbook.lab.plotting import plot_attention  # noqa: E402
from attnbook.scores import attention_scores, scale_scores  # noqa: E402
from attnbook.softmax import stable_softmax, temperature_softmax  # noqa: E402
from figures import save  # noqa: E402

TOKENS = ["cat", "sat", "on", "the", "mat"]
VALUES = [[2.0, 0.2], [0.6, 1.8], [-1.2, 0.9], [0.9, 0.7], [-0.5, -1.3]]  # (T, 2); "the" inside


def _cross(o, a, b) -> float:
    """z-component of (a - o) x (b - o): positive when o -> a -> b turns left."""
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def convex_hull(points: np.ndarray) -> np.ndarray:
    """Vertices of the convex hull of 2-D points, counter-clockwise (Andrew's monotone chain)."""
    pts = sorted(map(tuple, points))

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and _cross(out[-2], out[-1], p) <= 0:
                out.pop()
            out.append(p)
        return out[:-1]

    return np.array(half(pts) + half(pts[::-1]))


def _draw_values(ax, v: np.ndarray) -> None:
    hull = convex_hull(v)
    ax.fill(hull[:, 0], hull[:, 1], color="tab:blue", alpha=0.12, lw=0)
    ax.plot(*np.vstack([hull, hull[:1]]).T, color="tab:blue", lw=1)
    ax.scatter(v[:, 0], v[:, 1], s=60, color="tab:blue", zorder=3)
    for (a, b), t in zip(v, TOKENS):
        ax.annotate(f"$v$ {t!r}", (a, b), textcoords="offset points", xytext=(6, 5), fontsize=9)
    ax.set_aspect("equal")
    ax.set_xlim(-1.8, 2.8)
    ax.set_ylim(-1.8, 2.4)


def hull_figure(outdir: Path) -> Path:
    v = torch.tensor(VALUES, dtype=torch.float64)  # (T, 2)
    gen = torch.Generator().manual_seed(0)
    weights = stable_softmax(2.0 * torch.randn(400, len(TOKENS), generator=gen,
                                               dtype=torch.float64))  # (400, T)
    y = weights @ v  # (400, 2): one output per random row of weights
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.4))
    _draw_values(ax1, v.numpy())
    ax1.scatter(y[:, 0], y[:, 1], s=6, color="tab:orange", alpha=0.6, zorder=2,
                label="outputs a V for 400 random rows a")
    ax1.legend(loc="lower right", fontsize=8)
    ax1.set_title("Every output lies in the convex hull of the values", fontsize=10)

    _draw_values(ax2, v.numpy())
    s = torch.tensor([3.0, 1.0, 0.5, 0.0, 1.5], dtype=torch.float64)  # one query's scores
    temps = np.geomspace(0.03, 100, 200)
    path = np.array([(temperature_softmax(s, t) @ v).numpy() for t in temps])  # (200, 2)
    ax2.plot(path[:, 0], path[:, 1], color="tab:orange", lw=2, zorder=2)
    for tau, text, off in ((0.03, "τ → 0: look up the value\nof the best key", (-10, -32)),
                           (1.0, "τ = 1", (8, -4)),
                           (100, "τ → ∞: the mean\nof all values", (-30, -34))):
        point = (temperature_softmax(s, tau) @ v).numpy()
        ax2.scatter(*point, s=40, color="tab:orange", edgecolor="black", zorder=4)
        ax2.annotate(text, point, textcoords="offset points", xytext=off, fontsize=8)
    ax2.set_title("One query as its temperature τ goes from 0.03 to 100", fontsize=10)
    fig.tight_layout()
    return save(fig, outdir, "wsum_hull.png")


def _unmasked_weights(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    q, k = attn.query(x), attn.key(x)  # (T, d) each
    return stable_softmax(scale_scores(attention_scores(q, k), x.size(-1)))  # (T, T)


def equivariance_figure(outdir: Path) -> Path:
    torch.manual_seed(1)
    tokens = ["the", "cat", "sat", "on"]
    perm = [2, 0, 3, 1]
    x = 2.5 * torch.randn(len(tokens), 4)  # (T, d); larger inputs give sharper weights
    attn = Attention(d_model=4, context_length=8)
    with torch.no_grad():
        panels = [(_unmasked_weights(attn, x), tokens, "no mask: x"),
                  (_unmasked_weights(attn, x[perm]), [tokens[i] for i in perm],
                   "no mask: x permuted (same numbers, moved)"),
                  (attn(x[None], return_weights=True)[1][0], tokens, "causal: x"),
                  (attn(x[perm][None], return_weights=True)[1][0], [tokens[i] for i in perm],
                   "causal: x permuted (new numbers)")]
    fig, axes = plt.subplots(2, 2, figsize=(7.6, 7))
    for ax, (w, labels, title) in zip(axes.flat, panels):
        plot_attention(w, labels, ax=ax, title=title)
    fig.tight_layout()
    return save(fig, outdir, "wsum_equivariance.png")


def main(outdir: Path) -> Path:
    equivariance_figure(outdir)
    return hull_figure(outdir)
