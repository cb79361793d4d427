"""Flash-Decoding: one new query per sequence, its keys split across programs, then merged.

In generation (Chapter 12) each step has one query per (batch, head). FlashAttention's grid,
(query blocks) x (batch·head), then has only B·h programs, too few to fill a GPU. Flash-Decoding
(Dao et al., 2023) also splits the keys into ``n_split`` chunks, one program each, and merges
the partial results with the online-softmax rule of Chapter 10 (exercise "merge").
"""

from __future__ import annotations

import math

import torch

from ..checks import check_finite, check_padding_mask, check_whole_number
from .configs import check_fits, decoding_config, default_precision, device_arch
from .flash import (
    LOG2E,
    _as_4d,
    _d_pad,
    _pad_arg,
    check_block,
    check_shapes,
    launch_grid,
    launch_with_fallback,
)
from .triton_env import check_device, check_interpretable, load_kernels


def check_decoding_inputs(caller: str, q, k, v, padding_mask, n_split) -> None:
    """The checks :func:`flash_decoding` and :func:`split_partials` share, before any work.

    :func:`attnbook.gpu.flash.check_shapes` (dimensions, shapes, dtypes, devices), then: one
    query, a head width of at least 1, a bool padding mask, and ``n_split`` a whole number >= 1.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{caller}: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_shapes(q, k, v, padding_mask if isinstance(padding_mask, torch.Tensor) else None)
    if q.size(-2) != 1:
        raise ValueError(f"{caller} takes one query per sequence and head, (B, 1, d) or "
                         f"(B, h, 1, d_h); got q of shape {tuple(q.shape)} "
                         "(use flash_attention for several queries)")
    if q.size(-1) < 1:
        raise ValueError(f"{caller}: the head width d must be at least 1, got q of shape "
                         f"{tuple(q.shape)}")
    if padding_mask is not None:  # a tensor, its shape checked above; here: bool
        check_padding_mask(padding_mask, q.size(0), k.size(-2))
    check_whole_number("n_split", n_split, 1)


def split_count(B: int, h_kv: int, T: int, n_sm: int, *, block_n: int = 16,
                rule: str = "fill") -> int:
    """How many splits Flash-Decoding's grid needs: the split rule of Chapter 19.

    The split kernel's grid is ``n_split · B · h_kv`` programs (one per key/value head: the
    ``g`` query heads that share it are rows of one tile), so the rules count ``B · h_kv``,
    not ``B · h``. Neither splits finer than one key block: at most ``ceil(T / block_n)``.

    - ``"fill"``: the fewest splits that give every SM at least one program,
      ``ceil(n_sm / (B · h_kv))``.
    - ``"waves"``: FlashAttention's ``num_splits_heuristic`` (flash-attn 2, ``flash_api.cpp``):
      one split if ``B · h_kv`` already reaches 80% of the SMs; otherwise the fewest splits
      ``n`` whose wave efficiency ``w / ceil(w)`` (``w = n · B · h_kv / n_sm``, the waves of
      programs) is at least 85% of the best ``n``'s, over at most 128 splits and only counts
      that change the number of key blocks per split. The efficiency is not the last wave's
      fill: 16 programs on 132 SMs with 9 splits have efficiency 144/264 (0.55) and a last
      wave 12/132 (9%) full; the rule takes 8 (one wave, 128/132).

    Args:
        B, h_kv: batch size and key/value heads. T: keys per sequence. n_sm: the GPU's SMs.
        block_n: keys per step of a program's loop. rule: ``"fill"`` or ``"waves"``.

    Returns:
        The number of splits, at least 1.
    """
    for name, value in (("B", B), ("h_kv", h_kv), ("T", T), ("n_sm", n_sm), ("block_n", block_n)):
        check_whole_number(name, value, 0 if name == "T" else 1)
    programs, blocks = B * h_kv, max(1, math.ceil(T / block_n))
    if rule == "fill":
        return max(1, min(math.ceil(n_sm / programs), blocks))
    if rule != "waves":
        raise ValueError(f"rule must be 'fill' or 'waves', got {rule!r}")
    if programs >= 0.8 * n_sm:
        return 1
    most = min(128, n_sm, blocks)

    def eligible(n: int) -> bool:  # 12 splits of 64 blocks are 11 splits of 6: skip 12
        return n == 1 or math.ceil(blocks / n) != math.ceil(blocks / (n - 1))

    eff = {n: programs * n / n_sm / math.ceil(programs * n / n_sm)
           for n in range(1, most + 1) if eligible(n)}
    best = max(eff.values())
    return min(n for n, e in eff.items() if e >= 0.85 * best)


def sm_count(device: torch.device) -> int:
    """The SMs of a CUDA device; 1 elsewhere (the interpreter runs one program at a time)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def flash_decoding(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    n_split: int | None = None,
    block_n: int | None = None,
    return_partials: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention of one query per sequence to all of its keys, the keys split ``n_split`` ways.

    The query is the newest token, so every key in the cache is at or before it: no causal
    mask is needed. The padding mask (True = real) masks keys, as everywhere in attnbook; a
    query with no real key gets the zero vector. With grouped-query attention (``h_kv < h``),
    the ``h / h_kv`` query heads that share a key/value head are computed by one program from
    one read of that head's keys and values.

    Args:
        q: the new query of each sequence (and head).
        k, v: the cached keys and values, the new token's included; read in place through
            their strides (a slice ``cache.k[:, :, :L]`` of a :class:`attnbook.KVCache` is not
            copied).
        padding_mask: True for real keys, False for padding; None if all are real.
        n_split: how many programs share one query's keys; None applies the split rule,
            :func:`split_count` with ``"fill"`` for the device's SMs (one split on the CPU).
        block_n: keys per step of each program's loop (a power of 2); None takes it from
            :func:`attnbook.gpu.configs.decoding_config`.
        return_partials: also return what the split kernel wrote: each split's normalised
            partial output and log-sum-exp, in :func:`merge_partials`'s layout.

    Returns:
        The output of the one query, the same as attending with :class:`attnbook.Attention`
        from the last position. With ``return_partials``: ``(out, outs, lses)``, where
        ``merge_partials(outs, lses)`` is ``out`` (up to the final cast to q's dtype).

    Raises:
        ValueError: a q with more than one query, shapes that do not fit together (see
            :func:`check_decoding_inputs`), or a ``block_n`` that is not a power of 2.
        TypeError: a padding mask that is not bool, ``n_split`` or ``block_n`` not an int, or
            a ``return_partials`` that is not a bool.
        NotImplementedError: bfloat16 in Triton's interpreter, which computes it wrongly.

    Shape:
        q: (B, 1, d) or (B, h, 1, d_h); k, v: (B, T, d) or (B, h_kv, T, d_h), h a multiple of
        h_kv; padding_mask: (B, T) -> same as q; with ``return_partials`` also
        outs: (n_split, *q.shape) and lses: (n_split, *q.shape[:-1], 1), float32 (float64 for
        float64 inputs)
    """
    check_decoding_inputs("flash_decoding", q, k, v, padding_mask,
                          1 if n_split is None else n_split)
    if block_n is not None:
        check_block("block_n", check_whole_number("block_n", block_n, 1))
    if not isinstance(return_partials, bool):
        raise TypeError(f"return_partials must be True or False, got {return_partials!r}")
    kernels = load_kernels()
    check_device(q, k, v)
    check_interpretable(q.dtype)
    three_d = q.dim() == 3
    q4, k4, v4 = (_as_4d(t) for t in (q, k, v))  # views: (B, h, 1, d), (B, h_kv, T, d)
    B, h, _, d = q4.shape
    h_kv, T = k4.size(1), k4.size(2)
    arch = device_arch(q.device)
    check_fits("decode", arch, q.dtype, d)
    cfg = decoding_config(arch, q.dtype, d)
    block_n = cfg.block_n if block_n is None else block_n
    if n_split is None:
        n_split = split_count(B, h_kv, T, sm_count(q.device), block_n=block_n)
    chunk = math.ceil(T / n_split) if T else 1  # keys per program
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    o_part = torch.empty((B, h, n_split, d), device=q.device, dtype=acc)
    lse_part = torch.empty((B, h, n_split), device=q.device, dtype=acc)
    G = h // h_kv  # query heads per key/value head: the rows of one tile
    pad = _pad_arg(padding_mask, q)

    def launch(c) -> None:
        kernels.flash_decoding_split_kernel[(launch_grid(n_split, B * h_kv),)](
            q4, k4, v4, o_part, lse_part, pad, LOG2E / math.sqrt(d), T,
            h_kv, G, chunk, n_split, q4.stride(0), q4.stride(1), *k4.stride()[:3], *v4.stride()[:3],
            HAS_PAD=padding_mask is not None, PRECISION=default_precision(arch, q.dtype),
            BLOCK_N=block_n if c is cfg else c.block_n, G_PAD=g_pad(G), D=d, D_PAD=_d_pad(d),
            num_warps=c.num_warps, num_stages=c.num_stages)

    launch_with_fallback("decode", launch, cfg, arch, q.dtype, d)
    out = torch.empty((B, h, 1, d), device=q.device, dtype=q.dtype)
    kernels.flash_decoding_merge_kernel[(launch_grid(1, B * h),)](
        o_part, lse_part, out, n_split, S_PAD=max(2, 1 << (n_split - 1).bit_length()),
        D=d, D_PAD=_d_pad(d))
    out = out[:, 0] if three_d else out
    if not return_partials:
        return out
    outs = o_part.permute(2, 0, 1, 3).unsqueeze(3)  # (n_split, B, h, 1, d)
    lses = lse_part.permute(2, 0, 1)[..., None, None]  # (n_split, B, h, 1, 1)
    if three_d:
        outs, lses = outs[:, :, 0], lses[:, :, 0]  # (n_split, B, 1, d), (n_split, B, 1, 1)
    return out, outs, lses


def g_pad(g: int) -> int:
    """Rows of the split kernel's query tile: ``g`` rounded up to a power of 2, at least 16.

    ``tl.dot`` on a GPU needs 16 rows, so with one query head per key/value head (``g = 1``)
    15 of the 16 rows are padding: the scores' dot does 16 times the work one query needs. On
    the tensor cores (sm80 on) that costs no time, since one ``mma`` tile is 16 rows anyway; on
    the T4, where Triton lowers ``tl.dot`` to FMA, it is 16 times the multiply-adds (Chapter 19).
    """
    return max(16, 1 << (g - 1).bit_length())


def split_partials(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    n_split: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What Flash-Decoding's split programs compute, in PyTorch: no Triton, any device.

    The keys are cut as :func:`flash_decoding` cuts them, into chunks of ``ceil(T / n_split)``
    (the last ones shorter, or empty); each split attends to its chunk alone and keeps its
    normalised output and log-sum-exp, in float32 (float64 for float64 inputs). A split that
    sees no real key has output 0 and log-sum-exp ``-inf``. ``merge_partials(outs, lses)`` is
    the attention output over all keys.

    Args:
        q: the new query of each sequence (and head).
        k, v: the cached keys and values; with grouped-query attention fewer heads than q.
        padding_mask: True for real keys, False for padding; None if all are real.
        n_split: how many chunks the keys are cut into.

    Returns:
        ``(outs, lses)``, each split's partial output and log-sum-exp.

    Raises:
        ValueError: a q with more than one query, shapes that do not fit together, or
            ``n_split < 1`` (see :func:`check_decoding_inputs`); NaN or an infinity in q, k, v.
        TypeError: a padding mask that is not bool, or an ``n_split`` that is not an int.

    Shape:
        q: (B, 1, d) or (B, h, 1, d_h); k, v: (B, T, d) or (B, h_kv, T, d_h); padding_mask:
        (B, T) -> outs: (n_split, *q.shape), lses: (n_split, *q.shape[:-1], 1)
    """
    check_decoding_inputs("split_partials", q, k, v, padding_mask, n_split)
    check_finite("split_partials", q=q, k=k, v=v)
    if padding_mask is not None:  # as flash_decoding does: the mask follows q's device
        padding_mask = padding_mask.to(q.device)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    q4, k4, v4 = (_as_4d(t).to(acc) for t in (q, k, v))  # (B, h, 1, d), (B, h_kv, T, d)
    g = q4.size(1) // k4.size(1)  # query heads per key/value head: head c*g + i reads head c
    k4, v4 = k4.repeat_interleave(g, dim=1), v4.repeat_interleave(g, dim=1)  # (B, h, T, d)
    T = k4.size(2)
    s = q4 @ k4.transpose(-2, -1) / math.sqrt(q4.size(-1))  # (B, h, 1, T)
    if padding_mask is not None:
        s = s.masked_fill(~padding_mask[:, None, None, :], float("-inf"))
    chunk = math.ceil(T / n_split) if T else 1
    outs, lses = [], []
    for split in range(n_split):
        part = slice(min(split * chunk, T), min((split + 1) * chunk, T))
        sp = s[..., part]  # (B, h, 1, c)
        lse = torch.logsumexp(sp, dim=-1, keepdim=True) if sp.size(-1) else \
            sp.new_full((*sp.shape[:-1], 1), float("-inf"))  # (B, h, 1, 1)
        w = torch.exp(sp - lse.masked_fill(lse == float("-inf"), 0.0))  # 0 where masked
        outs.append(w @ v4[..., part, :])  # (B, h, 1, d): 0 for a split with no real key
        lses.append(lse)
    outs, lses = torch.stack(outs), torch.stack(lses)  # (n_split, B, h, 1, d), (..., 1)
    if q.dim() == 3:
        outs, lses = outs[:, :, 0], lses[:, :, 0]
    return outs, lses


def merge_partials(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """Merge normalised partial outputs by their log-sum-exps (the merge kernel, in PyTorch).

    ``y = sum_s exp(L_s - m) y_s / sum_s exp(L_s - m)`` with ``m = max_s L_s``; a query whose
    every part is empty (``L_s = -inf``) gets zeros.

    Raises:
        ValueError: shapes that do not match as above (e.g. the two swapped), or NaN or
            ``+inf`` in ``lses`` (an empty part is ``-inf``).

    Shape:
        outs: (S, ..., d), lses: (S, ..., 1) -> (..., d)
    """
    if (outs.dim() != lses.dim() or outs.dim() < 2 or lses.size(-1) != 1
            or outs.shape[:-1] != lses.shape[:-1]):
        raise ValueError(f"outs must be (S, ..., d) and lses (S, ..., 1) with the same S and "
                         f"..., got outs {tuple(outs.shape)} and lses {tuple(lses.shape)}")
    if lses.device.type != "meta" and bool((lses.isnan() | (lses == float("inf"))).any()):
        raise ValueError("lses holds NaN or +inf; a part's log-sum-exp is finite, or -inf for "
                         "a part with no real key")
    m = lses.amax(dim=0)  # (..., 1)
    w = torch.exp(lses - m.masked_fill(m == float("-inf"), 0.0))  # (S, ..., 1)
    total = w.sum(dim=0)
    return (w * outs).sum(dim=0) / total.masked_fill(total == 0, 1.0)
