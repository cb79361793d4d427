"""Online softmax and tiled attention: the same result as the explicit module, in linear memory.

The explicit module builds the whole (T, T) matrix of scores. Here the keys arrive in blocks
and each query keeps three running quantities instead: the largest score seen so far ``m``,
the sum of exponentials ``l`` (relative to ``m``) and the unnormalised output ``acc``. When a
block brings a larger maximum, the old sum and output are rescaled by ``exp(m_old - m_new)``
(Milakov & Gimelshein, 2018). Looping over query blocks too keeps every intermediate at
``(block, block)``, so memory grows like T, not T² (Rabe & Staats, 2021; Dao et al., 2022).

Masks follow attnbook's conventions: causal (key ``j > i`` blocked) and ``padding_mask`` True
for real tokens (it masks keys). A query that sees no real key gets the zero vector, as in
:class:`attnbook.Attention`; the naive recurrence would compute 0 / 0 = NaN there.

Chapter 21 adds masks as functions: with a ``mask_mod`` (FlexAttention's signature, True = may
attend) every tile is first classified with :func:`attnbook.masks.block_mask`. Empty tiles are
skipped, partial ones are masked, full ones are computed without a mask; a ``score_mod``
changes the scaled scores of every computed tile, and the backward applies its derivative.
"""

from __future__ import annotations

import math

import torch

from .checks import check_whole_number
from .fused import check_self_attention_lengths, repeat_kv
from .masks import (
    BLOCK_EMPTY,
    BLOCK_FULL,
    BLOCK_PARTIAL,
    MaskMod,
    ScoreMod,
    and_mods,
    block_mask,
    causal_mod,
    check_mask_mod,
    check_score_mod,
    mask_mod_values,
    mod_indices,
    padding_mod,
    warn_alibi_without_causal,
)

NEG_INF = float("-inf")


def online_softmax_stats(scores: torch.Tensor,
                         block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Running maximum and running sum of exponentials, one block of scores at a time.

    Args:
        scores: scores along the last dimension; ``-inf`` = blocked.
        block_size: how many scores arrive at a time.

    Returns:
        ``m``, the maximum of each row, and ``l = sum_j exp(s_j - m)``. A row that is all
        ``-inf`` gives ``m = -inf`` and ``l = 0`` (never NaN).

    Shape:
        (..., n) -> (..., 1), (..., 1)
    """
    m = scores.new_full((*scores.shape[:-1], 1), NEG_INF)  # (..., 1) nothing seen yet
    l = scores.new_zeros((*scores.shape[:-1], 1))  # (..., 1)
    for start in range(0, scores.size(-1), block_size):
        block = scores[..., start : start + block_size]  # (..., n_b)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))  # (..., 1)
        shift = _finite(m_new)  # a row with no finite score yet is shifted by 0, not -inf
        # Rescale the old sum to the new maximum, then add this block's terms.
        l = l * torch.exp(m - shift) + torch.exp(block - shift).sum(dim=-1, keepdim=True)
        m = m_new
    return m, l


def online_softmax(scores: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax of each row from its online statistics; an all ``-inf`` row gives zeros.

    Shape:
        (..., n) -> (..., n)
    """
    m, l = online_softmax_stats(scores, block_size)
    return torch.exp(scores - _finite(m)) / l.masked_fill(l == 0, 1.0)


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    causal: bool = True,
    block_size: int = 256,
    recompute: bool = True,
    mask_mod: MaskMod | None = None,
    score_mod: ScoreMod | None = None,
    skip_empty: bool = True,
    stats: dict | None = None,
    plan: TilePlan | None = None,
) -> torch.Tensor:
    """Attention computed one (query block, key block) tile at a time, never forming (T, T).

    Args:
        q, k, v: queries, keys and values, already projected. Keys and values may have fewer
            heads than queries (grouped-query attention, chapter 13; h_kv = 1 is multi-query):
            each is repeated for its group of query heads, O(h·T·d) memory, still linear in T,
            and gradients flow back to the h_kv heads.
        padding_mask: True for real tokens, False for padding; None if all are real. It masks
            keys, so it has one entry per key.
        causal: block keys in the future of each query (``j > i``). Causal attention needs
            as many keys as queries; ``causal=False`` also takes T_k != T_q (cross-attention).
        block_size: rows and columns per tile; memory for intermediates is O(block_size²).
        recompute: when gradients are needed, use the custom backward that recomputes each
            tile (memory linear in T for training too). ``False`` lets plain autograd record
            every tile, which gives the same gradients but keeps O(T²) memory alive.
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool``, True = MAY attend (FlexAttention's
            convention, see :mod:`attnbook.masks`), AND-ed with the causal mask (when
            ``causal``) and the padding. Each tile is classified first: empty tiles are
            skipped, partial tiles masked, full tiles computed without a mask. With a batch or
            heads, a tile is skipped only where it is empty for every (b, h), and computed
            without a mask only where it is full for every (b, h). None: today's loop.
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx) -> new score``, applied to the
            scaled scores of every computed tile before the mask. The backward multiplies by
            its derivative: ``score_mod.derivative`` when it has one (softcap, relative bias),
            otherwise autograd on the tile. Tensors the score_mod captures get no gradient on
            this path; a captured tensor that requires grad is refused (use recompute=False).
        skip_empty: False computes (and masks) empty tiles too: the comparison for the
            benchmark; the result is the same.
        stats: a dict that receives the forward's tile counts: ``tiles`` (all of them),
            ``computed``, ``skipped``, ``masked`` (computed with a mask) and ``full``
            (computed without one). See also :func:`tiled_work`.
        plan: a :func:`tile_plan` built once for these sizes, mask_mod, score_mod, causal
            rule and padding, reused across calls (layers, steps) instead of classifying the
            tiles on every call, as FlexAttention reuses its block mask. It carries the mods,
            so ``mask_mod`` and ``score_mod`` must then be None.

    Returns:
        The outputs, equal to :meth:`attnbook.Attention.attend` up to rounding, in q's dtype
        (float16 and bfloat16 are accumulated in float32). A query with no visible key outputs
        zeros. T = 0 gives an empty result.

    Raises:
        TypeError: if q, k and v do not share one dtype (named in the message).
        ValueError: if ``causal`` and T_q != T_k (the diagonal's alignment would be a guess),
            if k and v differ in length, if h is not a multiple of h_kv, or if
            ``padding_mask`` is not (B, T_k); the message names the shapes.
        TypeError / ValueError: a mask_mod or score_mod of the wrong signature or result, or
            a block_size that is not a positive int.

    Shape:
        q: (B, T_q, d) or (B, h, T_q, d_h); k, v: (B, T_k, d) or (B, h_kv, T_k, d_h) with
        T_k = T_q when causal; padding_mask: (B, T_k) -> same as q
    """
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and "
                        f"{v.dtype}; convert them with .to({q.dtype})")
    _check_shapes(q, k, v, padding_mask, causal)
    block_size = check_whole_number("tiled_attention's block_size", block_size)
    if score_mod is not None:
        check_score_mod(score_mod)
    if q.dim() == 4 and k.size(1) != q.size(1):  # grouped-query: repeat K, V for each group
        k, v = repeat_kv(k, q.size(1)), repeat_kv(v, q.size(1))  # (B, h, T_k, d_h)
    # Classify the tiles once; the forward and the backward both read the plan.
    if plan is None:
        plan = tile_plan(q, k, padding_mask, causal, block_size, mask_mod, score_mod, skip_empty)
    elif mask_mod is not None or score_mod is not None:
        raise ValueError("pass either a plan or mask_mod / score_mod: the plan already holds "
                         "the mods it was built with")
    elif (len(plan.tiles), len(plan.tiles[0]) if plan.tiles else 0) != (
            -(-q.size(-2) // block_size), -(-k.size(-2) // block_size) if q.size(-2) else 0):
        raise ValueError(f"the plan has {len(plan.tiles)} x "
                         f"{len(plan.tiles[0]) if plan.tiles else 0} tiles, but T_q = "
                         f"{q.size(-2)}, T_k = {k.size(-2)} with block_size = {block_size} "
                         "need another: build it with tile_plan for these sizes")
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad and recompute:
        if _captures_grad(score_mod):
            raise ValueError("the score_mod captures a tensor that requires grad (a learned "
                             "bias table?); the tiled backward gives gradients to q, k and v "
                             "only: pass recompute=False to let autograd reach the tensor")
        return TiledAttention.apply(q, k, v, padding_mask, causal, block_size, plan, stats)
    return tiled_attention_forward(q, k, v, padding_mask, causal, block_size, plan=plan,
                                   stats=stats)[0]


class TilePlan:
    """What the tiled loops need to know about a mask_mod: its tiles' kinds and the mask itself.

    Attributes:
        mask_mod: the mask_mod AND-ed with causal and padding (None: nothing is blocked).
        score_mod: the score_mod, or None.
        tiles: per (query block, key block), BLOCK_EMPTY / PARTIAL / FULL over all (b, h),
            as nested lists (read once per tile, in Python).
        kinds: the block mask's (B, h, n_m, n_n) kinds, per (b, h).
    """

    def __init__(self, mask_mod, score_mod, tiles, kinds):
        self.mask_mod, self.score_mod, self.tiles, self.kinds = mask_mod, score_mod, tiles, kinds


def tile_plan(q: torch.Tensor, k: torch.Tensor, padding_mask: torch.Tensor | None,
              causal: bool, block_size: int, mask_mod: MaskMod | None = None,
              score_mod: ScoreMod | None = None, skip_empty: bool = True) -> TilePlan | None:
    """Classify the tiles of the combined mask (mask_mod, causal, padding); None without mods.

    With neither a mask_mod nor a score_mod the loops keep their original rule (causal tiles
    past the diagonal are never visited, the mask is built from indices), so this returns None.

    Shape:
        q: (B, T_q, d) or (B, h, T_q, d_h); k: (..., T_k, d); padding_mask: (B, T_k)
    """
    if mask_mod is None and score_mod is None:
        return None
    if mask_mod is not None:
        check_mask_mod(mask_mod)
    B, H = q.size(0), (q.size(1) if q.dim() == 4 else 1)
    T_q, T_k = q.size(-2), k.size(-2)
    warn_alibi_without_causal(score_mod, mask_mod, causal, T_q, T_k, "tiled_attention")
    parts = [m for m in (mask_mod, causal_mod if causal else None,
                         padding_mod(padding_mask) if padding_mask is not None else None)
             if m is not None]
    combined = None if not parts else parts[0] if len(parts) == 1 else and_mods(*parts)
    n_m, n_n = -(-T_q // block_size), -(-T_k // block_size)
    if combined is None:
        kinds = torch.full((1, 1, n_m, n_n), BLOCK_FULL, dtype=torch.int8)
    else:
        kinds = block_mask(combined, T_q, T_k, block_size, block_size, B, H, q.device).kinds
    flat = kinds.flatten(0, 1)  # (B * h, n_m, n_n)
    tiles = torch.where((flat == BLOCK_EMPTY).all(0), BLOCK_EMPTY,
                        torch.where((flat == BLOCK_FULL).all(0), BLOCK_FULL, BLOCK_PARTIAL))
    if not skip_empty:  # compute every tile, the mask applied wherever one entry is blocked
        tiles = torch.where(tiles == BLOCK_EMPTY, BLOCK_PARTIAL, tiles)
    return TilePlan(combined, score_mod, tiles.tolist(), kinds)


def tiled_work(T_q: int, T_k: int, block_size: int, *, mask_mod: MaskMod | None = None,
               padding_mask: torch.Tensor | None = None, causal: bool = True, B: int = 1,
               h: int = 1, skip_empty: bool = True) -> dict:
    """The tile counts :func:`tiled_attention` would report in ``stats``, without attending.

    Returns:
        {"tiles", "computed", "skipped", "masked", "full"}: tiles in the grid, tiles the
        forward computes (with and without a mask) and skips. The backward visits the same.
    """
    block_size = check_whole_number("tiled_work's block_size", block_size)
    q, k = torch.empty(B, h, T_q, 0), torch.empty(B, h, T_k, 0)  # shapes only: no features
    plan = tile_plan(q, k, padding_mask, causal, block_size, mask_mod, None, skip_empty)
    stats = _new_stats(T_q, T_k, block_size)
    for a, i0 in enumerate(range(0, T_q, block_size)):
        i1 = min(i0 + block_size, T_q)
        for b, j0 in enumerate(range(0, i1 if causal and plan is None else T_k, block_size)):
            if plan is None:
                masked = (causal and min(j0 + block_size, T_k) - 1 > i0) \
                    or padding_mask is not None
                _count(stats, BLOCK_PARTIAL if masked else BLOCK_FULL)
            else:
                _count(stats, plan.tiles[a][b])
    return stats


def tiled_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  padding_mask: torch.Tensor | None, causal: bool,
                  block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention's forward loop; also returns each row's log-sum-exp for the backward.

    Float16 and bfloat16 are upcast tile by tile (running m, l and output in float32) and the
    output is cast back once, at the end.

    Shape:
        q: (..., T_q, d), k: (..., T_k, d), v: (..., T_k, d_v) -> (..., T_q, d_v), (..., T_q, 1)
    """
    T_q, T_k, scale = q.size(-2), k.size(-2), 1.0 / math.sqrt(q.size(-1))
    acc_dtype = _accumulation_dtype(q.dtype)  # float32 for half inputs
    out = q.new_empty((*q.shape[:-1], v.size(-1)))  # (B, T_q, d_v), one query block at a time
    lse = q.new_empty((*q.shape[:-1], 1), dtype=acc_dtype)  # (B, T_q, 1)
    for i0 in range(0, T_q, block_size):
        i1 = min(i0 + block_size, T_q)
        qi = q[..., i0:i1, :].to(acc_dtype) * scale  # (B, b, d): scaling q costs b*d, not b*b
        m = qi.new_full((*qi.shape[:-1], 1), NEG_INF)  # (B, b, 1) running maximum
        l = qi.new_zeros((*qi.shape[:-1], 1))  # (B, b, 1) running sum of exponentials
        acc = qi.new_zeros((*qi.shape[:-1], v.size(-1)))  # (B, b, d_v) unnormalised output
        for j0 in range(0, i1 if causal else T_k, block_size):  # keys past i1: the future
            j1 = min(j0 + block_size, T_k)
            s = qi @ k[..., j0:j1, :].to(acc_dtype).transpose(-2, -1)  # (B, b, b) one tile
            blocked = _tile_blocked(i0, i1, j0, j1, padding_mask, causal, q)
            if blocked is not None:
                s.masked_fill_(blocked, NEG_INF)  # in place: no second (B, b, b) tile
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (B, b, 1)
            shift = _finite(m_new)  # rows with no visible key so far: shift by 0, not -inf
            p = (s - shift).exp_()  # (B, b, b); exactly 0 where blocked
            alpha = torch.exp(m - shift)  # (B, b, 1) rescales what earlier tiles summed
            l = alpha * l + p.sum(dim=-1, keepdim=True)
            acc = alpha * acc + p @ v[..., j0:j1, :].to(acc_dtype)  # (B, b, d_v)
            m = m_new
            del s, p  # freed before the next tile: at most two (B, b, b) tiles at once
        # A row with l = 0 saw no key: divide by 1 so its output is 0, not 0 / 0 = NaN.
        out[..., i0:i1, :] = acc / l.masked_fill(l == 0, 1.0)  # the one cast to q's dtype
        lse[..., i0:i1, :] = m + torch.log(l)  # log(0) = -inf marks an empty row
    return out, lse


def tiled_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None,
    causal: bool,
    block_size: int,
    *,
    record: list | None = None,
    plan: TilePlan | None = None,
    stats: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`tiled_forward`, and the same loop with a tile trace, a tile plan or tile counts.

    Float16 and bfloat16 inputs are upcast tile by tile: scores, the running ``m``, ``l`` and
    output are float32, and only the finished output is cast back (FlashAttention's rule).

    Args:
        record: a list that receives, after each tile, in loop order, a dict with the tile's
            ``i0, i1, j0, j1``, ``masked`` (some score of the tile was blocked) and copies of
            the running ``m``, ``l`` and ``acc`` of its query block (``m`` is the maximum of
            the scaled scores). None (the default) records nothing. See
            :mod:`attnbook.lab.tile_trace`.
        plan: from :func:`tile_plan` for a mask_mod or score_mod: empty tiles are skipped,
            partial ones masked by the plan's mask_mod, full ones left alone. None: the
            causal / padding rule built from indices (the original loop).
        stats: a dict that receives the tile counts (see :func:`tiled_attention`).

    Returns:
        ``out`` (q's dtype) and ``lse = m + log(l)`` (``-inf`` for a row with no visible key;
        float32 for half inputs, which is what the backward needs).

    Shape:
        q: (..., T_q, d), k: (..., T_k, d), v: (..., T_k, d_v) -> (..., T_q, d_v), (..., T_q, 1)
    """
    if record is None and plan is None and stats is None:
        return tiled_forward(q, k, v, padding_mask, causal, block_size)  # Chapter 10's loop
    T_q, T_k, scale = q.size(-2), k.size(-2), 1.0 / math.sqrt(q.size(-1))
    acc_dtype = _accumulation_dtype(q.dtype)  # float32 for half inputs: cast once, at the end
    out = q.new_empty((*q.shape[:-1], v.size(-1)))  # (B, T_q, d_v), one query block at a time
    lse = q.new_empty((*q.shape[:-1], 1), dtype=acc_dtype)  # (B, T_q, 1)
    if stats is not None:
        stats.update(_new_stats(T_q, T_k, block_size))
    for i0 in range(0, T_q, block_size):
        i1 = min(i0 + block_size, T_q)
        # (B, b, d): scaling q once costs b*d, not b*b; upcast so every tile product and
        # running quantity below is in acc_dtype (half-precision sums lose too many digits).
        qi = q[..., i0:i1, :].to(acc_dtype) * scale
        m = qi.new_full((*qi.shape[:-1], 1), NEG_INF)  # (B, b, 1) running maximum
        l = qi.new_zeros((*qi.shape[:-1], 1))  # (B, b, 1) running sum of exponentials
        acc = qi.new_zeros((*qi.shape[:-1], v.size(-1)))  # (B, b, d_v) unnormalised output
        # Keys past i1 are in the future; a plan marks those tiles empty itself.
        for j0 in range(0, i1 if causal and plan is None else T_k, block_size):
            j1 = min(j0 + block_size, T_k)
            kind = None if plan is None else plan.tiles[i0 // block_size][j0 // block_size]
            if kind == BLOCK_EMPTY:  # nothing in the tile may attend: skip its work entirely
                _count(stats, kind)
                continue
            # Slices used inline, not kept in names: a live view of k or v would count as the
            # whole of k or v in the lab's LiveTensorBytes (the forward's peak memory).
            s = qi @ k[..., j0:j1, :].to(acc_dtype).transpose(-2, -1)  # (B, b, b) one tile
            if plan is not None and plan.score_mod is not None:
                s = _score_tile(plan.score_mod, s, i0, i1, j0, j1)  # (B, b, b) modified scores
            blocked = _tile_blocked(i0, i1, j0, j1, padding_mask, causal, q, plan, kind)
            _count(stats, BLOCK_FULL if blocked is None else BLOCK_PARTIAL)
            if blocked is not None:
                if plan is not None and plan.score_mod is not None:
                    s = s.masked_fill(blocked, NEG_INF)  # the score_mod's graph may need s
                else:
                    s.masked_fill_(blocked, NEG_INF)  # in place: no second (B, b, b) tile
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (B, b, 1)
            shift = _finite(m_new)  # rows with no visible key so far: shift by 0, not -inf
            p = (s - shift).exp_()  # (B, b, b); exactly 0 where blocked
            alpha = torch.exp(m - shift)  # (B, b, 1) rescales what earlier tiles summed
            l = alpha * l + p.sum(dim=-1, keepdim=True)
            acc = alpha * acc + p @ v[..., j0:j1, :].to(acc_dtype)  # (B, b, d_v)
            m = m_new
            if record is not None:
                record.append({"step": "tile", "i0": i0, "i1": i1, "j0": j0, "j1": j1,
                               "masked": blocked is not None, "m": m.clone(),
                               "l": l.clone(), "acc": acc.clone()})
            del s, p  # freed before the next tile: at most two (B, b, b) tiles at once
        # A row with l = 0 saw no key: divide by 1 so its output is 0, not 0 / 0 = NaN.
        out[..., i0:i1, :] = acc / l.masked_fill(l == 0, 1.0)  # the one cast to q's dtype
        lse[..., i0:i1, :] = m + torch.log(l)  # log(0) = -inf marks an empty row
    return out, lse


def tiled_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, lse: torch.Tensor, padding_mask: torch.Tensor | None,
                   causal: bool,
                   block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of tiled attention, each tile's weights recomputed from the saved ``lse``.

    Half inputs are accumulated in float32 and the gradients cast back once, at the end.

    Shape:
        dout, out: (..., T_q, d_v); q: (..., T_q, d); k: (..., T_k, d); v: (..., T_k, d_v);
        lse: (..., T_q, 1) -> dq, dk, dv with the shapes of q, k, v
    """
    T_q, T_k, scale = q.size(-2), k.size(-2), 1.0 / math.sqrt(q.size(-1))
    acc_dtype = _accumulation_dtype(q.dtype)  # float32 for half inputs
    dq = torch.zeros_like(q, dtype=acc_dtype)  # (B, T_q, d), summed over many tiles
    dk = torch.zeros_like(k, dtype=acc_dtype)  # (B, T_k, d)
    dv = torch.zeros_like(v, dtype=acc_dtype)  # (B, T_k, d_v)
    dout_a, out_a = dout.to(acc_dtype), out.to(acc_dtype)
    D = (dout_a * out_a).sum(dim=-1, keepdim=True)  # (B, T_q, 1): rowsum(dA * A) in closed form
    shift_all = _finite(lse.to(acc_dtype))  # an empty row has all s = -inf: p = exp(-inf - 0) = 0
    for i0 in range(0, T_q, block_size):
        i1 = min(i0 + block_size, T_q)
        qi, doi = q[..., i0:i1, :].to(acc_dtype) * scale, dout_a[..., i0:i1, :]  # as forward
        shift, Di = shift_all[..., i0:i1, :], D[..., i0:i1, :]  # (B, b, 1) each
        for j0 in range(0, i1 if causal else T_k, block_size):
            j1 = min(j0 + block_size, T_k)
            kj, vj = k[..., j0:j1, :].to(acc_dtype), v[..., j0:j1, :].to(acc_dtype)
            s = qi @ kj.transpose(-2, -1)  # (B, b, b) the forward's scores, bit for bit
            blocked = _tile_blocked(i0, i1, j0, j1, padding_mask, causal, q)
            if blocked is not None:
                s = s.masked_fill(blocked, NEG_INF)
            p = torch.exp(s - shift)  # (B, b, b) the tile of attention weights
            dv_tile, dp = p.transpose(-2, -1) @ doi, doi @ vj.transpose(-2, -1)  # dV's, dP's tile
            ds = torch.where(p == 1, 0.0, p * (dp - Di))  # softmax backward; p = 1: dS = 0 exactly
            dq_tile, dk_tile = (ds @ kj) * scale, ds.transpose(-2, -1) @ qi  # qi is scaled
            dv[..., j0:j1, :] += dv_tile
            dq[..., i0:i1, :] += dq_tile
            dk[..., j0:j1, :] += dk_tile
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def tiled_attention_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    padding_mask: torch.Tensor | None,
    causal: bool,
    block_size: int,
    *,
    record: list | None = None,
    plan: TilePlan | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tiled_backward`, and the same loop with a tile trace or a tile plan.

    With ``p = exp(s - lse)`` and ``D_i = dout_i · out_i``, a tile contributes
    ``dV += pᵀ dout``, ``dS = p * (dout Vᵀ - D)``, ``dQ += dS K / sqrt(d)``,
    ``dK += dSᵀ Q / sqrt(d)``. Nothing of size (T, T) is ever stored. For float16 and bfloat16
    inputs every tile and the three accumulators are float32, cast to the inputs' dtype once.

    Two details keep a row with one visible key exact (its ``dS`` is 0: the softmax's Jacobian
    ``p (1 - p)`` vanishes at ``p = 1``). Scores are recomputed as the forward formed them,
    ``(q / sqrt(d)) Kᵀ``, so ``p = exp(s - lse)`` is exactly 1 there (and ``dV`` exact). And
    where ``p == 1`` the tile sets ``dS = 0`` instead of ``p * (dP - D)``: ``D`` is summed
    from ``dout ∘ out``, a different order of the same products as the matmul's ``dP``, and
    their difference would be rounding noise (about 1e-6 in float32), not 0. ``p == 1`` in
    floating point means the row's other weights sum to less than one rounding step of 1, so
    the exact ``dS = Σₖ p_k (dP_j - dP_k)`` is below the rounding of ``dP`` itself. The guard is
    elementwise: the tile still costs five products, as FlashAttention-2's does.

    ``record``, if a list, receives ``{"step": "D", "D": ...}`` before the loop, then one dict
    per tile, in loop order (query blocks outside), with ``i0, i1, j0, j1`` and the tile's
    contributions ``dq`` (to rows i0..i1), ``dk`` and ``dv`` (to rows j0..j1), in the
    accumulation dtype. See :mod:`attnbook.lab.tile_trace`.

    With a ``plan`` (:func:`tile_plan`) the backward visits the forward's tiles: empty ones
    are skipped, partial ones masked. A score_mod ``s' = f(s)`` changes the scores the softmax
    sees, so ``p = exp(f(s) - lse)`` and the chain rule adds one factor:
    ``dS = p * (dout Vᵀ - D) * f'(s)`` (for softcapping ``f'(s) = 1 - tanh²(s / cap)``).

    Shape:
        dout, out: (..., T_q, d_v); q: (..., T_q, d); k: (..., T_k, d); v: (..., T_k, d_v);
        lse: (..., T_q, 1)
        -> dq, dk, dv with the shapes of q, k, v
    """
    if record is None and plan is None:
        return tiled_backward(dout, q, k, v, out, lse, padding_mask, causal, block_size)
    T_q, T_k, scale = q.size(-2), k.size(-2), 1.0 / math.sqrt(q.size(-1))
    acc_dtype = _accumulation_dtype(q.dtype)  # float32 for half inputs: cast once, at the end
    # (B, T, d) each: gradients summed over many tiles, so they are accumulated in acc_dtype.
    dq = torch.zeros_like(q, dtype=acc_dtype)
    dk = torch.zeros_like(k, dtype=acc_dtype)
    dv = torch.zeros_like(v, dtype=acc_dtype)
    dout_a, out_a = dout.to(acc_dtype), out.to(acc_dtype)
    D = (dout_a * out_a).sum(dim=-1, keepdim=True)  # (B, T_q, 1): rowsum(dA * A) in closed form
    if record is not None:
        record.append({"step": "D", "D": D.clone()})
    shift_all = _finite(lse.to(acc_dtype))  # an empty row has all s = -inf: p = exp(-inf - 0) = 0
    for i0 in range(0, T_q, block_size):
        i1 = min(i0 + block_size, T_q)
        qi, doi = q[..., i0:i1, :].to(acc_dtype) * scale, dout_a[..., i0:i1, :]  # as forward
        shift, Di = shift_all[..., i0:i1, :], D[..., i0:i1, :]  # (B, b, 1) each
        for j0 in range(0, i1 if causal and plan is None else T_k, block_size):
            j1 = min(j0 + block_size, T_k)
            kind = None if plan is None else plan.tiles[i0 // block_size][j0 // block_size]
            if kind == BLOCK_EMPTY:  # the forward skipped it: all its weights are 0
                continue
            kj, vj = k[..., j0:j1, :].to(acc_dtype), v[..., j0:j1, :].to(acc_dtype)
            s = qi @ kj.transpose(-2, -1)  # (B, b, b) the forward's scores, bit for bit
            score_mod = None if plan is None else plan.score_mod
            s_mod = s if score_mod is None else _score_tile(score_mod, s, i0, i1, j0, j1)
            blocked = _tile_blocked(i0, i1, j0, j1, padding_mask, causal, q, plan, kind)
            if blocked is not None:
                s_mod = s_mod.masked_fill(blocked, NEG_INF)
            p = torch.exp(s_mod - shift)  # (B, b, b) the tile of attention weights
            dv_tile, dp = p.transpose(-2, -1) @ doi, doi @ vj.transpose(-2, -1)  # dV's, dP's tile
            ds = torch.where(p == 1, 0.0, p * (dp - Di))  # softmax backward; p = 1: dS = 0 exactly
            if score_mod is not None:  # chain rule through s' = f(s): dS = dS' * f'(s)
                ds = _score_mod_vjp(score_mod, s, ds, i0, i1, j0, j1)
            dq_tile, dk_tile = (ds @ kj) * scale, ds.transpose(-2, -1) @ qi  # qi is scaled
            dv[..., j0:j1, :] += dv_tile
            dq[..., i0:i1, :] += dq_tile
            dk[..., j0:j1, :] += dk_tile
            if record is not None:
                record.append({"step": "tile", "i0": i0, "i1": i1, "j0": j0, "j1": j1,
                               "dq": dq_tile.clone(), "dk": dk_tile.clone(),
                               "dv": dv_tile.clone()})
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class TiledAttention(torch.autograd.Function):
    """Tiled attention with a backward that recomputes tiles: training memory linear in T."""

    @staticmethod
    def forward(ctx, q, k, v, padding_mask, causal, block_size, plan=None, stats=None):
        out, lse = tiled_attention_forward(q, k, v, padding_mask, causal, block_size,
                                           plan=plan, stats=stats)
        ctx.save_for_backward(q, k, v, out, lse, padding_mask)  # O(T) each: no (T, T) tensor
        ctx.causal, ctx.block_size, ctx.plan = causal, block_size, plan
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, padding_mask = ctx.saved_tensors
        dq, dk, dv = tiled_attention_backward(dout, q, k, v, out, lse, padding_mask,
                                              ctx.causal, ctx.block_size, plan=ctx.plan)
        return dq, dk, dv, None, None, None, None, None


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  padding_mask: torch.Tensor | None, causal: bool) -> None:
    """ValueError naming the shapes unless q, k, v and padding_mask fit together (see Raises)."""
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if causal:
        check_self_attention_lengths(q, k, "tiled_attention(causal=True)")
    if k.size(-2) != v.size(-2):
        raise ValueError(f"k and v must hold the same keys (T_k along dim -2), got {shapes}")
    if q.dim() == 4 and k.dim() == 4 and q.size(1) % k.size(1) != 0:
        raise ValueError(f"the query heads h = {q.size(1)} must be a multiple of the key/value "
                         f"heads h_kv = {k.size(1)} (grouped-query attention), got {shapes}")
    if padding_mask is not None and padding_mask.shape != (q.size(0), k.size(-2)):
        raise ValueError(f"padding_mask must be (B, T_k) = {(q.size(0), k.size(-2))}, one entry "
                         f"per key, got {tuple(padding_mask.shape)} with {shapes}")


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16 (as FlashAttention accumulates), otherwise ``dtype`` itself."""
    return torch.promote_types(dtype, torch.float32)


def _finite(m: torch.Tensor) -> torch.Tensor:
    """``m`` with ``-inf`` replaced by 0: the shift for a row that has seen no visible key."""
    return m.masked_fill(m == NEG_INF, 0.0)


def _tile_blocked(i0: int, i1: int, j0: int, j1: int, padding_mask: torch.Tensor | None,
                  causal: bool, q: torch.Tensor, plan: TilePlan | None = None,
                  kind: int | None = None) -> torch.Tensor | None:
    """True where query i0..i1 may not see key j0..j1 in one tile; None if nothing is blocked."""
    if plan is not None:  # the plan's combined mask_mod, evaluated on partial tiles only
        if kind == BLOCK_FULL or plan.mask_mod is None:
            return None
        B, H = q.size(0), (q.size(1) if q.dim() == 4 else 1)
        allowed = mask_mod_values(plan.mask_mod, *mod_indices(B, H, i0, i1, j0, j1, q.device))
        return ~(allowed if q.dim() == 4 else allowed[:, 0])  # (B, h, b, b) or (B, b, b)
    blocked = None
    if causal and j1 - 1 > i0:  # only tiles that cross the diagonal hold future keys
        i = torch.arange(i0, i1, device=q.device)[:, None]
        j = torch.arange(j0, j1, device=q.device)[None, :]
        blocked = j > i  # (b, b)
    if padding_mask is not None:
        pad = ~padding_mask[:, j0:j1]  # (B, b) True = padding key
        pad = pad.view(pad.size(0), *([1] * (q.dim() - 2)), j1 - j0)  # (B, 1, b) or (B, 1, 1, b)
        blocked = pad if blocked is None else blocked | pad
    return blocked


def _score_tile(score_mod: ScoreMod, s: torch.Tensor, i0: int, i1: int, j0: int,
                j1: int) -> torch.Tensor:
    """The score_mod applied to one tile of scaled scores, with the tile's absolute indices."""
    three_d = s.dim() == 3
    s4 = s[:, None] if three_d else s  # (B, h, b, b): one head axis for the indices
    out = score_mod(s4, *mod_indices(s4.size(0), s4.size(1), i0, i1, j0, j1, s.device))
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise TypeError(f"a score_mod must return a float tensor (the new scores), got "
                        f"{out.dtype if isinstance(out, torch.Tensor) else type(out).__name__}")
    try:
        out = out.to(s.dtype).broadcast_to(s4.shape)
    except RuntimeError as err:
        raise ValueError(f"the score_mod returned shape {tuple(out.shape)}, which does not "
                         f"broadcast to the tile's {tuple(s4.shape)}") from err
    return out[:, 0] if three_d else out


def _score_mod_vjp(score_mod: ScoreMod, s: torch.Tensor, ds_mod: torch.Tensor, i0: int, i1: int,
                   j0: int, j1: int) -> torch.Tensor:
    """dL/ds from dL/ds' for s' = score_mod(s): the derivative if given, else autograd."""
    derivative = getattr(score_mod, "derivative", None)
    if derivative is not None:
        deriv = _score_tile(derivative, s, i0, i1, j0, j1)  # (B, b, b) f'(s), elementwise
        return ds_mod * deriv
    with torch.enable_grad():  # backward runs with grad off; the tile's local graph needs it
        s_leaf = s.detach().requires_grad_(True)
        (ds,) = torch.autograd.grad(_score_tile(score_mod, s_leaf, i0, i1, j0, j1), s_leaf,
                                    grad_outputs=ds_mod)
    return ds


def _captures_grad(fn) -> bool:
    """Whether a function's closure holds a tensor that requires grad (a learned table)."""
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, torch.Tensor) and value.requires_grad:
            return True
    return False


def _new_stats(T_q: int, T_k: int, block_size: int) -> dict:
    """Zeroed tile counts for a grid of ceil(T_q / b) × ceil(T_k / b) tiles."""
    tiles = -(-T_q // block_size) * -(-T_k // block_size)
    return {"tiles": tiles, "computed": 0, "skipped": tiles, "masked": 0, "full": 0}


def _count(stats: dict | None, kind: int) -> None:
    """Count one visited tile: skipped (empty) or computed with a mask (partial) or without."""
    if stats is None or kind == BLOCK_EMPTY:
        return  # every tile starts as skipped: only computed ones move
    stats["computed"] += 1
    stats["skipped"] -= 1
    stats["masked" if kind == BLOCK_PARTIAL else "full"] += 1
