"""Lab helpers for chapter 21 (masks as functions): drawing a mask with its block mask, and
counting the work that padding and packing cost. They serve the lab's widget and the book's
figures; the attention code a reader imports lives in ``attnbook.masks``, ``attnbook.packing``
and ``attnbook.online``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# Tile kinds as attnbook.masks numbers them (BLOCK_EMPTY, BLOCK_PARTIAL, BLOCK_FULL).
KIND_NAMES = ("empty", "partial", "full")
KIND_LETTERS = ("", "P", "F")
KIND_COLOURS = ("#ffffff", "#f4a259", "#3b75af")  # white, orange, blue: distinct in greyscale


def draw_block_mask(ax, allowed: torch.Tensor, kinds: torch.Tensor, block_m: int, block_n: int,
                    title: str = "", letters: bool = True) -> None:
    """Draw a mask and its block mask on one matplotlib axis.

    Each tile is coloured by its kind (empty: white, partial: orange, full: blue); inside a tile
    the entries that may attend have the full colour and the blocked ones a pale tint, so a
    partial tile shows which of its entries count.

    Args:
        ax: a matplotlib axis.
        allowed: (T_q, T_k) bool, True = may attend.
        kinds: (ceil(T_q / block_m), ceil(T_k / block_n)) ints, 0 empty, 1 partial, 2 full.
        block_m, block_n: the tile's rows (queries) and columns (keys).
        title: the axis title.
        letters: write P / F in tiles large enough to hold a letter.
    """
    import matplotlib.colors as mcolors

    T_q, T_k = allowed.shape
    kinds = kinds.to(torch.long).cpu()
    per_entry = kinds.repeat_interleave(block_m, 0).repeat_interleave(block_n, 1)[:T_q, :T_k]
    tile_rgb = torch.tensor([mcolors.to_rgb(c) for c in KIND_COLOURS])[per_entry]  # (T_q, T_k, 3)
    shade = torch.where(allowed.cpu()[..., None], tile_rgb, 0.3 * tile_rgb + 0.7)  # pale = blocked
    ax.imshow(shade.numpy(), interpolation="nearest")
    for r in range(0, T_q + 1, block_m):
        ax.axhline(min(r, T_q) - 0.5, color="black", lw=0.6)
    for c in range(0, T_k + 1, block_n):
        ax.axvline(min(c, T_k) - 0.5, color="black", lw=0.6)
    if letters and min(block_m, block_n) >= max(T_q, T_k) / 12:
        for a in range(kinds.shape[0]):
            for b in range(kinds.shape[1]):
                letter = KIND_LETTERS[int(kinds[a, b])]
                if letter:
                    y = a * block_m + (min(block_m, T_q - a * block_m) - 1) / 2
                    x = b * block_n + (min(block_n, T_k - b * block_n) - 1) / 2
                    ax.text(x, y, letter, ha="center", va="center", fontsize=8,
                            fontweight="bold", color="white",
                            bbox=dict(fc="black", ec="none", pad=0.6, alpha=0.6))
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title, fontsize=9)


def legend_handles():
    """Legend patches for :func:`draw_block_mask` (the kinds, and a blocked entry)."""
    import matplotlib.patches as mpatches

    pale = "#fbe3cd"  # the partial colour's tint: a blocked entry of a partial tile
    return ([mpatches.Patch(facecolor=c, edgecolor="black", label=f"{n} tile")
             for c, n in zip(KIND_COLOURS, KIND_NAMES)]
            + [mpatches.Patch(facecolor=pale, edgecolor="black", label="blocked entry (pale)")])


def document_lengths(n: int, seed: int = 0, median: float = 300.0, sigma: float = 1.0,
                     low: int = 16, high: int = 2048) -> list[int]:
    """Lengths of ``n`` documents drawn from a log-normal, clipped to [low, high].

    Real corpora have a long tail of long documents and many short ones; a log-normal with
    sigma 1 is a common stand-in. The draw uses its own generator, so the lengths depend only
    on ``seed``.
    """
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, generator=g, dtype=torch.float64)
    lengths = (math.log(median) + sigma * z).exp().round().clamp(low, high)
    return [int(v) for v in lengths]


def first_fit_rows(lengths: Sequence[int], row_length: int) -> list[list[int]]:
    """Group documents into rows of at most ``row_length`` tokens, first fit, in the given order.

    Returns the indices of the documents in each row. A document longer than a row is refused
    (real pipelines cut it; the lab's lengths never exceed the row).
    """
    rows: list[list[int]] = []
    room: list[int] = []
    for i, n in enumerate(lengths):
        if n > row_length:
            raise ValueError(f"document {i} has {n} tokens, more than a row of {row_length}")
        for r, left in enumerate(room):
            if n <= left:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(row_length - n)
    return rows


def causal_entries(n: int) -> int:
    """Score entries a causal row of ``n`` tokens needs: n (n + 1) / 2."""
    return n * (n + 1) // 2


@dataclass(frozen=True)
class BatchWork:
    """Token slots and causal score entries of a way of batching documents."""

    slots: int  # token positions computed (projections, MLP): real plus padding
    real: int  # tokens of the documents themselves
    entries: int  # causal score entries computed
    needed: int  # causal score entries within each document

    @property
    def wasted_slots(self) -> float:
        """The share of token positions that hold no document token."""
        return 1 - self.real / self.slots

    @property
    def extra_entries(self) -> float:
        """Score entries computed per entry needed."""
        return self.entries / self.needed


def padded_work(lengths: Sequence[int], batch: int) -> BatchWork:
    """Documents in consecutive batches of ``batch``, each padded to its longest document."""
    slots = entries = 0
    for k in range(0, len(lengths), batch):
        group = lengths[k:k + batch]
        slots += len(group) * max(group)
        entries += len(group) * causal_entries(max(group))
    return BatchWork(slots, sum(lengths), entries, sum(causal_entries(n) for n in lengths))
