"""Flash-Decoding: one new query per sequence, its keys split across programs, then merged.

In generation (Chapter 12) each step has one query per (batch, head). FlashAttention's grid,
(query blocks) x (batch·head), then has only B·h programs, too few to fill a GPU. Flash-Decoding
(Dao et al., 2023) also splits the keys into ``n_split`` chunks, one program each, and merges
the partial results with the online-softmax rule of Chapter 10 (exercise "merge").
"""

from __future__ import annotations

import math

import torch

from .flash import _d_pad, _pad_arg
from .triton_env import check_device, load_kernels


def flash_decoding(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    n_split: int = 4,
    block_n: int = 64,
) -> torch.Tensor:
    """Attention of one query per sequence to all of its keys, the keys split ``n_split`` ways.

    The query is the newest token, so every key in the cache is at or before it: no causal
    mask is needed. The padding mask (True = real) masks keys, as everywhere in attnbook; a
    query with no real key gets the zero vector.

    Args:
        q: the new query of each sequence (and head).
        k, v: the cached keys and values, the new token's included.
        padding_mask: True for real keys, False for padding; None if all are real.
        n_split: how many programs share one query's keys.
        block_n: keys per step of each program's loop.

    Returns:
        The output of the one query, the same as attending with :class:`attnbook.Attention`
        from the last position.

    Shape:
        q: (B, 1, d) or (B, h, 1, d_h); k, v: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T)
        -> same as q
    """
    kernels = load_kernels()
    check_device(q, k, v)
    three_d = q.dim() == 3
    q4, k4, v4 = ((t[:, None] if three_d else t).contiguous() for t in (q, k, v))
    B, h, _, d = q4.shape
    T = k4.size(-2)
    chunk = math.ceil(T / n_split)  # keys per program
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    o_part = torch.empty((B * h, n_split, d), device=q.device, dtype=acc)
    lse_part = torch.empty((B * h, n_split), device=q.device, dtype=acc)
    kernels.flash_decoding_split_kernel[(n_split, B * h)](
        q4, k4, v4, o_part, lse_part, _pad_arg(padding_mask, q), 1.0 / math.sqrt(d), T, h, d,
        chunk, HAS_PAD=padding_mask is not None, PRECISION="ieee", BLOCK_N=block_n,
        D_PAD=_d_pad(d))
    out = torch.empty_like(q4)
    kernels.flash_decoding_merge_kernel[(B * h,)](
        o_part, lse_part, out, n_split, d, S_PAD=max(2, 1 << (n_split - 1).bit_length()),
        D_PAD=_d_pad(d))
    return out[:, 0] if three_d else out


def merge_partials(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """Merge normalised partial outputs by their log-sum-exps (the merge kernel, in PyTorch).

    ``y = sum_s exp(L_s - m) y_s / sum_s exp(L_s - m)`` with ``m = max_s L_s``; a query whose
    every part is empty (``L_s = -inf``) gets zeros.

    Shape:
        outs: (S, ..., d), lses: (S, ..., 1) -> (..., d)
    """
    m = lses.amax(dim=0)  # (..., 1)
    w = torch.exp(lses - m.masked_fill(m == float("-inf"), 0.0))  # (S, ..., 1)
    total = w.sum(dim=0)
    return (w * outs).sum(dim=0) / total.masked_fill(total == 0, 1.0)
