"""The Triton kernels of Part VI: FlashAttention forward and backward, and Flash-Decoding.

This module imports Triton at the top, so import it only through
:func:`attnbook.gpu.triton_env.load_kernels`, which checks that Triton is installed and turns
on its interpreter when there is no GPU (``TRITON_INTERPRET=1`` must be set before Triton is
imported). The host functions that launch these kernels are in :mod:`attnbook.gpu.flash` and
:mod:`attnbook.gpu.decoding`; the block sizes, warps and stages they launch with are in
:mod:`attnbook.gpu.configs`.

Layout: q, k, v are read in place through their strides, (B, h, T, d) with the last stride 1,
so a slice of a :class:`attnbook.KVCache` is not copied. Query head ``a`` reads key/value head
``a // G`` (grouped-query attention, ``G = h / h_kv``). Base offsets are 64-bit: ``B·h·T·d``
passes 2**31 elements long before a GPU runs out of memory, and so do the offsets inside a head
(``rows * stride_t``: a (B, T, h, d) view has ``stride_t = h·d``), so the strides along T are
widened to int64 on entry (:func:`wide`). The scales arrive as float64 kernel arguments
(a Python float would be passed as float32 to a compiled kernel) and are cast once to the
accumulation type: float64 inputs keep the scale's full precision. ``D_PAD`` is the head width ``D``
rounded up to a power of two (``tl.arange`` needs one); the extra columns load as 0 and change
no dot product.

Masks follow attnbook: causal blocks key ``j > i + T_k - T_q`` (the causal triangle aligned to
the bottom-right corner, as in a KV cache: the last query sees every key); the padding mask
(B, T_k) is 1 for real keys. A query with no visible key keeps ``m = -inf`` and ``l = 0``, and
gets the zero vector and ``lse = -inf``. Scores are kept in base 2: ``qk_scale`` is
``log2(e) / sqrt(d)``, so one multiply and ``exp2`` replace ``exp`` (``e^x = 2^(x log2 e)``);
the log-sum-exp is stored in natural units.
"""

from __future__ import annotations

import triton
import triton.language as tl

LN2 = tl.constexpr(0.6931471805599453)  # log(2): a base-2 log-sum-exp in natural units


@triton.jit
def head_offset(b, a, stride_b, stride_h):
    """The 64-bit offset of (batch b, head a): int32 products would wrap past 2**31."""
    return b.to(tl.int64) * stride_b + a.to(tl.int64) * stride_h


@triton.jit
def wide(x):
    """``x`` as an int64 scalar, so that products with it are 64-bit (a constexpr 1 as well)."""
    return tl.full([], x, tl.int64)


@triton.jit
def load_tile(ptrs, rows, n_rows, dims, D: tl.constexpr, D_PAD: tl.constexpr,
              CHECK_ROWS: tl.constexpr):
    """Load a (rows, D_PAD) tile; rows past ``n_rows`` and columns past ``D`` read as 0.

    The checks are compile-time choices: a tile known to lie inside the tensor, with
    ``D == D_PAD``, is loaded without any mask.
    """
    if CHECK_ROWS:
        mask = rows[:, None] < n_rows
        if D != D_PAD:
            mask = mask & (dims[None, :] < D)
        tile = tl.load(ptrs, mask=mask, other=0.0)
    else:
        if D != D_PAD:
            tile = tl.load(ptrs, mask=dims[None, :] < D, other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


@triton.jit
def forward_tile(acc, l, m, q, k_ptrs, v_ptrs, pad_ptrs, j0, rows, offset, qk_scale, T_k,
                 stride_kt, stride_vt, dims,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr,
                 PRECISION: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                 D_PAD: tl.constexpr):
    """One step of the online softmax over keys ``j0 .. j0 + BLOCK_N``.

    ``MASKED`` tiles may run past ``T_k`` or cross the causal diagonal; the others lie wholly
    inside and wholly in the past of every query of the block, and skip both comparisons.
    """
    cols = j0 + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
    k = load_tile(k_ptrs + j0 * stride_kt, cols, T_k, dims, D, D_PAD, MASKED)  # (BLOCK_N, D_PAD)
    v = load_tile(v_ptrs + j0 * stride_vt, cols, T_k, dims, D, D_PAD, MASKED)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(acc.dtype) * qk_scale  # base 2
    if MASKED:
        visible = cols[None, :] < T_k
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None] + offset)
        s = tl.where(visible, s, float("-inf"))
    if HAS_PAD:
        real = tl.load(pad_ptrs + cols, mask=cols < T_k, other=0)
        s = tl.where(real[None, :] != 0, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: shift by 0
    p = tl.math.exp2(s - shift[:, None])  # exactly 0 where blocked
    alpha = tl.math.exp2(m - shift)  # rescales what the earlier blocks summed
    l = alpha * l + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, l, m_new


@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, PAD, qk_scale: tl.float64, T_q, T_k, H, G,
                         stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                         stride_vb, stride_vh, stride_vt,
                         CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                         D_PAD: tl.constexpr):
    """One program: one block of BLOCK_M queries of one (batch, head), looping over key blocks.

    O (B, h, T_q, D) and LSE (B, h, T_q) are the host's contiguous outputs. The grid is
    one axis, query blocks fastest: CUDA caps axes 1 and 2 at 65,535 programs, and B·h alone
    passes that (B = 4096, h = 32), so (batch·head, query block) are folded into axis 0.
    """
    n_m = tl.cdiv(T_q, BLOCK_M)
    pid = tl.program_id(0)
    pid_m, bh = pid % n_m, pid // n_m
    b, a = bh // H, bh % H  # batch, query head
    stride_qt, stride_kt, stride_vt = wide(stride_qt), wide(stride_kt), wide(stride_vt)
    i0 = pid_m * BLOCK_M
    rows = i0 + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query positions
    dims = tl.arange(0, D_PAD)
    q = load_tile(Q + head_offset(b, a, stride_qb, stride_qh) + rows[:, None] * stride_qt
                  + dims[None, :], rows, T_q, dims, D, D_PAD, True)  # (BLOCK_M, D_PAD)
    k_ptrs = K + head_offset(b, a // G, stride_kb, stride_kh) + \
        tl.arange(0, BLOCK_N)[:, None] * stride_kt + dims[None, :]  # key head a // G
    v_ptrs = V + head_offset(b, a // G, stride_vb, stride_vh) + \
        tl.arange(0, BLOCK_N)[:, None] * stride_vt + dims[None, :]
    pad_ptrs = PAD + b.to(tl.int64) * T_k
    acc_ty = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32
    qk_scale = tl.full([], qk_scale, acc_ty)  # float64 stays exact; else rounded once
    m = tl.full([BLOCK_M], float("-inf"), acc_ty)  # running maximum (base 2), in registers
    l = tl.zeros([BLOCK_M], acc_ty)  # running sum of exponentials
    acc = tl.zeros([BLOCK_M, D_PAD], acc_ty)  # unnormalised output
    offset = T_k - T_q  # query i sits at position i + offset among the keys
    if CAUSAL:
        hi = tl.minimum(i0 + BLOCK_M + offset, T_k)  # keys past the block's last query: skipped
        # Key blocks that end at or before the block's first query see no mask at all.
        full = tl.maximum(i0 + offset + 1, 0) // BLOCK_N * BLOCK_N
    else:
        hi = T_k
        full = T_k // BLOCK_N * BLOCK_N  # every whole key block
    for j0 in range(0, full, BLOCK_N):  # off the diagonal: no comparisons
        acc, l, m = forward_tile(acc, l, m, q, k_ptrs, v_ptrs, pad_ptrs, j0, rows, offset,
                                 qk_scale, T_k, stride_kt, stride_vt, dims, False, CAUSAL,
                                 HAS_PAD, PRECISION, BLOCK_N, D, D_PAD)
    for j0 in range(full, hi, BLOCK_N):  # the diagonal tiles and the ragged end: masked
        acc, l, m = forward_tile(acc, l, m, q, k_ptrs, v_ptrs, pad_ptrs, j0, rows, offset,
                                 qk_scale, T_k, stride_kt, stride_vt, dims, True, CAUSAL,
                                 HAS_PAD, PRECISION, BLOCK_N, D, D_PAD)
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]  # an empty row: 0 / 1, not 0 / 0
    o_rows = bh.to(tl.int64) * T_q + rows
    o_mask = rows[:, None] < T_q
    if D != D_PAD:
        o_mask = o_mask & (dims[None, :] < D)
    tl.store(O + o_rows[:, None] * D + dims[None, :], out.to(O.dtype.element_ty), mask=o_mask)
    lse = tl.where(l == 0.0, float("-inf"), (m + tl.log2(tl.where(l == 0.0, 1.0, l))) * LN2)
    tl.store(LSE + o_rows, lse, mask=rows < T_q)  # -inf marks an empty row


@triton.jit
def backward_tile(dk, dv, k, v, key_ok, cols, i0, Q_head, DO_head, LSE_head, DELTA_head,
                  DQ_head, qk_scale, sm_scale, T_q, offset, stride_qt, dims,
                  MASKED: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
                  D: tl.constexpr, D_PAD: tl.constexpr):
    """One query block's share: dK and dV of the key block grow, dQ gets an atomic add."""
    rows = i0 + tl.arange(0, BLOCK_M)
    row_ok = rows < T_q
    rows64 = rows.to(tl.int64)  # T_q·D may pass 2**31 in a contiguous head too
    q = load_tile(Q_head + rows64[:, None] * stride_qt + dims[None, :], rows, T_q, dims, D,
                  D_PAD, True)  # (BLOCK_M, D_PAD); rows past T_q read 0 and add nothing
    do = load_tile(DO_head + rows64[:, None] * D + dims[None, :], rows, T_q, dims, D, D_PAD,
                   True)
    lse = tl.load(LSE_head + rows, mask=row_ok, other=0.0) * 1.4426950408889634  # base 2
    delta = tl.load(DELTA_head + rows, mask=row_ok, other=0.0)  # D_i = dO_i · O_i
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(dk.dtype) * qk_scale
    visible = key_ok[None, :]  # (1, BLOCK_N): real keys before T_k
    if MASKED:
        visible = visible & (cols[None, :] <= rows[:, None] + offset)
    shift = tl.where(lse == float("-inf"), 0.0, lse)  # an empty row: every p is 0
    p = tl.where(visible, tl.math.exp2(s - shift[:, None]), 0.0)  # (BLOCK_M, BLOCK_N) recomputed
    dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PRECISION).to(dk.dtype)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION).to(dk.dtype)  # dO Vᵀ
    ds = p * (dp - delta[:, None])  # the softmax backward
    dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PRECISION).to(dk.dtype)
    dq = tl.dot(ds.to(k.dtype), k, input_precision=PRECISION).to(dk.dtype) * sm_scale
    dq_mask = row_ok[:, None]
    if D != D_PAD:
        dq_mask = dq_mask & (dims[None, :] < D)
    # relaxed: the adds only need to be atomic, not ordered against other memory accesses (the
    # default, acq_rel, would order each one); dq is read only after the kernel has finished.
    tl.atomic_add(DQ_head + rows64[:, None] * D + dims[None, :], dq, mask=dq_mask, sem="relaxed")
    return dk, dv


@triton.jit
def flash_backward_kernel(Q, K, V, DO, LSE, DELTA, DQ, DK, DV, PAD, qk_scale: tl.float64,
                          sm_scale: tl.float64,
                          T_q, T_k, H_KV, G,
                          stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                          stride_vb, stride_vh, stride_vt,
                          CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
                          D_PAD: tl.constexpr):
    """One program: one block of BLOCK_N keys of one key/value head, looping over the query
    blocks of the G query heads that read it.

    dK and dV of the key block stay in registers and sum over the G heads; each query block's
    share of dQ is added to DQ in memory with an atomic add, because many key blocks
    (programs) add to the same rows. DO, DQ (B, h, T_q, D), DK, DV (B, h_kv, T_k, D), LSE and
    DELTA (B, h, T_q) are the host's contiguous tensors. One grid axis, key blocks fastest
    (as the forward's).
    """
    n_n = tl.cdiv(T_k, BLOCK_N)
    pid = tl.program_id(0)
    pid_n, bc = pid % n_n, pid // n_n
    b, c = bc // H_KV, bc % H_KV  # batch, key/value head
    stride_qt, stride_kt, stride_vt = wide(stride_qt), wide(stride_kt), wide(stride_vt)
    j0 = pid_n * BLOCK_N
    cols = j0 + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
    dims = tl.arange(0, D_PAD)
    k = load_tile(K + head_offset(b, c, stride_kb, stride_kh) + cols[:, None] * stride_kt
                  + dims[None, :], cols, T_k, dims, D, D_PAD, True)
    v = load_tile(V + head_offset(b, c, stride_vb, stride_vh) + cols[:, None] * stride_vt
                  + dims[None, :], cols, T_k, dims, D, D_PAD, True)
    acc_ty = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32
    qk_scale, sm_scale = tl.full([], qk_scale, acc_ty), tl.full([], sm_scale, acc_ty)
    dk = tl.zeros([BLOCK_N, D_PAD], acc_ty)
    dv = tl.zeros([BLOCK_N, D_PAD], acc_ty)
    key_ok = cols < T_k
    if HAS_PAD:
        real = tl.load(PAD + b.to(tl.int64) * T_k + cols, mask=key_ok, other=0)
        key_ok = key_ok & (real != 0)
    offset = T_k - T_q
    if CAUSAL:
        # Query i sees key j when j <= i + offset: rows before j0 - offset never see the block,
        # rows from j0 + BLOCK_N - 1 - offset on see all of it.
        lo = tl.maximum(j0 - offset, 0) // BLOCK_M * BLOCK_M
        full = tl.minimum((tl.maximum(j0 + BLOCK_N - 1 - offset, 0) + BLOCK_M - 1)
                          // BLOCK_M * BLOCK_M, T_q)
    else:
        lo = 0
        full = 0
    for g in range(0, G):  # the query heads that share this key/value head
        a = c * G + g
        q_head = Q + head_offset(b, a, stride_qb, stride_qh)
        row_head = (b.to(tl.int64) * (H_KV * G) + a) * T_q  # contiguous (B, h, T_q, ...)
        for i0 in range(lo, full, BLOCK_M):  # the diagonal tiles: causal mask
            dk, dv = backward_tile(dk, dv, k, v, key_ok, cols, i0, q_head, DO + row_head * D,
                                   LSE + row_head, DELTA + row_head, DQ + row_head * D,
                                   qk_scale, sm_scale, T_q, offset, stride_qt, dims, True,
                                   PRECISION, BLOCK_M, D, D_PAD)
        for i0 in range(tl.maximum(full, lo), T_q, BLOCK_M):  # wholly visible: no comparison
            dk, dv = backward_tile(dk, dv, k, v, key_ok, cols, i0, q_head, DO + row_head * D,
                                   LSE + row_head, DELTA + row_head, DQ + row_head * D,
                                   qk_scale, sm_scale, T_q, offset, stride_qt, dims, False,
                                   PRECISION, BLOCK_M, D, D_PAD)
    kv_rows = bc.to(tl.int64) * T_k + cols
    kv_mask = (cols < T_k)[:, None]
    if D != D_PAD:
        kv_mask = kv_mask & (dims[None, :] < D)
    tl.store(DK + kv_rows[:, None] * D + dims[None, :],
             (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + kv_rows[:, None] * D + dims[None, :], dv.to(DV.dtype.element_ty),
             mask=kv_mask)


@triton.jit
def flash_decoding_split_kernel(Q, K, V, O_PART, LSE_PART, PAD, qk_scale: tl.float64, T, H_KV,
                                G, chunk, n_split,
                                stride_qb, stride_qh, stride_kb, stride_kh, stride_kt,
                                stride_vb, stride_vh, stride_vt,
                                HAS_PAD: tl.constexpr, PRECISION: tl.constexpr,
                                BLOCK_N: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr,
                                D_PAD: tl.constexpr):
    """One program: the G queries that share one key/value head, against one chunk of keys.

    The G query heads are the rows of one (G_PAD, D_PAD) tile, so each key block is read once
    for all of them and the scores are one ``tl.dot``. O_PART (B, h, n_split, D) and
    LSE_PART (B, h, n_split) are the host's float32 (or float64) buffers. One grid axis,
    splits fastest: ``n_split · B · h_kv`` programs (axis 1 would stop at 65,535).
    """
    pid = tl.program_id(0)
    split, bc = pid % n_split, pid // n_split
    b, c = bc // H_KV, bc % H_KV
    stride_kt, stride_vt = wide(stride_kt), wide(stride_vt)
    heads = tl.arange(0, G_PAD)  # (G_PAD,) row g is query head c * G + g
    dims = tl.arange(0, D_PAD)
    q = load_tile(Q + b.to(tl.int64) * stride_qb + (c * G + heads)[:, None].to(tl.int64)
                  * stride_qh + dims[None, :], heads, G, dims, D, D_PAD, True)  # (G_PAD, D_PAD)
    k_ptrs = K + head_offset(b, c, stride_kb, stride_kh) + \
        tl.arange(0, BLOCK_N)[:, None] * stride_kt + dims[None, :]
    v_ptrs = V + head_offset(b, c, stride_vb, stride_vh) + \
        tl.arange(0, BLOCK_N)[:, None] * stride_vt + dims[None, :]
    acc_ty = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32
    qk_scale = tl.full([], qk_scale, acc_ty)
    m = tl.full([G_PAD], float("-inf"), acc_ty)
    l = tl.zeros([G_PAD], acc_ty)
    acc = tl.zeros([G_PAD, D_PAD], acc_ty)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, T)
    for j0 in range(lo, hi, BLOCK_N):
        cols = j0 + tl.arange(0, BLOCK_N)
        k = load_tile(k_ptrs + j0 * stride_kt, cols, hi, dims, D, D_PAD, True)
        v = load_tile(v_ptrs + j0 * stride_vt, cols, hi, dims, D, D_PAD, True)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(acc_ty) * qk_scale
        visible = cols < hi
        if HAS_PAD:
            real = tl.load(PAD + b.to(tl.int64) * T + cols, mask=visible, other=0)
            visible = visible & (real != 0)
        s = tl.where(visible[None, :], s, float("-inf"))  # (G_PAD, BLOCK_N)
        m_new = tl.maximum(m, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - shift[:, None])
        alpha = tl.math.exp2(m - shift)
        l = alpha * l + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]
    part = ((b.to(tl.int64) * (H_KV * G) + c * G + heads) * n_split + split)  # (G_PAD,)
    mask = heads[:, None] < G
    if D != D_PAD:
        mask = mask & (dims[None, :] < D)
    tl.store(O_PART + part[:, None] * D + dims[None, :], out, mask=mask)
    lse = tl.where(l == 0.0, float("-inf"), (m + tl.log2(tl.where(l == 0.0, 1.0, l))) * LN2)
    tl.store(LSE_PART + part, lse, mask=heads < G)


@triton.jit
def flash_decoding_merge_kernel(O_PART, LSE_PART, O, n_split,
                                S_PAD: tl.constexpr, D: tl.constexpr, D_PAD: tl.constexpr):
    """One program per query: merge its partial outputs with the online-softmax rule."""
    bh = tl.program_id(0).to(tl.int64)
    splits = tl.arange(0, S_PAD)
    dims = tl.arange(0, D_PAD)
    lse = tl.load(LSE_PART + bh * n_split + splits, mask=splits < n_split, other=float("-inf"))
    part = tl.load(O_PART + (bh * n_split + splits[:, None]) * D + dims[None, :],
                   mask=(splits[:, None] < n_split) & (dims[None, :] < D), other=0.0)
    m = tl.max(lse, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)  # every split empty: all weights 0
    w = tl.exp(lse - shift)  # (S_PAD,) each split's share, exp(lse_s - m)
    total = tl.sum(w, 0)
    out = tl.sum(w[:, None] * part, 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(O + bh * D + dims, out.to(O.dtype.element_ty), mask=dims < D)
