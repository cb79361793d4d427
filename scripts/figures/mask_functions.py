"""Masks as functions, drawn: five masks of chapter 21 and the kinds of their 16 x 16 tiles."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook.lab.mask_widgets import draw_block_mask, legend_handles  # noqa: E402
from attnbook.masks import (  # noqa: E402
    block_mask,
    causal_mod,
    document_mod,
    materialize,
    prefix_mod,
    sink_mod,
    sliding_window_mod,
)
from figures import save  # noqa: E402


def masks(outdir: Path) -> Path:
    """Causal, window, prefix-LM, document and sinks for T = 64 in tiles of 16."""
    T, b = 64, 16
    doc = torch.repeat_interleave(torch.arange(4), torch.tensor([10, 22, 7, 25]))
    mods = {"causal": causal_mod, "sliding window W=16": sliding_window_mod(16),
            "prefix-LM n=24": prefix_mod(24), "document (4 documents)": document_mod(doc),
            "4 sinks + window W=16": sink_mod(4, 16)}
    fig, axes = plt.subplots(1, len(mods), figsize=(15, 3.6))
    for ax, (name, mod) in zip(axes, mods.items()):
        bm = block_mask(mod, T, T, b, b)
        c = bm.counts
        draw_block_mask(ax, materialize(mod, T, T)[0, 0], bm.kinds[0, 0], b, b,
                        title=f"{name}\n{c['empty']} empty, {c['partial']} partial, "
                              f"{c['full']} full")
        ax.set_xticks(range(0, T, b))
        ax.set_yticks(range(0, T, b))
        if ax is not axes[0]:
            ax.set_ylabel("")
    fig.legend(handles=legend_handles(), loc="lower center", ncol=4, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.06))
    return save(fig, outdir, "maskfn_masks.png")


def main(outdir: Path) -> Path:
    return masks(outdir)
