"""The attention weights of attnbook.Attention on the book's six-token example (Lab 0's)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook import Attention  # noqa: E402
from attnbook.lab.plotting import plot_attention  # noqa: E402
from figures import save  # noqa: E402

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def tiny_example(d: int = 8) -> tuple[torch.Tensor, Attention]:
    """Lab 0's example, draw for draw: a toy embedding table, then an untrained module (seed 0)."""
    torch.manual_seed(0)
    vocab = sorted(set(TOKENS))
    embedding = torch.randn(len(vocab), d).double()  # (vocab, d)
    ids = torch.tensor([vocab.index(t) for t in TOKENS])
    x = embedding[ids].unsqueeze(0)  # (B, T, d) = (1, 6, 8)
    attn = Attention(d_model=d, context_length=16).double()
    return x, attn


def weights() -> torch.Tensor:
    """The attention weights of the example, (T, T)."""
    x, attn = tiny_example()
    with torch.no_grad():
        _, w = attn(x, return_weights=True)  # (B, T, T)
    return w[0]


def main(outdir: Path) -> Path:
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    plot_attention(weights(), TOKENS, ax=ax, title="Attention weights (untrained module)")
    return save(fig, outdir, "glance_weights.png")
