"""The Triton kernels of Part VI: FlashAttention forward and backward, and Flash-Decoding.

This module imports Triton at the top, so import it only through
:func:`attnbook.gpu.triton_env.load_kernels`, which checks that Triton is installed and turns
on its interpreter when there is no GPU (``TRITON_INTERPRET=1`` must be set before Triton is
imported). The host functions that launch these kernels are in :mod:`attnbook.gpu.flash` and
:mod:`attnbook.gpu.decoding`.

Layout: every tensor is viewed as (B·h, T, d), contiguous, so one program finds its rows at
``bh * T * d``. ``D_PAD`` is the head width rounded up to a power of two (``tl.arange`` needs
one); the extra columns load as 0 and change no dot product. Masks follow attnbook: causal
blocks key ``j > i``; the padding mask (B, T) is 1 for real keys. A query with no visible key
keeps ``m = -inf`` and ``l = 0``, and gets the zero vector and ``lse = -inf``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, PAD, sm_scale, T, H, d,
                         CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D_PAD: tl.constexpr):
    """One program: one block of BLOCK_M queries of one (batch, head), looping over key blocks."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query positions
    cols_d = tl.arange(0, D_PAD)
    base = bh * T * d
    row_ok = rows < T  # the last block may run past the end
    q = tl.load(Q + base + rows[:, None] * d + cols_d[None, :],
                mask=row_ok[:, None] & (cols_d[None, :] < d), other=0.0)  # (BLOCK_M, D_PAD)
    acc_ty = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32
    m = tl.full([BLOCK_M], float("-inf"), acc_ty)  # running maximum, in registers
    l = tl.zeros([BLOCK_M], acc_ty)  # running sum of exponentials
    acc = tl.zeros([BLOCK_M, D_PAD], acc_ty)  # unnormalised output
    # Causal: key blocks that start after this block's last query are all in the future.
    hi = tl.minimum((pid_m + 1) * BLOCK_M, T) if CAUSAL else T
    for j0 in range(0, hi, BLOCK_N):
        cols = j0 + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
        kv_mask = (cols[:, None] < T) & (cols_d[None, :] < d)
        k = tl.load(K + base + cols[:, None] * d + cols_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + base + cols[:, None] * d + cols_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(acc_ty) * sm_scale
        visible = (cols[None, :] < T) & row_ok[:, None]  # (BLOCK_M, BLOCK_N)
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None])
        if HAS_PAD:
            real = tl.load(PAD + (bh // H) * T + cols, mask=cols < T, other=0)
            visible = visible & (real[None, :] != 0)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # no key seen yet: shift by 0
        p = tl.exp(s - shift[:, None])  # exactly 0 where blocked
        alpha = tl.exp(m - shift)  # rescales what the earlier blocks summed
        l = alpha * l + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]  # an empty row: 0 / 1, not 0 / 0
    tl.store(O + base + rows[:, None] * d + cols_d[None, :], out.to(O.dtype.element_ty),
             mask=row_ok[:, None] & (cols_d[None, :] < d))
    lse = tl.where(l == 0.0, float("-inf"), m + tl.log(tl.where(l == 0.0, 1.0, l)))
    tl.store(LSE + bh * T + rows, lse, mask=row_ok)  # -inf marks an empty row


@triton.jit
def flash_backward_kernel(Q, K, V, DO, LSE, DELTA, DQ, DK, DV, PAD, sm_scale, T, H, d,
                          CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, PRECISION: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D_PAD: tl.constexpr):
    """One program: one block of BLOCK_N keys, looping over the query blocks that see it.

    dK and dV of the key block stay in registers; each query block's share of dQ is added to
    DQ in memory with an atomic add, because many key blocks (programs) add to the same rows.
    """
    pid_n, bh = tl.program_id(0), tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key positions
    cols_d = tl.arange(0, D_PAD)
    base = bh * T * d
    col_ok = cols < T
    kv_mask = col_ok[:, None] & (cols_d[None, :] < d)
    k = tl.load(K + base + cols[:, None] * d + cols_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + base + cols[:, None] * d + cols_d[None, :], mask=kv_mask, other=0.0)
    acc_ty = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32
    dk = tl.zeros([BLOCK_N, D_PAD], acc_ty)
    dv = tl.zeros([BLOCK_N, D_PAD], acc_ty)
    key_ok = col_ok
    if HAS_PAD:
        real = tl.load(PAD + (bh // H) * T + cols, mask=col_ok, other=0)
        key_ok = key_ok & (real != 0)
    # Causal: query blocks that end before this key block's first key never see it.
    lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for i0 in range(lo, T, BLOCK_M):
        rows = i0 + tl.arange(0, BLOCK_M)
        row_ok = rows < T
        q_mask = row_ok[:, None] & (cols_d[None, :] < d)
        q = tl.load(Q + base + rows[:, None] * d + cols_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + base + rows[:, None] * d + cols_d[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE + bh * T + rows, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + bh * T + rows, mask=row_ok, other=0.0)  # D_i = dO_i · O_i
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(acc_ty) * sm_scale
        visible = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None])
        shift = tl.where(lse == float("-inf"), 0.0, lse)  # an empty row: every p is 0
        p = tl.where(visible, tl.exp(s - shift[:, None]), 0.0)  # (BLOCK_M, BLOCK_N) recomputed
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PRECISION).to(acc_ty)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION).to(acc_ty)  # dO Vᵀ
        ds = p * (dp - delta[:, None])  # the softmax backward
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PRECISION).to(acc_ty)
        dq = tl.dot(ds.to(k.dtype), k, input_precision=PRECISION).to(acc_ty) * sm_scale
        tl.atomic_add(DQ + base + rows[:, None] * d + cols_d[None, :], dq, mask=q_mask)
    tl.store(DK + base + cols[:, None] * d + cols_d[None, :],
             (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + base + cols[:, None] * d + cols_d[None, :], dv.to(DV.dtype.element_ty),
             mask=kv_mask)


@triton.jit
def flash_decoding_split_kernel(Q, K, V, O_PART, LSE_PART, PAD, sm_scale, T, H, d, chunk,
                                HAS_PAD: tl.constexpr, PRECISION: tl.constexpr,
                                BLOCK_N: tl.constexpr, D_PAD: tl.constexpr):
    """One program: one query (one batch, head) against one chunk of its keys."""
    split, bh = tl.program_id(0), tl.program_id(1)
    n_split = tl.num_programs(0)
    cols_d = tl.arange(0, D_PAD)
    q = tl.load(Q + bh * d + cols_d, mask=cols_d < d, other=0.0)  # (D_PAD,) the one query
    acc_ty = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32
    m = tl.full([1], float("-inf"), acc_ty)
    l = tl.zeros([1], acc_ty)
    acc = tl.zeros([D_PAD], acc_ty)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, T)
    for j0 in range(lo, hi, BLOCK_N):
        cols = j0 + tl.arange(0, BLOCK_N)
        kv_mask = (cols[:, None] < hi) & (cols_d[None, :] < d)
        k = tl.load(K + bh * T * d + cols[:, None] * d + cols_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + bh * T * d + cols[:, None] * d + cols_d[None, :], mask=kv_mask, other=0.0)
        s = tl.sum(q[None, :].to(acc_ty) * k.to(acc_ty), 1) * sm_scale  # (BLOCK_N,) one row
        visible = cols < hi
        if HAS_PAD:
            real = tl.load(PAD + (bh // H) * T + cols, mask=cols < hi, other=0)
            visible = visible & (real != 0)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - shift)  # (BLOCK_N,)
        alpha = tl.exp(m - shift)
        l = alpha * l + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(acc_ty), 0)
        m = m_new
    out = acc / tl.where(l == 0.0, 1.0, l)
    tl.store(O_PART + (bh * n_split + split) * d + cols_d, out, mask=cols_d < d)
    lse = tl.where(l == 0.0, float("-inf"), m + tl.log(tl.where(l == 0.0, 1.0, l)))
    tl.store(LSE_PART + bh * n_split + split + tl.arange(0, 1), lse)


@triton.jit
def flash_decoding_merge_kernel(O_PART, LSE_PART, O, n_split, d,
                                S_PAD: tl.constexpr, D_PAD: tl.constexpr):
    """One program per query: merge its partial outputs with the online-softmax rule."""
    bh = tl.program_id(0)
    splits = tl.arange(0, S_PAD)
    cols_d = tl.arange(0, D_PAD)
    lse = tl.load(LSE_PART + bh * n_split + splits, mask=splits < n_split, other=float("-inf"))
    part = tl.load(O_PART + (bh * n_split + splits[:, None]) * d + cols_d[None, :],
                   mask=(splits[:, None] < n_split) & (cols_d[None, :] < d), other=0.0)
    m = tl.max(lse, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)  # every split empty: all weights 0
    w = tl.exp(lse - shift)  # (S_PAD,) each split's share, exp(lse_s - m)
    total = tl.sum(w, 0)
    out = tl.sum(w[:, None] * part, 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(O + bh * d + cols_d, out.to(O.dtype.element_ty), mask=cols_d < d)
