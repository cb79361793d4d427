"""Step 4 and padding: which keys a query may not see, and how other libraries say the same.

Convention used throughout attnbook (the seed's):

* the causal mask is True where attention is **blocked** (key j is in the future of query i);
* ``padding_mask`` is True for **real** tokens and False for padding.

PyTorch's ``scaled_dot_product_attention`` wants the opposite of the first (True = may attend),
and ``nn.MultiheadAttention``'s ``key_padding_mask`` the opposite of the second (True = ignore).
The converters below are the only places those flips happen.
"""

from __future__ import annotations

import torch


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool matrix that is True where key ``j`` lies in the future of query ``i`` (``j > i``).

    Args:
        T: number of tokens.
        device: where to create it (the caller's device; nothing here assumes CPU).

    Returns:
        The strict upper triangle: the diagonal stays False because a token may see itself.

    Shape:
        () -> (T, T)
    """
    return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)


def blocked_positions(causal: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
    """Merge the causal mask with a key padding mask: True where query i must not see key j.

    Args:
        causal: True = blocked, the causal mask sliced to the sequence length.
        padding_mask: True = real token, or None when every token is real.

    Returns:
        True where attention is blocked, because key j is in the future or is padding.
        Padding masks keys (columns) only: a padded query still gets a row, which the caller
        ignores, so every real query sees exactly the real keys at or before it.

    Shape:
        causal: (T, T), padding_mask: (B, T) -> (T, T) without padding, (B, T, T) with it.
    """
    if padding_mask is None:
        return causal
    return causal | ~padding_mask[:, None, :]  # (T, T) | (B, 1, T) -> (B, T, T)


def to_sdpa_mask(blocked: torch.Tensor) -> torch.Tensor:
    """Our True = blocked mask as ``scaled_dot_product_attention``'s bool ``attn_mask``.

    Shape:
        (..., T, T) -> (..., T, T), True = may attend.
    """
    return ~blocked


def to_additive_mask(blocked: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Our True = blocked mask as a float mask that is added to the scores (0 or -inf).

    Shape:
        (..., T, T) -> (..., T, T)
    """
    zeros = torch.zeros(blocked.shape, dtype=dtype, device=blocked.device)
    return zeros.masked_fill(blocked, float("-inf"))


def to_key_padding_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """Our True = real ``padding_mask`` as ``nn.MultiheadAttention``'s ``key_padding_mask``.

    Shape:
        (B, T) -> (B, T), True = ignore this key.
    """
    return ~padding_mask


# The converters below complete the cheat sheet (book/mask_conventions.md): one function per
# direction, so that every flip between conventions happens in exactly one tested place.


def from_sdpa_mask(allowed: torch.Tensor) -> torch.Tensor:
    """``scaled_dot_product_attention``'s bool ``attn_mask`` (True = may attend) as ours.

    Args:
        allowed: True where query i may attend to key j.

    Returns:
        True where attention is blocked.

    Shape:
        (..., T, T) -> (..., T, T)
    """
    if allowed.dtype != torch.bool:
        raise TypeError(f"expected a bool mask (True = may attend), got {allowed.dtype}; "
                        "for a float mask use from_additive_mask")
    return ~allowed


def from_additive_mask(additive: torch.Tensor) -> torch.Tensor:
    """A float mask that is added to the scores (0 = keep, -inf = blocked) as ours.

    Args:
        additive: 0 where attention is allowed, ``-inf`` where it is blocked.

    Returns:
        True where attention is blocked.

    Raises:
        ValueError: if an entry is neither 0 nor ``-inf``. Such a mask is a bias on the
            scores (for example ALiBi or a large negative like -1e9), not a yes/no mask.

    Shape:
        (..., T, T) -> (..., T, T)
    """
    if not additive.is_floating_point():
        raise TypeError(f"expected a float mask of 0 and -inf, got {additive.dtype}")
    blocked = additive == float("-inf")
    if not ((additive == 0) | blocked).all():
        raise ValueError("an additive mask with entries other than 0 and -inf is a bias on the "
                         "scores, not a yes/no mask; it has no bool equivalent")
    return blocked


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore) as our ``padding_mask``.

    Shape:
        (B, T) -> (B, T), True = real token.
    """
    if key_padding_mask.dtype != torch.bool:
        raise TypeError(f"expected a bool key_padding_mask (True = ignore), "
                        f"got {key_padding_mask.dtype}")
    return ~key_padding_mask


def to_sdpa_key_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """Our ``padding_mask`` as a bool ``attn_mask`` for ``scaled_dot_product_attention``.

    No flip is needed: True = real token already means "may attend to this key". The mask
    gets a query axis of size 1 so that it broadcasts over every query (it masks columns).
    For (B, h, T, d_h) inputs add a head axis too: ``to_sdpa_key_mask(padding_mask)[:, None]``.

    Shape:
        (B, T) -> (B, 1, T), True = may attend.
    """
    return padding_mask[:, None, :]  # (B, 1, T): the same keys for every query


def to_mha_attn_mask(blocked: torch.Tensor, num_heads: int = 1) -> torch.Tensor:
    """Our True = blocked mask as ``nn.MultiheadAttention``'s bool ``attn_mask``.

    No flip is needed: MHA's bool ``attn_mask`` is True where attention is *not allowed*, as
    ours. A per-sequence mask (B, T, T) must be repeated once per head, because MHA wants
    (B * num_heads, T, T) with the heads of sequence b in rows b * num_heads ... + num_heads - 1.

    Args:
        blocked: True where query i must not see key j.
        num_heads: the MHA module's number of heads.

    Shape:
        (T, T) -> (T, T); (B, T, T) -> (B * num_heads, T, T)
    """
    if blocked.dim() == 3:
        return blocked.repeat_interleave(num_heads, dim=0)  # (B * h, T, T)
    return blocked
