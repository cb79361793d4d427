"""Ring attention, drawn: which shard each rank holds per step, and who computes which scores."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from attnbook.lab.ring_trace import trace_ring  # noqa: E402
from attnbook.ring import chunk_ids, visible_scores  # noqa: E402
from figures import save  # noqa: E402

COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red"]


def ring_steps(outdir: Path, world: int = 4) -> Path:
    """A grid of ranks by steps: the key/value shard each rank holds, (r - t) mod P."""
    fig, ax = plt.subplots(figsize=(5.4, 2.8))
    for t in range(world):
        for r in range(world):
            src = (r - t) % world
            ax.add_patch(plt.Rectangle((t, world - 1 - r), 0.92, 0.86, color=COLOURS[src],
                                       alpha=0.75))
            ax.text(t + 0.46, world - 1 - r + 0.43, f"K, V of {src}", ha="center",
                    va="center", fontsize=8, color="white")
            if t < world - 1:  # the shard moves to the next rank (wrapping around)
                ax.annotate("", xy=(t + 1.0, world - 1 - (r + 1) % world + 0.43),
                            xytext=(t + 0.92, world - 1 - r + 0.43),
                            arrowprops=dict(arrowstyle="->", color="grey", lw=0.6,
                                            alpha=0.0 if r == world - 1 else 0.8))
    ax.set_xlim(-0.05, world)
    ax.set_ylim(-0.1, world)
    ax.set_xticks([t + 0.46 for t in range(world)], [f"step {t}" for t in range(world)])
    ax.set_yticks([world - 1 - r + 0.43 for r in range(world)],
                  [f"rank {r}\n(Q of {r})" for r in range(world)])
    ax.tick_params(length=0)
    for side in ("left", "bottom", "top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"P = {world}: each step, every rank passes its K, V shard to the next rank",
                 fontsize=9)
    return save(fig, outdir, "ring_steps.png")


def ring_layouts(outdir: Path, world: int = 4, T: int = 64) -> Path:
    """The causal score matrix coloured by the rank that computes each row, for both layouts."""
    c = T // (2 * world)
    fig, axes = plt.subplots(1, 3, figsize=(9.6, 3.2),
                             gridspec_kw={"width_ratios": [1, 1, 1.1], "wspace": 0.5})
    for ax, layout in zip(axes[:2], ("contiguous", "zigzag")):
        owner = np.zeros(T, dtype=int)
        for r in range(world):
            for chunk in chunk_ids(r, world, layout):
                owner[chunk * c:(chunk + 1) * c] = r
        img = np.ones((T, T, 3))
        for i in range(T):
            img[i, : i + 1] = matplotlib.colors.to_rgb(COLOURS[owner[i]])
        ax.imshow(img, interpolation="nearest")
        for k in range(0, T + 1, c):
            ax.axhline(k - 0.5, color="white", lw=0.5)
        # Each chunk names its rank too, so that the layout does not rest on colour alone.
        for k in range(0, T, c):
            ax.text(T + 0.5, k + (c - 1) / 2, f"r{owner[k]}", fontsize=7, va="center",
                    ha="left")
        ax.set_title(f"{layout}: rank of each query row", fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        ax.set_xticks([])
        ax.set_yticks([])
    ax = axes[2]
    for n, layout in enumerate(("contiguous", "zigzag")):
        work = visible_scores(T, world, layout)
        ax.bar([r + 0.4 * n for r in range(world)], work, width=0.4,
               color=COLOURS[:world], alpha=1.0 if n == 0 else 0.55,
               hatch=None if n == 0 else "//", edgecolor="black", lw=0.5,
               label=layout)
    ax.set_xticks([r + 0.2 for r in range(world)], [f"rank {r}" for r in range(world)])
    ax.set_ylabel("scores computed")
    ax.set_title(f"work per rank (T = {T}, P = {world})", fontsize=9)
    ax.legend(fontsize=8)
    return save(fig, outdir, "ring_layouts.png")


def ring_backward(outdir: Path, world: int = 4, layout: str = "contiguous") -> Path:
    """The backward's gradient flow, from the ring's own record: per step and rank, whose dK, dV
    sums the rank adds its share to, and where they go next (the last pass: home)."""
    import torch

    g = torch.Generator().manual_seed(0)
    T = 4 * world
    trace = trace_ring(*(torch.randn(1, T, 2, dtype=torch.float64, generator=g)
                         for _ in range(4)), world=world, layout=layout, block_size=4)
    fig, ax = plt.subplots(figsize=(7.4, 3.1))
    w, h = 0.86, 0.8
    for t in range(world):
        for r in range(world):
            src = trace.source(t, r)
            shares = len(trace.pairs("backward", t, r))
            y = world - 1 - r
            # An idle rank (nothing visible in the shard it holds) adds nothing: pale, dashed.
            ax.add_patch(plt.Rectangle((t, y), w, h, facecolor=COLOURS[src],
                                       alpha=0.75 if shares else 0.18, edgecolor="black",
                                       lw=0.4 if shares else 0.8,
                                       linestyle="-" if shares else "--"))
            adds = f"+ rank {r}'s share" if shares else f"+ 0 (rank {r} idle)"
            ax.text(t + w / 2, y + h / 2, f"dK, dV of {src}\n{adds}", ha="center",
                    va="center", fontsize=7, style="normal" if shares else "italic")
            to = (r + 1) % world  # each rank passes the sums to the next one
            if t < world - 1:
                wrap = to == 0  # from the last rank around to rank 0
                ax.annotate("", xy=(t + 1.0, world - 1 - to + (0.75 * h if wrap else h / 2)),
                            xytext=(t + w, y + (0.25 * h if wrap else h / 2)),
                            arrowprops=dict(arrowstyle="->", color="0.55" if wrap else "0.3",
                                            lw=0.7, linestyle=":" if wrap else "-"))
    for r in range(world):  # after the last step the sums arrive home
        y = world - 1 - r
        ax.add_patch(plt.Rectangle((world + 0.1, y), 0.8, h, facecolor="white",
                                   edgecolor=COLOURS[r], lw=1.6))
        ax.text(world + 0.5, y + h / 2, f"home:\ndK, dV of {r}", ha="center", va="center",
                fontsize=7)
        src = trace.source(world - 1, (r - 1) % world)
        assert src == r  # the record says rank r - 1 held shard r at the last step
        ax.annotate("", xy=(world + 0.1, y + h / 2),
                    xytext=(world - 1 + w, world - 1 - (r - 1) % world + h / 2),
                    arrowprops=dict(arrowstyle="->", color="black", lw=1.0))
    ax.set_xlim(-0.05, world + 1)
    ax.set_ylim(-0.1, world)
    ax.set_xticks([t + w / 2 for t in range(world)] + [world + 0.5],
                  [f"step {t}" for t in range(world)] + ["after"])
    ax.set_yticks([world - 1 - r + h / 2 for r in range(world)],
                  [f"rank {r}" for r in range(world)])
    ax.tick_params(length=0)
    for side in ("left", "bottom", "top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"Backward, P = {world}, {layout}: dK, dV travel with their shard to rank r + 1 "
                 "(dotted: around the ring) and go home", fontsize=9)
    return save(fig, outdir, "ring_backward.png")


def main(outdir: Path) -> Path:
    ring_steps(outdir)
    ring_backward(outdir)
    return ring_layouts(outdir)
