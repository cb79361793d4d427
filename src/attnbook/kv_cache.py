"""Generating with a KV cache: each new token attends over the keys and values already computed.

When a model generates text it runs attention again after every new token. Token ``t``'s key
and value never change once computed (causality: later tokens cannot affect them), so they are
kept in a cache. A step then projects only the new tokens and attends from their queries to the
cached keys and values: O(d² + t·d) work for step t instead of O(t·d² + t²·d) for recomputing
the whole sequence, with the same result (Pope et al., 2023).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .attention import Attention
from .masks import blocked_positions
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax
from .weighted_sum import weighted_sum


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, in buffers allocated once.

    Attributes:
        k, v: the buffers; only the first ``length`` positions are filled.
        real: True for real tokens, False for padding (masks keys, as ``padding_mask`` does).
        length: how many positions are filled.
        padded: whether any cached token is padding (if not, a one-token step needs no mask).

    Shape:
        k, v: (B, context_length, d); real: (B, context_length)
    """

    k: torch.Tensor
    v: torch.Tensor
    real: torch.Tensor
    length: int = 0
    padded: bool = False

    @classmethod
    def empty(cls, batch: int, context_length: int, d: int, *, device=None,
              dtype: torch.dtype = torch.float32) -> KVCache:
        """A cache for ``batch`` sequences of up to ``context_length`` tokens of width ``d``."""
        k = torch.zeros(batch, context_length, d, device=device, dtype=dtype)
        real = torch.zeros(batch, context_length, dtype=torch.bool, device=device)
        return cls(k=k, v=torch.zeros_like(k), real=real)

    @classmethod
    def for_module(cls, attn: Attention, batch: int) -> KVCache:
        """A cache that fits ``attn``: its width, context length, device and dtype."""
        w = attn.key.weight
        return cls.empty(batch, attn.context_length, attn.d_model, device=w.device, dtype=w.dtype)

    @property
    def capacity(self) -> int:
        return self.k.size(1)

    def append(self, k_new: torch.Tensor, v_new: torch.Tensor,
               real_new: torch.Tensor | None = None) -> None:
        """Store the keys and values of ``t`` new tokens after the ones already cached.

        Shape:
            k_new, v_new: (B, t, d); real_new: (B, t) or None (all real)
        """
        t = k_new.size(1)
        if self.length + t > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} tokens; {self.length} are used "
                             f"and {t} more do not fit")
        end = self.length + t
        self.k[:, self.length : end] = k_new
        self.v[:, self.length : end] = v_new
        self.real[:, self.length : end] = True if real_new is None else real_new
        self.padded = self.padded or (real_new is not None and not bool(real_new.all()))
        self.length = end


def cached_attention(
    attn: Attention,
    x_new: torch.Tensor,
    cache: KVCache,
    padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention for ``t`` new tokens, using (and extending) the cache of earlier ones.

    Equal, position by position, to ``attn(x_all, padding_mask_all)`` where ``x_all`` is every
    token fed so far: new query ``i`` sees the cached keys and the new keys up to itself.

    Args:
        attn: the module whose projections (and causal rule) to use.
        x_new: the new tokens (t = 1 while generating; the whole prompt for the first call).
        cache: the keys and values of the tokens before them; ``x_new``'s are appended.
        padding_mask: True for real tokens among the new ones; None if all are real.

    Returns:
        The outputs of the new tokens.

    Shape:
        x_new: (B, t, d); padding_mask: (B, t) -> (B, t, d)
    """
    t, start = x_new.size(1), cache.length
    q = attn.query(x_new)  # (B, t, d): only the new tokens are projected
    cache.append(attn.key(x_new), attn.value(x_new), padding_mask)
    k, v = cache.k[:, : cache.length], cache.v[:, : cache.length]  # (B, L, d) with L = start + t
    if t == 1 and not cache.padded:
        # One new token sees every cached key and none is padding: no mask at all, so the
        # fused kernel does steps 2 to 6 in one call (4-D for the CPU flash kernel).
        return F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
    # New query i sits at position start + i and may see keys 0 .. start + i.
    causal = attn.mask[start : start + t, : cache.length]  # (t, L), True = blocked
    blocked = blocked_positions(causal, cache.real[:, : cache.length])  # (B, t, L)
    scores = scale_scores(attention_scores(q, k), q.size(-1))  # (B, t, L)
    return weighted_sum(masked_softmax(scores, blocked), v)  # (B, t, d)


@torch.no_grad()
def generate(
    attn: Attention,
    prompt: torch.Tensor,
    steps: int,
    next_input: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
    use_cache: bool = True,
) -> torch.Tensor:
    """Feed each output back as the next input, ``steps`` times (a stand-in for a language model).

    A real model maps the output to a token and embeds it; here ``next_input`` does both, so
    the loop has the shape of generation without a vocabulary.

    Args:
        attn: the attention module.
        prompt: the first tokens.
        steps: how many tokens to generate.
        next_input: output of the last token -> the next token's vector.
        use_cache: attend over a KV cache (O(d² + t·d) per step) or recompute the whole
            sequence with ``attn`` every step (O(t·d² + t²·d) per step), the slow way it replaces.

    Returns:
        The outputs of the generated tokens.

    Shape:
        prompt: (B, t0, d) -> (B, steps, d)
    """
    outputs = []
    if use_cache:
        cache = KVCache.for_module(attn, prompt.size(0))
        y = cached_attention(attn, prompt, cache)[:, -1:]  # (B, 1, d) the prompt in one call
        for _ in range(steps):
            x = next_input(y)  # (B, 1, d)
            y = cached_attention(attn, x, cache)  # (B, 1, d)
            outputs.append(y)
    else:
        seq = prompt
        y = attn(seq)[:, -1:]
        for _ in range(steps):
            seq = torch.cat([seq, next_input(y)], dim=1)  # (B, t, d)
            y = attn(seq)[:, -1:]  # every earlier token recomputed, only the last row kept
            outputs.append(y)
    return torch.cat(outputs, dim=1)
