"""Chapter 5 figures: right vs left padding and their blocked matrices; the seed's NaN rows.

Writes pad_blocked.png and pad_nan.png under ``outdir``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402

from attnbook import Attention, causal_mask  # noqa: E402
from attnbook.lab.plotting import plot_attention  # noqa: E402
from attnbook.seed import Attention as SeedAttention  # noqa: E402
from figures import save  # noqa: E402

WORDS = ["the", "cat", "sat"]
T = 5
PAD = "<pad>"


def padded(side: str) -> tuple[list[str], torch.Tensor]:
    """The three words padded to T tokens on one side, and the padding mask (True = real)."""
    n = T - len(WORDS)
    tokens = WORDS + [PAD] * n if side == "right" else [PAD] * n + WORDS
    return tokens, torch.tensor([t != PAD for t in tokens])


CAUSAL, PADDING = "#4d4d4d", "#f4a261"  # dark: the future; orange: a padding key
HATCH_EDGE = "#7a3b0a"


def _draw_blocked(ax, tokens, padding_mask: torch.Tensor, title: str) -> None:
    """0 = allowed, 1 = blocked by the causal mask only, 2 = by padding only, 3 = by both.

    Padding blocks a key's whole column, so the hatching runs down every padding column, over
    the dark causal cells too, and the column is outlined: a cell blocked twice stays visible.
    """
    causal = causal_mask(T).numpy()
    pad_key = (~padding_mask[None, :].expand(T, T)).numpy()
    code = causal.astype(int) + 2 * pad_key.astype(int)
    cmap = ListedColormap(["#e8f0fa", CAUSAL, PADDING, CAUSAL])
    ax.imshow(code, cmap=cmap, vmin=0, vmax=3)
    # Not by colour alone: padding keys are hatched, future keys crossed.
    for i, j in zip(*np.nonzero(pad_key)):
        edge = PADDING if causal[i, j] else HATCH_EDGE  # orange hatching shows on the dark cells
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="\\\\",
                                   edgecolor=edge, lw=0))
    for i, j in zip(*np.nonzero(causal)):
        ax.text(j, i, "×", ha="center", va="center", color="white", fontsize=9)
    for j in np.nonzero(pad_key[0])[0]:  # the whole column of a padding key
        ax.add_patch(plt.Rectangle((j - 0.5, -0.5), 1, T, fill=False, edgecolor="#c2410c",
                                   lw=2.2))
    for i in range(T):
        if (code[i] > 0).all():
            ax.text(T - 0.45, i, " empty row", va="center", ha="left", color="tab:red",
                    fontsize=9, fontweight="bold")
    ax.set_xticks(range(T), tokens, rotation=45, ha="right")
    ax.set_yticks(range(T), tokens)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=10)


def blocked_figure(outdir: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(9.2, 4.2))
    for ax, side in zip(axes, ["right", "left"]):
        tokens, pm = padded(side)
        _draw_blocked(ax, tokens, pm, f"{side} padding")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor="#e8f0fa"),
               plt.Rectangle((0, 0), 1, 1, facecolor=CAUSAL),
               plt.Rectangle((0, 0), 1, 1, facecolor=PADDING, edgecolor=HATCH_EDGE,
                             hatch="\\\\"),
               plt.Rectangle((0, 0), 1, 1, facecolor=CAUSAL, edgecolor=PADDING,
                             hatch="\\\\")]
    fig.legend(handles, ["may attend", "blocked (×): future (j > i)",
                         "blocked (hatched): key is padding, its whole column (outlined)",
                         "blocked by both (×, hatched on dark)"],
               loc="lower center", ncol=2, frameon=False, fontsize=9)
    fig.tight_layout(rect=(0, 0.11, 1, 1))
    return save(fig, outdir, "pad_blocked.png")


def _draw_weights_with_nan(ax, w: torch.Tensor, tokens, title: str) -> None:
    """Attention weights; NaN cells drawn red and labelled."""
    a = w.detach().cpu().numpy()
    nan = np.isnan(a)
    plot_attention(torch.from_numpy(np.where(nan, 0.0, a)), tokens, ax=ax, annotate=False)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            if nan[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color="#d62728"))
                ax.text(j, i, "NaN", ha="center", va="center", color="white", fontsize=8)
            else:
                colour = "white" if a[i, j] > 0.6 else "black"
                ax.text(j, i, f"{a[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color=colour)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=10)


def nan_figure(outdir: Path) -> Path:
    torch.manual_seed(0)
    tokens, pm = padded("left")
    x = torch.randn(1, T, 8)  # (B, T, d)
    original = SeedAttention(8, 8)
    ours = Attention(8, 8)
    ours.load_state_dict(original.state_dict())  # the same weights
    with torch.no_grad():
        # The original module returns no weights: recompute them exactly as its forward does.
        q, k = original.query(x), original.key(x)
        s = (q @ k.transpose(-2, -1)) / 8**0.5
        s = s.masked_fill(original.mask[:T, :T], float("-inf"))
        s = s.masked_fill(~pm[None, None, :], float("-inf"))
        w_seed = torch.softmax(s, dim=-1)[0]
        _, w_ours = ours(x, pm[None], return_weights=True)
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.2))
    _draw_weights_with_nan(axes[0], w_seed, tokens,
                           "the original module: torch.softmax of a row of −∞")
    _draw_weights_with_nan(axes[1], w_ours[0], tokens, "attnbook: masked_softmax, empty row = 0")
    fig.tight_layout()
    return save(fig, outdir, "pad_nan.png")


def main(outdir: Path) -> Path:
    """Draw the chapter's two figures; return the first."""
    first = blocked_figure(outdir)
    nan_figure(outdir)
    return first
