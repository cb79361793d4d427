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
