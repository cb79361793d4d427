"""The fused path: steps 2 to 6 in one call to PyTorch's ``scaled_dot_product_attention``.

``F.scaled_dot_product_attention`` (SDPA) picks a kernel at run time. On CPU its flash kernel
walks over tiles like :mod:`attnbook.online`, in compiled code, and never stores the (T, T)
weights. Three facts decide whether you get that kernel and the same answer as the explicit
module:

* the CPU flash kernel takes only 4-D input ``(B, h, T, d)``; 3-D input falls back to the
  "math" kernel, which builds the whole matrix. One head is therefore passed as ``h = 1``;
* ``is_causal=True`` together with ``attn_mask`` raises on the math kernel (3-D input) and is
  accepted by the CPU flash kernel (4-D input), which applies both. We never pass both: with
  padding, the causal and the padding masks are merged into one bool mask (SDPA's convention:
  True = may attend), at the cost of a (B, 1, T, T) mask and of the masked tiles;
* a query that sees no real key must output zeros, as in the explicit module. PyTorch 2.13's
  CPU kernels return zeros there; other versions and kernels have returned NaN. We do not rely
  on either (see below).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .masks import blocked_positions, causal_mask, to_sdpa_mask


def sdpa_mask(padding_mask: torch.Tensor, T: int) -> torch.Tensor:
    """The causal and padding masks merged into SDPA's bool ``attn_mask`` (True = may attend).

    Args:
        padding_mask: True for real tokens, False for padding.
        T: number of tokens.

    Returns:
        True where query i may see key j: j <= i and key j is real.

    Shape:
        padding_mask: (B, T) -> (B, 1, T, T), one mask shared by every head
    """
    causal = causal_mask(T, device=padding_mask.device)  # (T, T) True = blocked
    return to_sdpa_mask(blocked_positions(causal, padding_mask))[:, None]  # (B, 1, T, T)


def empty_rows(padding_mask: torch.Tensor) -> torch.Tensor:
    """True for queries that see no real key: no real token at or before them (causal).

    Shape:
        (B, T) -> (B, T)
    """
    return padding_mask.cumsum(dim=-1) == 0  # nothing real yet at position i


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention through ``F.scaled_dot_product_attention``, equal to the explicit steps.

    Args:
        q, k, v: queries, keys and values, already projected.
        padding_mask: True for real tokens, False for padding; None if all are real.

    Returns:
        The outputs; a query with no visible key outputs zeros (with zero gradients).

    Shape:
        q, k, v: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T) -> same as q
    """
    one_head = q.dim() == 3
    if one_head:  # (B, T, d) -> (B, 1, T, d): the CPU flash kernel only takes 4-D input
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    if padding_mask is None or bool(padding_mask.all()):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d_h)
    else:
        T = q.size(-2)
        allowed = sdpa_mask(padding_mask, T)  # (B, 1, T, T): one mask, never is_causal as well
        empty = empty_rows(padding_mask)  # (B, T)
        if empty.any():
            # Let empty rows see every key so no kernel meets an all-blocked row, then zero
            # them below: output 0 and gradient 0, whatever this PyTorch does with such rows.
            allowed = allowed | empty[:, None, :, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, h, T, d_h)
        if empty.any():
            out = out.masked_fill(empty[:, None, :, None], 0.0)
    return out.squeeze(1) if one_head else out
