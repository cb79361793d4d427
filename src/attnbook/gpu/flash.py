"""FlashAttention in Triton: the host side that shapes the tensors and launches the kernels.

``flash_attention`` is a drop-in for :meth:`attnbook.Attention.attend`'s output (steps 2 to 6)
with the same masks, shapes and empty-row policy; gradients flow through ``FlashAttention``,
whose backward recomputes the weights from the saved log-sum-exp. The kernels are in
:mod:`attnbook.gpu.kernels`; on a machine without a GPU they run in Triton's interpreter.
"""

from __future__ import annotations

import math

import torch

from .triton_env import check_device, load_kernels


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    causal: bool = True,
    block_m: int = 64,
    block_n: int = 64,
    precision: str = "ieee",
) -> torch.Tensor:
    """Attention (steps 2 to 6) computed by the Triton kernels of Part VI.

    Args:
        q, k, v: queries, keys and values, already projected.
        padding_mask: True for real tokens, False for padding; None if all are real. It
            masks keys.
        causal: block keys in the future of each query (``j > i``).
        block_m, block_n: queries per program and keys per step of its loop (powers of 2).
        precision: ``tl.dot``'s input precision for float32: ``"ieee"`` (full float32, the
            default) or ``"tf32"`` (tensor cores, 10 mantissa bits). The interpreter ignores it.

    Returns:
        The outputs, equal to :meth:`attnbook.Attention.attend` up to rounding. A query with no
        visible key outputs zeros and passes zero gradients.

    Shape:
        q, k, v: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T) -> same as q
    """
    return FlashAttention.apply(q, k, v, padding_mask, causal, block_m, block_n, precision)


def flash_forward(q, k, v, padding_mask, causal, block_m, block_n, precision):
    """Launch the forward kernel: one program per (query block, batch·head).

    Returns:
        ``out`` and the log-sum-exp ``lse`` of each query (``-inf`` for an empty row).

    Shape:
        q, k, v: (B, h, T, d) contiguous; padding_mask: (B, T) or None -> (B, h, T, d), (B, h, T)
    """
    kernels = load_kernels()
    check_device(q, k, v)
    B, h, T, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty((B, h, T), device=q.device, dtype=_acc_dtype(q))
    pad = _pad_arg(padding_mask, q)
    grid = (math.ceil(T / block_m), B * h)  # query blocks x (batch, head): all independent
    kernels.flash_forward_kernel[grid](
        q, k, v, out, lse, pad, 1.0 / math.sqrt(d), T, h, d,
        CAUSAL=causal, HAS_PAD=padding_mask is not None, PRECISION=precision,
        BLOCK_M=block_m, BLOCK_N=block_n, D_PAD=_d_pad(d))
    return out, lse


def flash_backward(dout, q, k, v, out, lse, padding_mask, causal, block_m, block_n, precision):
    """Launch the backward kernel: one program per (key block, batch·head).

    ``D = rowsum(dO ∘ O)`` is one small pass here in PyTorch; dQ is accumulated in an
    ``atomic_add`` buffer of the accumulation type, then cast to q's type.

    Shape:
        all (B, h, T, d) contiguous, lse (B, h, T) -> dq, dk, dv (B, h, T, d)
    """
    kernels = load_kernels()
    B, h, T, d = q.shape
    delta = (dout.to(lse.dtype) * out.to(lse.dtype)).sum(-1)  # (B, h, T): D_i = dO_i · O_i
    dq = torch.zeros(q.shape, device=q.device, dtype=lse.dtype)  # atomic adds land here
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    pad = _pad_arg(padding_mask, q)
    grid = (math.ceil(T / block_n), B * h)  # key blocks x (batch, head)
    kernels.flash_backward_kernel[grid](
        q, k, v, dout, lse, delta, dq, dk, dv, pad, 1.0 / math.sqrt(d), T, h, d,
        CAUSAL=causal, HAS_PAD=padding_mask is not None, PRECISION=precision,
        BLOCK_M=block_m, BLOCK_N=block_n, D_PAD=_d_pad(d))
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
        grads = flash_backward(_as_4d(dout), q, k, v, out, lse, padding_mask, causal,
                               block_m, block_n, precision)
        if three_d:
            grads = tuple(g[:, 0] for g in grads)
        return (*grads, None, None, None, None, None)


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    """(B, T, d) -> (B, 1, T, d); (B, h, T, d) stays; both made contiguous for the kernels."""
    return (t[:, None] if t.dim() == 3 else t).contiguous()


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
