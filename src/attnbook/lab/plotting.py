"""Figures the book and the labs share: attention heatmaps drawn the same way everywhere."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def plot_attention(weights: torch.Tensor, tokens: Sequence[str] | None = None, ax=None,
                   title: str | None = None, annotate: bool = True, cmap: str = "Blues"):
    """Heatmap of one attention matrix: rows are queries, columns are keys.

    Args:
        weights: the weights of one sequence.
        tokens: labels for the rows and columns.
        ax: matplotlib axes to draw on (a new figure if None).
        title: axes title.
        annotate: write each weight in its cell (for small T).
        cmap: matplotlib colour map.

    Returns:
        The matplotlib axes.

    Shape:
        weights: (T, T)
    """
    import matplotlib.pyplot as plt

    w = weights.detach().float().cpu().numpy()
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * w.shape[1] + 1.8, 0.5 * w.shape[0] + 1.2))
    vmax = max(1.0, float(w.max())) if w.size else 1.0
    ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax)
    T_q, T_k = w.shape
    labels_q = list(tokens)[:T_q] if tokens is not None else [str(i) for i in range(T_q)]
    labels_k = list(tokens)[:T_k] if tokens is not None else [str(j) for j in range(T_k)]
    ax.set_xticks(range(T_k), labels_k, rotation=45, ha="right")
    ax.set_yticks(range(T_q), labels_q)
    ax.set_xlabel("key j (attended to)")
    ax.set_ylabel("query i (attending)")
    if annotate and T_q * T_k <= 144:
        for i in range(T_q):
            for j in range(T_k):
                colour = "white" if w[i, j] > 0.6 * vmax else "black"
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color=colour)
    if title:
        ax.set_title(title)
    return ax
