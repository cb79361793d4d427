"""FlashAttention in Triton: the host side that checks the shapes and launches the kernels.

``flash_attention`` is a drop-in for :meth:`attnbook.Attention.attend`'s output (steps 2 to 6)
with the same masks, shapes and empty-row policy, plus what a KV cache produces: fewer key/value
heads than query heads (grouped-query attention) and fewer queries than keys (the causal
triangle aligned bottom-right). Gradients flow through ``FlashAttention``, whose backward
recomputes the weights from the saved log-sum-exp. The kernels are in
:mod:`attnbook.gpu.kernels`; on a machine without a GPU they run in Triton's interpreter.
"""

from __future__ import annotations

import math
import warnings

import torch

from .configs import (
    LaunchConfig,
    backward_config,
    check_fits,
    default_precision,
    device_arch,
    forward_config,
    smaller_config,
)
from .triton_env import check_device, check_interpretable, load_kernels

LOG2E = 1.4426950408889634  # log2(e): the kernels use exp2, so the scale carries it
PRECISIONS = ("ieee", "tf32", "tf32x3")


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    causal: bool = True,
    block_m: int | None = None,
    block_n: int | None = None,
    precision: str | None = None,
) -> torch.Tensor:
    """Attention (steps 2 to 6) computed by the Triton kernels of Part VI.

    Args:
        q, k, v: queries, keys and values, already projected; read in place (any strides with
            the last one 1), never copied.
        padding_mask: True for real keys, False for padding; None if all are real.
        causal: block keys in the future of each query: query ``i`` sees keys
            ``j <= i + T_k - T_q`` (with ``T_q = T_k``, the usual ``j <= i``; with fewer
            queries, they are the last ``T_q`` positions, as in a KV cache).
        block_m, block_n: queries per program and keys per step of its loop (powers of 2);
            None takes them from the device's row of :mod:`attnbook.gpu.configs`.
        precision: ``tl.dot``'s input precision for float32 inputs: ``"ieee"``, ``"tf32"``
            (one TF32 product, 10 mantissa bits) or ``"tf32x3"`` (three, about float32's
            accuracy); None: ``"tf32x3"`` on sm80 and newer, ``"ieee"`` elsewhere. The
            interpreter ignores it.

    Returns:
        The outputs, equal to :meth:`attnbook.Attention.attend` up to rounding. A query with no
        visible key outputs zeros and passes zero gradients.

    Raises:
        ValueError: shapes, dtypes or devices that do not fit together (the message says what
            was expected), block sizes that are not powers of 2, an unknown precision.
        attnbook.gpu.configs.DoesNotFit: (a ValueError) on a GPU, a head width whose kernel
            does not fit its shared memory (the backward's too, when an input requires grad),
            before any launch.
        NotImplementedError: bfloat16 in Triton's interpreter, which computes it wrongly.

    Shape:
        q: (B, T_q, d) or (B, h, T_q, d_h); k, v: (B, T_k, d) or (B, h_kv, T_k, d_h) with h a
        multiple of h_kv; padding_mask: (B, T_k) -> same as q
    """
    check_shapes(q, k, v, padding_mask)
    load_kernels()
    check_interpretable(q.dtype)
    arch, d = device_arch(q.device), q.size(-1)
    check_fits("forward", arch, q.dtype, d)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        check_fits("backward", arch, q.dtype, d)  # refuse now, not after the forward
    cfg = forward_config(arch, q.dtype, d)
    block_m, block_n = block_m or cfg.block_m, block_n or cfg.block_n
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        check_block(name, value)
    if precision is None:
        precision = default_precision(device_arch(q.device), q.dtype)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} or None, got {precision!r}")
    return FlashAttention.apply(q, k, v, padding_mask, causal, block_m, block_n, precision)


MIN_BLOCK = 16
"""The smallest block: ``tl.dot`` on a GPU needs every side of its tiles to be at least 16."""


def check_block(name: str, value: int) -> None:
    """Refuse a block size that is not a power of 2 or below :data:`MIN_BLOCK`.

    The interpreter would run blocks of 8, but a compiled ``tl.dot`` would not, so the library
    refuses them everywhere rather than pass a test here that fails on a GPU.
    """
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a power of 2, got {value}")
    if value < MIN_BLOCK:
        raise ValueError(f"{name} must be at least {MIN_BLOCK} (tl.dot's smallest tile on a "
                         f"GPU), got {value}")


def launch_with_fallback(kernel: str, launch, cfg: LaunchConfig, arch, dtype, d) -> LaunchConfig:
    """Call ``launch(cfg)``; on ``OutOfResources`` retry with the table's next smaller launch.

    The compile check measures every launch under the pinned Triton; another release or another
    GPU may ask for more shared memory. Each retry says so with a warning naming both
    configurations; with none smaller left, the last error is raised.

    Returns:
        The configuration that launched.
    """
    from triton.runtime.errors import OutOfResources

    while True:
        try:
            launch(cfg)
            return cfg
        except OutOfResources as err:
            smaller = smaller_config(kernel, arch, dtype, d, cfg)
            if smaller is None:
                raise
            warnings.warn(f"the {kernel} kernel ran out of resources with {cfg} ({err}); "
                          f"retrying with {smaller}", RuntimeWarning, stacklevel=3)
            cfg = smaller


MAX_GRID = 2**31 - 1
"""CUDA's limit on a grid's axis 0 (axes 1 and 2 stop at 65,535, which is why every kernel
here folds its programs into axis 0)."""


def launch_grid(blocks: int, heads: int) -> int:
    """Programs of a one-axis grid: ``blocks`` per head (fastest) times ``heads`` (batch·head).

    Raises:
        ValueError: more than :data:`MAX_GRID` programs.
    """
    n = blocks * heads
    if n > MAX_GRID:
        raise ValueError(f"{blocks} blocks x {heads} (batch, head) pairs = {n} programs, past "
                         f"CUDA's {MAX_GRID} on a grid's axis 0; use larger blocks or fewer "
                         "sequences per call")
    return n


def check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 padding_mask: torch.Tensor | None) -> None:
    """Raise a ValueError naming what was expected when q, k, v and the mask do not fit."""
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError("q, k, v must all be (B, T, d) or all (B, h, T, d_h); got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if k.size(0) != q.size(0) or k.size(-1) != q.size(-1):
        raise ValueError(f"k must have q's batch and head width: expected ({q.size(0)}, ..., "
                         f"{q.size(-1)}), got {tuple(k.shape)}")
    if q.dim() == 4 and q.size(1) % k.size(1):
        raise ValueError(f"q has {q.size(1)} heads and k, v have {k.size(1)}: the query heads "
                         "must be a multiple of the key/value heads (grouped-query attention)")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float16, torch.bfloat16,
                                                             torch.float32, torch.float64):
        raise ValueError("q, k, v must share one floating dtype (float16, bfloat16, float32 or "
                         f"float64), got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if padding_mask is not None and tuple(padding_mask.shape) != (q.size(0), k.size(-2)):
        raise ValueError(f"padding_mask must be (B, T_k) = ({q.size(0)}, {k.size(-2)}), True for "
                         f"real keys; got {tuple(padding_mask.shape)}")


def flash_forward(q, k, v, padding_mask, causal, block_m, block_n, precision,
                  cfg: LaunchConfig | None = None):
    """Launch the forward kernel: one program per (query block, batch·head).

    Returns:
        ``out`` and the log-sum-exp ``lse`` of each query (``-inf`` for an empty row).

    Shape:
        q: (B, h, T_q, d), k, v: (B, h_kv, T_k, d), last stride 1; padding_mask: (B, T_k) or
        None -> (B, h, T_q, d) contiguous, (B, h, T_q)
    """
    kernels = load_kernels()
    check_device(q, k, v)
    B, h, T_q, d = q.shape
    h_kv, T_k = k.size(1), k.size(2)
    arch = device_arch(q.device)
    cfg = cfg or forward_config(arch, q.dtype, d)
    out = torch.empty((B, h, T_q, d), device=q.device, dtype=q.dtype)
    lse = torch.empty((B, h, T_q), device=q.device, dtype=_acc_dtype(q))
    if out.numel() == 0:
        return out, lse.fill_(float("-inf"))
    pad = _pad_arg(padding_mask, q)

    def launch(c: LaunchConfig) -> None:
        bm, bn = (block_m, block_n) if c is cfg else (c.block_m, c.block_n)  # a retry: the row's
        grid = (launch_grid(math.ceil(T_q / bm), B * h),)  # (batch·head, query block), one axis
        kernels.flash_forward_kernel[grid](
            q, k, v, out, lse, pad, LOG2E / math.sqrt(d), T_q, T_k, h,
            h // h_kv, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            CAUSAL=causal, HAS_PAD=padding_mask is not None, PRECISION=precision,
            BLOCK_M=bm, BLOCK_N=bn, D=d, D_PAD=_d_pad(d),
            num_warps=c.num_warps, num_stages=c.num_stages)

    launch_with_fallback("forward", launch, cfg, arch, q.dtype, d)
    return out, lse


def flash_backward(dout, q, k, v, out, lse, padding_mask, causal, block_m, block_n, precision,
                   cfg: LaunchConfig | None = None):
    """Launch the backward kernel: one program per (key block, batch·key/value head).

    ``D = rowsum(dO ∘ O)`` is one small pass here in PyTorch; dQ is accumulated in an
    ``atomic_add`` buffer of the accumulation type, then cast to q's type.

    Shape:
        q, dout, out: (B, h, T_q, d), k, v: (B, h_kv, T_k, d), lse (B, h, T_q)
        -> dq (B, h, T_q, d), dk, dv (B, h_kv, T_k, d)
    """
    kernels = load_kernels()
    B, h, T_q, d = q.shape
    h_kv, T_k = k.size(1), k.size(2)
    arch = device_arch(q.device)
    cfg = cfg or backward_config(arch, q.dtype, d)
    dout = dout.contiguous()  # read as contiguous (B, h, T_q, d), like out and dq
    delta = (dout.to(lse.dtype) * out.to(lse.dtype)).sum(-1)  # (B, h, T_q): D_i = dO_i · O_i
    dq = torch.zeros((B, h, T_q, d), device=q.device, dtype=lse.dtype)  # atomic adds land here
    dk = torch.empty((B, h_kv, T_k, d), device=q.device, dtype=k.dtype)
    dv = torch.empty((B, h_kv, T_k, d), device=q.device, dtype=v.dtype)
    if T_k == 0 or T_q == 0 or B == 0:
        return dq.to(q.dtype), dk.zero_(), dv.zero_()
    pad = _pad_arg(padding_mask, q)

    def launch(c: LaunchConfig) -> None:
        bm, bn = (block_m, block_n) if c is cfg else (c.block_m, c.block_n)
        if c is not cfg:  # a retry: the launch that failed may have added to dq
            dq.zero_()
        grid = (launch_grid(math.ceil(T_k / bn), B * h_kv),)  # (batch·kv head, key block)
        kernels.flash_backward_kernel[grid](
            q, k, v, dout, lse, delta, dq, dk, dv, pad,
            LOG2E / math.sqrt(d), 1.0 / math.sqrt(d), T_q, T_k, h_kv, h // h_kv,
            *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            CAUSAL=causal, HAS_PAD=padding_mask is not None, PRECISION=precision,
            BLOCK_M=bm, BLOCK_N=bn, D=d, D_PAD=_d_pad(d),
            num_warps=c.num_warps, num_stages=c.num_stages)

    launch_with_fallback("backward", launch, cfg, arch, q.dtype, d)
    return dq.to(q.dtype), dk, dv


class FlashAttention(torch.autograd.Function):
    """The Triton forward and backward as one differentiable function; saves only O(T d)."""

    @staticmethod
    def forward(ctx, q, k, v, padding_mask, causal, block_m, block_n, precision):
        three_d = q.dim() == 3
        q4, k4, v4 = (_as_4d(t) for t in (q, k, v))  # (B, h, T, d), h = 1 for one head
        out, lse = flash_forward(q4, k4, v4, padding_mask, causal, block_m, block_n, precision)
        ctx.save_for_backward(q4, k4, v4, out, lse, padding_mask)
        ctx.settings = (causal, block_m, block_n, precision, three_d)
        return out[:, 0] if three_d else out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, padding_mask = ctx.saved_tensors
        causal, block_m, block_n, precision, three_d = ctx.settings
        dout4 = dout[:, None] if three_d else dout
        check_fits("backward", device_arch(q.device), q.dtype, q.size(-1))
        cfg = backward_config(device_arch(q.device), q.dtype, q.size(-1))
        grads = flash_backward(dout4, q, k, v, out, lse, padding_mask, causal,
                               min(block_m, cfg.block_m), min(block_n, cfg.block_n),
                               precision, cfg)
        if three_d:
            grads = tuple(g[:, 0] for g in grads)
        return (*grads, None, None, None, None, None)


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    """(B, T, d) -> (B, 1, T, d), a view; a copy only when the last stride is not 1."""
    t = t[:, None] if t.dim() == 3 else t
    return t if t.stride(-1) == 1 else t.contiguous()


def _d_pad(d: int) -> int:
    """The head width rounded up to a power of 2, at least 16 (the smallest ``tl.dot``)."""
    return max(16, 1 << (d - 1).bit_length())


def _acc_dtype(q: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else accumulates in float32."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _pad_arg(padding_mask: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """The padding mask as int8 for the kernel (1 = real key); a dummy when there is none."""
    if padding_mask is None:
        return torch.empty(1, device=q.device, dtype=torch.int8)
    return padding_mask.to(device=q.device, dtype=torch.int8).contiguous()
