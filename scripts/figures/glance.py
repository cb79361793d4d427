"""The attention weights of attnbook.Attention on the book's tiny six-token example."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook import Attention  # noqa: E402
from attnbook.plotting import plot_attention  # noqa: E402
from figures import save  # noqa: E402

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def main(outdir: Path) -> Path:
    torch.manual_seed(0)
    x = torch.randn(1, len(TOKENS), 8)  # (B, T, d)
    attn = Attention(d_model=8, context_length=16)
    _, w = attn(x, return_weights=True)  # (B, T, T)
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    plot_attention(w[0], TOKENS, ax=ax, title="Attention weights (untrained module)")
    return save(fig, outdir, "glance_weights.png")
