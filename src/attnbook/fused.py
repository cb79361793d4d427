"""The fused path: steps 2 to 6 in one call to PyTorch's ``scaled_dot_product_attention``.

``F.scaled_dot_product_attention`` (SDPA) picks a kernel at run time. On CPU its flash kernel
walks over tiles like :mod:`attnbook.online`, in compiled code, skips the tiles above the
diagonal when ``is_causal=True``, and never stores the (T, T) weights. Four facts decide whether
we get that kernel, at full speed, and the same answer as the explicit module:

* the CPU flash kernel takes only 4-D input ``(B, h, T, d)``; 3-D input falls back to the
  "math" kernel, which builds the whole matrix. One head is therefore passed as ``h = 1``;
* padding masks keys only, so it fits in a key mask of shape ``(B, 1, 1, T)`` (one row per
  sequence, broadcast over heads and queries): T booleans per sequence, not T²;
* the CPU flash kernel accepts ``is_causal=True`` *together with* ``attn_mask`` and applies both,
  still skipping the causal tiles; the math kernel (3-D input, the meta device, or a kernel forced
  with ``sdpa_kernel``) refuses the pair. On CPU we therefore pass both (:func:`key_mask`); on
  any other device we take the general route, one merged (B, 1, T, T) mask (:func:`sdpa_mask`);
* a query that sees no real key must output zeros, as in the explicit module. The CPU flash
  kernel returns zeros with zero gradients there (``tests/test_fused.py`` pins it); the general
  route does not rely on any kernel's choice (see :func:`general_masked_attention`).

A float ``bias`` (ALiBi, chapter 20) goes to SDPA as a float ``attn_mask``, with ``-inf`` on
padded keys. On CPU, for 4-D input, SDPA still runs its flash kernel with a float mask and
``is_causal=True`` together (``_scaled_dot_product_flash_attention_for_cpu``;
``tests/test_positions_attention.py`` pins the choice); the mask is read for every tile, which
``benchmarks/bench_positions.py`` measures against the bool key mask.

No branch reads a tensor's values: which route runs depends only on the device and on whether
a padding mask was passed, so the path never waits for the device, traces under
``torch.compile(fullgraph=True)`` and runs on the meta device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .masks import blocked_positions, causal_mask, to_sdpa_mask


def key_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """Our ``padding_mask`` as SDPA's bool ``attn_mask`` over keys only (True = may attend).

    No flip: True = real token already means "may attend to this key".

    Shape:
        (B, T) -> (B, 1, 1, T): broadcast over every head and every query
    """
    return padding_mask[:, None, None, :]


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


def general_masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor,
) -> torch.Tensor:
    """The general route: one merged (B, 1, T, T) mask, accepted by every SDPA kernel.

    It costs a (B, 1, T, T) bool mask (SDPA turns it into a float one of the same size) and the
    tiles above the diagonal, which are computed and then masked. Empty rows are made to see
    every key, so no kernel meets an all-blocked row, and are zeroed afterwards: output 0 and
    gradient 0 whatever a kernel does with such rows. Both steps run unconditionally (no branch
    on the mask's values).

    Shape:
        q, k, v: (B, h, T, d_h); padding_mask: (B, T) -> (B, h, T, d_h)
    """
    empty = empty_rows(padding_mask)[:, None, :, None]  # (B, 1, T, 1)
    allowed = sdpa_mask(padding_mask, q.size(-2)) | empty  # (B, 1, T, T)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # (B, h, T, d_h)
    return out.masked_fill(empty, 0.0)


def check_self_attention_lengths(q: torch.Tensor, k: torch.Tensor, caller: str) -> None:
    """ValueError unless queries and keys have one length: the causal rule is self-attention's.

    With T_q != T_k, "key j > query i is the future" depends on how the two are aligned (SDPA's
    ``is_causal`` aligns top-left, FlashAttention bottom-right), so we refuse to guess.
    """
    T_q, T_k = q.size(-2), k.size(-2)
    if T_q != T_k:
        raise ValueError(
            f"{caller} is causal self-attention: queries and keys must have the same length, "
            f"got T_q = {T_q} (q {tuple(q.shape)}) and T_k = {T_k} (k {tuple(k.shape)}). "
            "For new tokens against cached keys use attnbook.kv_cache.cached_attention, which "
            "aligns the causal rule bottom-right.")


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention through ``F.scaled_dot_product_attention``, equal to the explicit steps.

    Args:
        q, k, v: queries, keys and values, already projected. Keys and values may have fewer
            heads than queries (grouped-query attention, chapter 13): each group of queries
            then shares one head of keys and values.
        padding_mask: True for real tokens, False for padding; None if all are real.
        bias: added to the scaled scores before masking (ALiBi's -m_h (i - j)); None: no bias.
            For one head (3-D q) broadcastable to (B, T, T), else to (B, h, T, T).

    Returns:
        The outputs; a query with no visible key outputs zeros (with zero gradients).

    Raises:
        ValueError: if q and k differ in length (T_q != T_k), naming both shapes.

    Shape:
        q: (B, T, d) or (B, h, T, d_h); k, v: like q, or (B, h_kv, T, d_h) with h_kv dividing h;
        padding_mask: (B, T) -> same as q
    """
    check_self_attention_lengths(q, k, "fused_attention")
    one_head = q.dim() == 3
    if one_head:  # (B, T, d) -> (B, 1, T, d): the CPU flash kernel only takes 4-D input
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    gqa = k.size(1) != q.size(1)  # a shape, not a value: no device sync
    if bias is not None:
        bias = bias.unsqueeze(-3) if one_head and bias.dim() >= 3 else bias  # head axis
        out = biased_attention(q, k, v, bias.to(q.dtype), padding_mask, gqa)
    elif padding_mask is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    elif q.device.type == "cpu":
        # The CPU flash kernel applies the causal rule and the key mask together: T booleans
        # per sequence, and the tiles above the diagonal are still skipped.
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask(padding_mask),
                                             is_causal=True, enable_gqa=gqa)
    else:
        if gqa:
            k, v = repeat_kv(k, q.size(1)), repeat_kv(v, q.size(1))
        out = general_masked_attention(q, k, v, padding_mask)
    return out.squeeze(1) if one_head else out


def biased_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                     padding_mask: torch.Tensor | None, gqa: bool) -> torch.Tensor:
    """SDPA with a float bias as ``attn_mask``, causal, padded keys at -inf, empty rows zero.

    On CPU ``is_causal=True`` goes with the float mask (the flash kernel takes both and skips
    the tiles above the diagonal); elsewhere the causal rule is merged into the mask.

    Shape:
        q: (B, h, T, d_h); k, v: (B, h_kv, T, d_h); bias: broadcastable to (B, h, T, T)
        -> (B, h, T, d_h)
    """
    T = q.size(-2)
    mask = bias.reshape((1,) * (4 - bias.dim()) + tuple(bias.shape))  # 4-D, as flash needs
    if padding_mask is not None:
        mask = mask.masked_fill(~key_mask(padding_mask), float("-inf"))  # (B, h, T, T)
    if q.device.type == "cpu":
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True,
                                             enable_gqa=gqa)
    else:
        if gqa:
            k, v = repeat_kv(k, q.size(1)), repeat_kv(v, q.size(1))
        blocked = causal_mask(T, device=q.device)  # (T, T) True = blocked
        if padding_mask is not None:
            empty = empty_rows(padding_mask)[:, None, :, None]  # (B, 1, T, 1)
            blocked = blocked & ~empty  # an empty row sees every key (zeroed below)
            mask = mask.masked_fill(empty, 0.0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.masked_fill(
            blocked, float("-inf")))
    if padding_mask is None:
        return out
    return out.masked_fill(empty_rows(padding_mask)[:, None, :, None], 0.0)  # the empty-row rule


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Repeat each of h_kv key (or value) heads for the n_heads / h_kv query heads of its group.

    Shape:
        (B, h_kv, T, d_h) -> (B, n_heads, T, d_h)
    """
    return x.repeat_interleave(n_heads // x.size(1), dim=1)
