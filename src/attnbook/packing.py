"""Packing variable-length documents into one row, instead of padding each to the longest.

A packed row puts the documents' tokens one after another. Two things keep the documents
apart: the document mask (:func:`attnbook.masks.document_mod`: a query sees only earlier
tokens of its own document) and per-document positions that restart at 0 for each document,
so that a position encoding (chapter 20) sees each document as if it were alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .masks import MaskMod, document_mod


@dataclass(frozen=True)
class Packed:
    """One packed row.

    Attributes:
        tokens: the documents' tokens, concatenated, (T,).
        document_ids: the document (0, 1, ...) of each token, (T,) long, non-decreasing.
        positions: each token's position within its own document, (T,) long, 0 at each start.
        lengths: the documents' lengths, in order (they sum to T).
    """

    tokens: torch.Tensor
    document_ids: torch.Tensor
    positions: torch.Tensor
    lengths: tuple[int, ...]

    def mask_mod(self) -> MaskMod:
        """The row's document mask, :func:`attnbook.masks.document_mod` of its document ids."""
        return document_mod(self.document_ids)


def pack(sequences: Sequence[torch.Tensor]) -> Packed:
    """Concatenate 1-D sequences into one row, with document ids and per-document positions.

    Args:
        sequences: a non-empty list of 1-D tensors of one dtype (token ids, usually); a
            sequence may be empty (it gets a document id and no tokens).

    Returns:
        A :class:`Packed` row.

    Raises:
        ValueError: the list is empty, or a sequence is not 1-D (its shape is named).
        TypeError: an entry is not a tensor, or the dtypes differ.

    Shape:
        n sequences of (T_i,) -> tokens, document_ids, positions: (sum T_i,)
    """
    if isinstance(sequences, torch.Tensor) or not isinstance(sequences, Sequence):
        raise TypeError(f"pack takes a list of 1-D tensors, got {type(sequences).__name__}")
    if len(sequences) == 0:
        raise ValueError("pack needs at least one sequence, got an empty list")
    for i, s in enumerate(sequences):
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"sequence {i} must be a 1-D torch.Tensor, got {type(s).__name__}")
        if s.dim() != 1:
            raise ValueError(f"sequence {i} must be 1-D (T_i,), got shape {tuple(s.shape)}; "
                             "pack one sequence of tokens per list entry")
        if s.dtype != sequences[0].dtype:
            raise TypeError(f"all sequences must share one dtype: sequence 0 is "
                            f"{sequences[0].dtype}, sequence {i} is {s.dtype}")
    lengths = tuple(int(s.numel()) for s in sequences)
    device = sequences[0].device
    counts = torch.tensor(lengths, device=device)  # (n,)
    document_ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), counts)
    starts = torch.cumsum(counts, 0) - counts  # (n,) where each document begins
    T = int(counts.sum())
    positions = torch.arange(T, device=device) - torch.repeat_interleave(starts, counts)
    return Packed(torch.cat(list(sequences)), document_ids, positions, lengths)


def unpack(packed: torch.Tensor, lengths: Sequence[int], dim: int = 0) -> list[torch.Tensor]:
    """Split a packed tensor (tokens, or outputs with a feature axis) back into its documents.

    Args:
        packed: a tensor whose axis ``dim`` runs over the packed row's T positions.
        lengths: the documents' lengths, e.g. ``Packed.lengths``.
        dim: the axis of the T positions (0 for tokens (T,) and outputs (T, d); 1 for (1, T, d)).

    Returns:
        One tensor per document (views of ``packed``).

    Raises:
        ValueError: the lengths do not add up to the axis' size.
    """
    lengths = [int(n) for n in lengths]
    if any(n < 0 for n in lengths):
        raise ValueError(f"lengths must be >= 0, got {lengths}")
    if sum(lengths) != packed.size(dim):
        raise ValueError(f"the lengths add up to {sum(lengths)} but the packed tensor has "
                         f"{packed.size(dim)} positions along dim {dim} (shape "
                         f"{tuple(packed.shape)})")
    return list(torch.split(packed, lengths, dim=dim))


def pad(sequences: Sequence[torch.Tensor], value=0) -> tuple[torch.Tensor, torch.Tensor]:
    """The other way to batch: every sequence right-padded to the longest one.

    Returns:
        ``padded`` (n, T_max) and ``padding_mask`` (n, T_max), True = real token (attnbook's
        convention).
    """
    packed = pack(sequences)  # the same checks
    T_max = max(packed.lengths)
    padded = packed.tokens.new_full((len(packed.lengths), T_max), value)  # (n, T_max)
    padding_mask = torch.zeros(len(packed.lengths), T_max, dtype=torch.bool,
                               device=packed.tokens.device)
    for i, s in enumerate(sequences):
        padded[i, : s.numel()] = s
        padding_mask[i, : s.numel()] = True
    return padded, padding_mask
