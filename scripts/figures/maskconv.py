"""Appendix: one sequence's masks in each convention, side by side, made by our converters."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook.masks import (  # noqa: E402
    blocked_positions,
    causal_mask,
    to_additive_mask,
    to_key_padding_mask,
    to_mha_attn_mask,
    to_sdpa_mask,
)
from figures import save  # noqa: E402

TOKENS = ["the", "cat", "sat", "<pad>"]


def _grid(ax, values, labels, title, rows=TOKENS):
    """Draw a small matrix with its entries written in, dark where attention is blocked."""
    shade = [[1.0 if blocked else 0.0 for blocked, _ in row] for row in values]
    ax.imshow(shade, cmap="Greys", vmin=0, vmax=1.6)
    for i, row in enumerate(values):
        for j, (blocked, text) in enumerate(row):
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="white" if blocked else "black")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_title(title, fontsize=9)


def main(outdir: Path) -> Path:
    T = len(TOKENS)
    pad = torch.tensor([[t != "<pad>" for t in TOKENS]])  # (1, T), True = real
    causal = causal_mask(T)  # (T, T), True = blocked
    blocked = blocked_positions(causal, pad)[0]  # (T, T), True = blocked
    allowed = to_sdpa_mask(blocked)  # True = may attend
    additive = to_additive_mask(blocked)  # 0 / -inf
    mha_attn = to_mha_attn_mask(causal)  # True = not allowed
    kpm = to_key_padding_mask(pad)[0]  # (T,), True = ignore

    def cells(mask, blocked_where, fmt):
        return [[(bool(blocked_where[i, j]), fmt(mask[i, j])) for j in range(T)]
                for i in range(T)]

    tf = lambda v: "T" if bool(v) else "F"  # noqa: E731
    fig, axes = plt.subplots(2, 3, figsize=(10.5, 7.6), gridspec_kw={"hspace": 0.55})
    axes = axes.flat
    _grid(axes[0], cells(blocked, blocked, tf), TOKENS,
          "ours: blocked_positions\nTrue = blocked")
    _grid(axes[1], cells(allowed, blocked, tf), TOKENS,
          "SDPA bool attn_mask\nto_sdpa_mask: True = may attend")
    _grid(axes[2], cells(additive, blocked, lambda v: "0" if v == 0 else "-∞"), TOKENS,
          "float (additive) mask\nto_additive_mask: 0 / -∞")
    _grid(axes[3], cells(mha_attn, causal, tf), TOKENS,
          "MHA attn_mask (the causal part)\nto_mha_attn_mask: True = not allowed")
    kpm_row = [[(bool(kpm[j]), tf(kpm[j])) for j in range(T)]]
    _grid(axes[4], kpm_row, TOKENS,
          "MHA key_padding_mask (the padding)\nto_key_padding_mask: True = ignore",
          rows=["seq 0"])
    merged = mha_attn | kpm[None, :]  # what MHA blocks in the end: the same cells as ours
    _grid(axes[5], cells(merged, merged, tf), TOKENS,
          "what MHA blocks: attn_mask | key_padding_mask\n(the same cells as ours)")
    for ax in axes:
        ax.set_xlabel("key j", fontsize=8)
    for ax in (axes[0], axes[3]):
        ax.set_ylabel("query i", fontsize=8)
    fig.suptitle("One sequence, \"the cat sat <pad>\": dark = the query may not see the key",
                 fontsize=11)
    return save(fig, outdir, "maskconv_masks.png", dpi=120)
