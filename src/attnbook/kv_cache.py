"""Generating with a KV cache: each new token attends over the keys and values already computed.

When a model generates text it runs attention again after every new token. Token ``t``'s key
and value never change once computed (causality: later tokens cannot affect them), so they are
kept in a cache. A step then projects only the new tokens and attends from their queries to the
cached keys and values: O(d² + t·d) work for step t instead of O(t·d² + t²·d) for recomputing
the whole sequence, with the same result. This incremental decoding is as old as autoregressive
Transformer decoding (Shazeer, 2019, describes it; Pope et al., 2023, analyse its cost at scale).

The cache holds one layer's keys and values per head, (B, h_kv, T, d_h): h_kv = 1 and d_h = d
for :class:`attnbook.Attention`, h_kv = h for :class:`attnbook.MultiHeadAttention`, and fewer
key/value heads than query heads for grouped-query attention. A model keeps one cache per
layer (:meth:`attnbook.TinyModel.generate`). With ``window=W`` the cache keeps only the last W
tokens in a ring of W slots (sliding-window attention, Beltagy et al., 2020; the rolling buffer
cache of Mistral 7B, Jiang et al., 2023).

The module's ``context_length`` bounds how many keys one query may see. A full cache therefore
holds ``context_length`` tokens and refuses more. A window cache lets each query see at most
``window <= context_length`` keys, so it accepts sequences of any length: that is what a
rolling buffer is for (a model with learned positions still stops at its position table,
:meth:`attnbook.TinyModel.step`).

Positions (chapter 20). Keys are cached already rotated (RoPE) at their absolute positions,
so a step rotates only its new query and key. A new token's position is the number of real
tokens before it in its sequence: without padding that is ``cache.length``; with padding the
position ids skip the pads (``cumsum(padding_mask) - 1``, clamped at 0, as
:func:`attnbook.positions.default_positions`). We chose this convention because it makes a
left-padded prompt behave exactly as the same prompt unpadded, for every scheme (the learned
table included), and it is what the full forward pass uses by default, so the cache equals
recompute. (RoPE and ALiBi depend only on differences, so for left padding any shift would do;
padding in the middle of a sequence is where the choice shows: distances then count real
tokens only.) ALiBi in a cached step uses the absolute distance p_i - p_j between the new
query's and each cached key's position ids, stored beside the keys; the sliding-window cache
keeps absolute positions too (a token at position 1000 is rotated by 1000, not by its slot).
Static RoPE scalings (linear, YaRN, Llama 3) fix the frequencies, so the cache equals the full
forward. Dynamic NTK scaling chooses its frequencies from the length it is called with: a
cached key keeps the rotation of the step that appended it, so once the sequence passes the
original context the cache and a full forward of the whole sequence differ (transformers'
cache does the same); below it they agree. Both are pinned by
tests/test_rope_types.py (``test_dynamic_ntk_cache_differs_from_full_forward_past_L_only`` and
``test_static_types_and_partial_rotary_cache_and_fused_equal_full``).

Every masked SDPA call here follows the library's empty-row rule (as :mod:`attnbook.fused`):
a query that sees no real key outputs zeros, whatever a kernel does with an all-blocked row.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .attention import Attention
from .checks import check_input, check_padding_mask
from .fused import fused_attention, key_mask, repeat_kv
from .layer import AttentionLayer
from .masks import causal_mask
from .multihead import MultiHeadAttention
from .positions import apply_rope
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax
from .weighted_sum import weighted_sum

SUPPORTED = (Attention, AttentionLayer, MultiHeadAttention)
"""The modules whose computation :func:`cached_attention` reproduces, exactly these types."""


def check_supported(attn: torch.nn.Module) -> None:
    """Refuse a module the cache cannot reproduce, rather than return wrong outputs.

    A subclass may change what ``forward`` computes (more heads, an output projection, another
    mask); the cache would still compute single-head attention and give silently different
    outputs. So only the exact types in :data:`SUPPORTED` pass.
    """
    if type(attn) not in SUPPORTED:
        names = " or ".join(f"attnbook.{c.__name__}" for c in SUPPORTED)
        raise TypeError(
            f"the KV cache supports {names}, got {type(attn).__name__}: the cache cannot know "
            "what its forward computes, so it would return wrong outputs; generate without the "
            "cache (use_cache=False) or give the module project_heads/merge and add it to "
            "attnbook.kv_cache.SUPPORTED after testing it"
        )


@dataclass
class KVCache:
    """One layer's keys and values of the tokens seen so far, in buffers allocated once.

    Attributes:
        k, v: the buffers, one slice per key/value head; only the first ``length`` positions
            are filled (with a window: position p sits in slot ``p % window``, a ring that
            holds the last ``min(length, window)`` positions).
        real: True for real tokens, False for padding (masks keys, as ``padding_mask`` does).
        length: how many tokens have been appended (their positions are 0 .. length - 1).
        window: keep only the last ``window`` tokens (sliding-window attention); None keeps all.
            A window cache has exactly ``window`` slots and takes any number of tokens.
        padded: True once tokens were appended with a padding mask (even one of all True).
            While it is False every cached key is real, so steps need no key mask at all.
        positions: the position id of the token in each slot (real tokens before it in its
            sequence; see the module docstring), for RoPE and ALiBi.
        seen: real tokens appended so far, per sequence: the next token's position.

    Shape:
        k, v: (B, h_kv, capacity, d_h); real, positions: (B, capacity), capacity = window
        with a window; seen: (B,)
    """

    k: torch.Tensor
    v: torch.Tensor
    real: torch.Tensor
    length: int = 0
    window: int | None = None
    padded: bool = False
    positions: torch.Tensor | None = None
    seen: torch.Tensor | None = None

    def __post_init__(self) -> None:
        B, device = self.k.size(0), self.k.device
        if self.positions is None:
            self.positions = torch.zeros(B, self.k.size(2), dtype=torch.long, device=device)
        if self.seen is None:
            self.seen = torch.zeros(B, dtype=torch.long, device=device)

    def next_positions(self, real_new: torch.Tensor | None, t: int) -> torch.Tensor:
        """Position ids of ``t`` new tokens: the number of real tokens before each (pads get
        the last real one's, 0 before any), so a left-padded prompt is numbered as unpadded.

        Shape:
            real_new: (B, t) or None (all real) -> (B, t) long
        """
        if real_new is None:
            if t == 1:  # every step of generate: a view, no arange and no add to dispatch
                return self.seen[:, None]  # (B, 1); seen is replaced, never written in place
            return self.seen[:, None] + torch.arange(t, device=self.seen.device)  # (B, t)
        return (self.seen[:, None] + real_new.long().cumsum(dim=-1) - 1).clamp(min=0)

    @classmethod
    def empty(cls, batch: int, capacity: int, d_head: int, n_kv_heads: int = 1, *,
              device=None, dtype: torch.dtype = torch.float32,
              window: int | None = None) -> KVCache:
        """A cache for ``batch`` sequences: ``capacity`` positions of ``n_kv_heads`` heads.

        Args:
            batch: number of sequences B.
            capacity: the most keys one query may see (the module's context length).
            d_head: head width d_h.
            n_kv_heads: key/value heads h_kv.
            device, dtype: where and in what type to allocate the buffers.
            window: None keeps every token, up to ``capacity`` of them; an integer
                ``1 <= window <= capacity`` keeps the last ``window`` tokens in ``window``
                slots and accepts sequences of any length.

        Raises:
            ValueError: if ``batch`` is negative or ``window`` is not between 1 and ``capacity``.
            TypeError: if ``window`` is not an integer.
        """
        if batch < 0:
            raise ValueError(f"batch must be at least 0 (the number of sequences), got {batch}")
        if window is not None:
            if isinstance(window, bool) or not isinstance(window, int):
                raise TypeError(f"window must be an integer (a number of tokens) or None, got "
                                f"{window!r}")
            if not 1 <= window <= capacity:
                raise ValueError(
                    f"window must be between 1 and the context length {capacity} (the most "
                    f"keys one query may see), got window={window}; a wider window would let "
                    "a query see more keys than the module allows (window=None keeps every "
                    "token up to the context length)")
            capacity = window  # a ring of W slots: a sliding window never holds more
        k = torch.zeros(batch, n_kv_heads, capacity, d_head, device=device, dtype=dtype)
        real = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        return cls(k=k, v=torch.zeros_like(k), real=real, window=window)

    @classmethod
    def for_module(cls, attn: Attention, batch: int, window: int | None = None) -> KVCache:
        """A cache that fits ``attn``: its heads, head width, context length, device and dtype
        (and, with ``window=None``, a module's own sliding window when it fits the context)."""
        check_supported(attn)
        attn = AttentionLayer.of(attn)  # the core module of chapters 0-8: one head of width d
        w = attn.key.weight
        own = getattr(attn, "window", None)  # a module's sliding window: keep that many tokens
        if window is None and own is not None and own <= attn.context_length:
            window = own
        return cls.empty(batch, attn.context_length, attn.d_head, attn.n_kv_heads,
                         device=w.device, dtype=w.dtype, window=window)

    @property
    def capacity(self) -> int:
        return self.k.size(2)

    def nbytes(self) -> int:
        """Bytes of the key and value buffers: 2 · B · h_kv · capacity · d_h · bytes per number."""
        return self.k.nbytes + self.v.nbytes

    def append(self, k_new: torch.Tensor, v_new: torch.Tensor,
               real_new: torch.Tensor | None = None,
               positions_new: torch.Tensor | None = None, *,
               ids_given: bool | None = None) -> None:
        """Store the keys and values of ``t`` new tokens after the ones already cached.

        With a window, token p goes to slot ``p % window`` (a ring buffer), overwriting the token
        that has just left the window.

        Raises:
            ValueError: without a window, if the tokens do not fit in the capacity.

        Shape:
            k_new, v_new: (B, h_kv, t, d_h); real_new: (B, t) or None (all real);
            positions_new: (B, t) or None (:meth:`next_positions`); ids_given (default:
            positions_new is not None) says they were chosen by the caller, so the next
            default id is the last real new token's id + 1 instead of a count of real tokens
        """
        t = k_new.size(2)
        if self.window is None and self.length + t > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} tokens (the module's "
                             f"context_length); {self.length} are used and {t} more do not "
                             "fit; a sliding-window cache (window=W) takes any length")
        given = positions_new is not None if ids_given is None else ids_given
        if positions_new is None:
            positions_new = self.next_positions(real_new, t)  # (B, t)
        if given and t and real_new is None:  # the next default id: the last new one's + 1
            self.seen = positions_new[:, -1] + 1  # (B,); equals seen + t for default ids
        elif given and t:  # with padding: the last real new token's id + 1
            last = (real_new.long() * torch.arange(1, t + 1, device=real_new.device)).argmax(-1)
            after = positions_new.gather(1, last[:, None])[:, 0] + 1  # (B,)
            self.seen = torch.where(real_new.any(dim=-1), after, self.seen)
        else:
            self.seen = self.seen + (t if real_new is None else real_new.long().sum(dim=-1))
        self.padded = self.padded or real_new is not None
        real_new = True if real_new is None else real_new
        if self.window is None:
            slots = slice(self.length, self.length + t)
        else:
            slots = torch.arange(self.length, self.length + t, device=self.k.device)
            slots, keep = slots % self.window, slice(max(0, t - self.window), t)
            slots = slots[keep]  # of a long prompt only the last W tokens are kept
            k_new, v_new = k_new[:, :, keep], v_new[:, :, keep]
            real_new = real_new if isinstance(real_new, bool) else real_new[:, keep]
            positions_new = positions_new[:, keep]
        self.positions[:, slots] = positions_new
        self.k[:, :, slots] = k_new
        self.v[:, :, slots] = v_new
        self.real[:, slots] = real_new
        self.length += t

    def filled(self) -> int:
        """How many slots hold a token."""
        return min(self.length, self.capacity)


def cached_attention(
    attn: Attention,
    x_new: torch.Tensor,
    cache: KVCache,
    padding_mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention for ``t`` new tokens, using (and extending) the cache of earlier ones.

    Equal, position by position, to ``attn(x_all, padding_mask_all)`` where ``x_all`` is every
    token fed so far: new query ``i`` sits at position ``start + i`` and sees the cached keys and
    the new keys up to itself. Three cases, none of which reads a tensor's values:

    * prefill (empty cache): the prompt attends to itself, the fused path of chapter 11;
    * one new token: it sees every cached key, so only padding is masked, a (B, 1, 1, L) key mask;
    * ``t > 1`` new tokens after cached ones (chunked prefill): SDPA's ``is_causal`` would align
      the causal triangle to the top-left corner (query i sees keys 0..i), but query i must see
      keys 0..start + i (bottom-right), so the causal rows ``start .. start + t`` are passed as a
      (B, 1, t, L) mask.

    A query that sees no real key (a left-padded prompt fed in chunks) outputs zeros, as in the
    full forward pass (:func:`attend`). With a sliding-window cache the same three cases run
    with the band of the window (:func:`window_step`).

    Args:
        attn: the module whose projections (and heads) to use: an ``Attention`` or a
            ``MultiHeadAttention`` (grouped-query included); anything else raises TypeError.
        x_new: the new tokens (t = 1 while generating; the whole prompt for the first call).
        cache: the keys and values of the tokens before them; ``x_new``'s are appended.
        padding_mask: True for real tokens among the new ones; None if all are real.
        positions: the new tokens' position ids for RoPE and ALiBi (packed rows whose ids
            restart per document, ids that do not count the real tokens); stored in the cache
            beside the keys, so later queries measure distances to them. None: the number of
            real tokens before each (:meth:`KVCache.next_positions`). After given ids, a call
            without them continues from the last real new token's id + 1. The full forward
            with ``positions=p`` equals a prefill and steps given the same ids.

    Returns:
        The outputs of the new tokens.

    Raises:
        TypeError: for an unsupported module, a dtype other than the cache's, or a padding mask
            that is not bool.
        ValueError: for a shape that does not fit the module or the cache, a cache made for
            another module, a cache without a window that would hold more than its capacity,
            or positions of the wrong shape or negative.
        TypeError: also for positions that are not an integer tensor.

    Shape:
        x_new: (B, t, d); padding_mask: (B, t); positions: (t,) or (B, t) -> (B, t, d)
    """
    check_step(attn, x_new, cache, padding_mask)
    if type(attn) is Attention and positions is None and cache.window is None:
        return cache_step(attn, x_new, cache, padding_mask)  # this chapter's step, nothing more
    attn = AttentionLayer.of(attn)  # the core module with later options: one head of width d
    if positions is not None:
        positions = check_new_positions(positions, x_new)
    return decode_step(attn, x_new, cache, padding_mask, positions)


def cache_step(attn: Attention, x_new: torch.Tensor, cache: KVCache,
               padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Equation (12.2) for t new tokens of the module of chapters 0-8: project, append, attend.

    Shape: x_new (B, t, d), padding_mask (B, t) -> (B, t, d); the cache holds (B, 1, L, d).
    """
    t, start = x_new.size(1), cache.length
    q, k_new, v_new = (f(x_new)[:, None] for f in (attn.query, attn.key, attn.value))
    cache.append(k_new, v_new, padding_mask)  # (B, 1, t, d) each, after the cached ones
    L = cache.length
    k, v = cache.k[:, :, :L], cache.v[:, :, :L]  # every key so far: (B, 1, L, d)
    keys = key_mask(cache.real[:, :L]) if cache.padded else None  # (B, 1, 1, L)
    if start == 0:  # prefill: the prompt attends to itself (causal + padding)
        out = fused_attention(q, k, v, padding_mask)
    elif t == 1:  # one new token sees every cached key: only padding is masked
        out = attend(q, k, v, keys)
    else:  # a chunk: rows start .. start + t of the causal mask (bottom-right)
        allowed = ~attn.mask[start:L, :L]  # (t, L), True = may attend
        out = attend(q, k, v, allowed if keys is None else allowed & keys)
    return out[:, 0]  # (B, t, d)


def check_new_positions(positions, x_new: torch.Tensor) -> torch.Tensor:
    """The new tokens' position ids, checked and shaped (B, t) long on ``x_new``'s device.

    Raises:
        TypeError: positions that are not an integer torch.Tensor.
        ValueError: a shape other than (t,) or (B, t), or a negative id.

    Shape:
        positions: (t,) or (B, t); x_new: (B, t, d) -> (B, t)
    """
    B, t = x_new.size(0), x_new.size(1)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be an integer torch.Tensor of shape (t,) or (B, t) = "
                        f"({B}, {t}), one id per new token, got {type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be integers (position ids), got dtype "
                        f"{positions.dtype}; convert with positions.long()")
    if positions.shape not in ((t,), (B, t)):
        raise ValueError(f"positions must have shape (t,) = ({t},) or (B, t) = ({B}, {t}), one "
                         f"id per new token of x_new {tuple(x_new.shape)}, got "
                         f"{tuple(positions.shape)}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be ids >= 0 (a token's place in its sequence or "
                         f"document), got {int(positions.min())}")
    return positions.to(device=x_new.device, dtype=torch.long).expand(B, t)


def check_step(attn: Attention, x_new: torch.Tensor, cache: KVCache,
               padding_mask: torch.Tensor | None = None) -> None:
    """The checks of :func:`cached_attention`: the errors it raises, before any work.

    Raises:
        TypeError, ValueError: as :func:`cached_attention` (its positions:
            :func:`check_new_positions`).
    """
    check_supported(attn)
    attn = AttentionLayer.of(attn)
    # Any t: the cache, not the module's context length, decides how many tokens fit.
    B, t, _ = check_input(x_new, attn.d_model, context_length=sys.maxsize)
    if (cache.k.size(1), cache.k.size(3)) != (attn.n_kv_heads, attn.d_head):
        raise ValueError(
            f"the cache holds {cache.k.size(1)} key/value head(s) of width {cache.k.size(3)} but "
            f"the module has {attn.n_kv_heads} of width {attn.d_head}: the cache was made for "
            "another module; make one with KVCache.for_module(attn, batch)")
    if B != cache.k.size(0):
        raise ValueError(f"x_new has a batch of {B} sequences but the cache holds "
                         f"{cache.k.size(0)}; make one with KVCache.for_module(attn, {B})")
    if padding_mask is not None:
        check_padding_mask(padding_mask, B, t)
    if x_new.dtype != cache.k.dtype:
        raise TypeError(f"x_new has dtype {x_new.dtype} but the cache (and the module) hold "
                        f"{cache.k.dtype}; convert with x_new.to({cache.k.dtype})")


def decode_step(attn: Attention, x_new: torch.Tensor, cache: KVCache,
                padding_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`cached_attention` without its checks: the hot path of :func:`generate`.

    A cached step is a few dozen small operations, each of which costs microseconds to
    dispatch, so checks that Python repeats every step are a measurable part of it
    (``benchmarks/bench_decode.md``). :func:`generate` checks the module, the cache and the
    prompt once (its first call of :func:`cached_attention`), and then calls this for every
    token whose input has the shape and dtype of the previous step's output. Call
    :func:`cached_attention` instead unless you have checked ``x_new`` (a wrong shape here
    fails inside PyTorch, or not at all); only a full cache without a window still raises
    (:meth:`KVCache.append`).

    Shape:
        x_new: (B, t, d); padding_mask: (B, t); positions: (B, t) long, checked -> (B, t, d)
    """
    if getattr(attn, "real_options", False):  # the last part's options: options_step
        return options_step(attn, x_new, cache, padding_mask, positions)
    t, start = x_new.size(1), cache.length
    q, k_new, v_new = attn.project_heads(x_new)  # (B, h, t, d_h), (B, h_kv, t, d_h) twice
    pos_new = (cache.next_positions(padding_mask, t) if positions is None
               else positions)  # (B, t): real tokens before each, or the ids given
    if attn.position == "rope":  # keys are cached rotated: only the new ones turn
        kw = attn.rope_kwargs()  # base, layout, scaling, rotary_dim, seq_dim
        q, k_new = apply_rope(q, pos_new, **kw), apply_rope(k_new, pos_new, **kw)
    alibi = None
    if attn.position == "alibi":  # -m_h (p_i - p_j) with the absolute position ids
        def alibi(key_pos):
            return attn.alibi(pos_new, key_pos, q)  # (B, h, t, L)
    if cache.window is not None:
        return attn.merge(window_step(q, k_new, v_new, cache, padding_mask, pos_new, alibi,
                                      ids_given=positions is not None))
    cache.append(k_new, v_new, padding_mask, pos_new, ids_given=positions is not None)
    L = cache.length
    k, v = cache.k[:, :, :L], cache.v[:, :, :L]  # (B, h_kv, L, d_h)
    bias = None if alibi is None else alibi(cache.positions[:, :L])  # (B, h, t, L)
    keys = key_mask(cache.real[:, :L]) if cache.padded else None  # (B, 1, 1, L); None: all real
    # New tokens given without a padding mask are real, and each new query sees its own key, so
    # none of their rows can be empty: the empty-row rule (a few more operations) is skipped.
    own_key_real = padding_mask is None
    if start == 0:  # prefill: the prompt attends to itself (is_causal + key mask)
        heads = fused_attention(q, k, v, padding_mask, bias=bias)
    elif t == 1:  # one new token sees every cached key: only padding is masked
        heads = attend(q, k, v, keys, own_key_real=own_key_real, bias=bias)
    else:  # chunked prefill: the causal rows start .. start + t, aligned bottom-right
        allowed = ~attn.mask[start:L, :L]  # (t, L)
        allowed = allowed if keys is None else allowed & keys  # (B, 1, t, L) with padding
        heads = attend(q, k, v, allowed, own_key_real=own_key_real, bias=bias)
    return attn.merge(heads)  # (B, t, d)


def options_step(attn: MultiHeadAttention, x_new: torch.Tensor, cache: KVCache,
                 padding_mask: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`decode_step` for a module with the options of current models on (QK-norm, a score
    scale, a score_mod, a sliding window, sink logits: ``attn.real_options``).

    The same steps as the full forward: project, QK-norm, rotate (RoPE) at the position ids,
    then :meth:`MultiHeadAttention.attend_keys` over the cached keys and the new ones, with
    token indices (not position ids) for the causal rule, the module's window and the
    score_mod's ``q_idx, kv_idx``. A window cache (its ring of W slots) holds the last W tokens;
    the module's window, if narrower, is applied on top.

    Shape:
        x_new: (B, t, d); padding_mask: (B, t); positions: (B, t) long -> (B, t, d)
    """
    t, start, device = x_new.size(1), cache.length, x_new.device
    q, k_new, v_new = attn.project_heads(x_new)  # (B, h, t, d_h), (B, h_kv, t, d_h) twice
    q, k_new = attn.norm_qk(q, k_new)
    given = positions is not None
    pos_new = cache.next_positions(padding_mask, t) if positions is None else positions
    if attn.position == "rope":  # keys are cached rotated: only the new ones turn
        kw = attn.rope_kwargs()
        q, k_new = apply_rope(q, pos_new, **kw), apply_rope(k_new, pos_new, **kw)
    q_idx = torch.arange(start, start + t, device=device)  # (t,) token indices
    real_new = (torch.ones(x_new.size(0), t, dtype=torch.bool, device=device)
                if padding_mask is None else padding_mask)
    if cache.window is None:
        cache.append(k_new, v_new, padding_mask, pos_new, ids_given=given)
        L = cache.length
        k, v, real = cache.k[:, :, :L], cache.v[:, :, :L], cache.real[:, :L]
        kv_idx, key_pos = torch.arange(L, device=device), cache.positions[:, :L]
    else:  # the ring's tokens (slot order), then the new ones; written after attending
        n, W = cache.filled(), cache.window
        slots = torch.arange(n, device=device)
        kv_idx = torch.cat([start - 1 - (start - 1 - slots) % W, q_idx])  # (n + t,)
        k = torch.cat([cache.k[:, :, :n], k_new], dim=2)  # (B, h_kv, n + t, d_h)
        v = torch.cat([cache.v[:, :, :n], v_new], dim=2)
        real = torch.cat([cache.real[:, :n], real_new], dim=1)  # (B, n + t)
        key_pos = torch.cat([cache.positions[:, :n], pos_new], dim=1)
    allowed = attn.visible(q_idx, kv_idx) & key_mask(real)  # (B, 1, t, L)
    if cache.window is not None:  # the ring's own band
        allowed = allowed & (q_idx[:, None] - kv_idx < cache.window)
    bias = attn.alibi(pos_new, key_pos, q) if attn.position == "alibi" else None
    heads, _ = attn.attend_keys(q, k, v, allowed, q_idx, kv_idx, bias=bias, fused=attn.fused,
                                no_empty_rows=padding_mask is None)  # each sees its own key
    if cache.window is not None:
        cache.append(k_new, v_new, padding_mask, pos_new, ids_given=given)
    return attn.merge(heads)  # (B, t, d)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None, *,
           own_key_real: bool = False, bias: torch.Tensor | None = None) -> torch.Tensor:
    """SDPA with a bool mask (True = may attend) under the library's empty-row rule.

    A query row with no allowed key is made to see every key, so no kernel meets an all-blocked
    row (GPU kernels have returned NaN there), and its output is set to zero afterwards, with
    zero gradients: the rule of :func:`attnbook.fused.general_masked_attention` and of the
    explicit module. No branch reads the mask's values.

    Args:
        q, k, v: queries, keys and values (fewer key/value heads than query heads: GQA).
        allowed: True where a query may see a key; None lets every query see every key.
        own_key_real: the caller knows that every query may see its own key and that key is
            real (new tokens given without padding), so no row can be empty and the rule's
            extra operations are skipped. A fact about the call, not read from the mask.
        bias: added to the scaled scores (ALiBi); None: none. With a bias the mask is passed
            as a float mask, the bias with -inf where ``allowed`` is False.

    Shape:
        q: (B, h, t, d_h); k, v: (B, h_kv, L, d_h); allowed and bias: broadcastable to
        (B, h, t, L) -> (B, h, t, d_h)
    """
    gqa = k.size(1) != q.size(1)
    if bias is not None:
        bias = bias.to(q.dtype)
        if allowed is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)
        if own_key_real:
            mask = bias.masked_fill(~allowed, float("-inf"))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        empty = ~allowed.any(dim=-1, keepdim=True)  # (..., t, 1)
        mask = bias.masked_fill(~(allowed | empty), float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return out.masked_fill(empty, 0.0)
    if allowed is None or own_key_real:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=gqa)
    empty = ~allowed.any(dim=-1, keepdim=True)  # (..., t, 1): rows that see no key
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed | empty, enable_gqa=gqa)
    return out.masked_fill(empty, 0.0)


def window_step(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, cache: KVCache,
                padding_mask: torch.Tensor | None, positions_new: torch.Tensor | None = None,
                alibi: Callable | None = None, *, ids_given: bool = False) -> torch.Tensor:
    """Sliding-window attention of ``t`` new tokens against the ring and each other.

    Prefill, one token and chunks are one computation: the keys are the ring's (at most W
    tokens, in slot order) followed by the new ones, and query ``start + i`` may see a key at
    position p when ``0 <= start + i - p < W`` and the key is real. The attention runs before
    the new tokens are written, because writing them overwrites slots an early query of the
    chunk still needs. Slot r holds the latest position p < start with p % W == r.
    ``positions_new`` are the new tokens' position ids (stored with them); ``alibi`` maps the
    keys' position ids (B, n + t) to ALiBi's bias (None: no bias); ``ids_given``: as
    :meth:`KVCache.append`.

    Shape:
        q: (B, h, t, d_h), k_new, v_new: (B, h_kv, t, d_h); padding_mask: (B, t) or None;
        positions_new: (B, t) -> (B, h, t, d_h)
    """
    t, start, W, n = q.size(2), cache.length, cache.window, cache.filled()
    device = q.device
    slots = torch.arange(n, device=device)
    old_pos = start - 1 - (start - 1 - slots) % W  # (n,) the position held by each slot
    key_pos = torch.cat([old_pos, torch.arange(start, start + t, device=device)])  # (n + t,)
    behind = torch.arange(start, start + t, device=device)[:, None] - key_pos  # (t, n + t)
    real_new = (torch.ones(q.size(0), t, dtype=torch.bool, device=device)
                if padding_mask is None else padding_mask)
    real = torch.cat([cache.real[:, :n], real_new], dim=1)  # (B, n + t)
    allowed = (behind >= 0) & (behind < W) & key_mask(real)  # (B, 1, t, n + t)
    k = torch.cat([cache.k[:, :, :n], k_new], dim=2)  # (B, h_kv, n + t, d_h)
    v = torch.cat([cache.v[:, :, :n], v_new], dim=2)
    bias = None
    if alibi is not None:
        bias = alibi(torch.cat([cache.positions[:, :n], positions_new], dim=1))  # (B, h, t, n+t)
    out = attend(q, k, v, allowed, own_key_real=padding_mask is None, bias=bias)
    cache.append(k_new, v_new, padding_mask, positions_new, ids_given=ids_given)
    return out


def window_mask(T: int, window: int, device=None) -> torch.Tensor:
    """Sliding-window causal mask: True (blocked) where key j is in the future of query i or
    at least ``window`` positions behind it, so query i sees keys i - window + 1 .. i.

    Shape:
        () -> (T, T)
    """
    i = torch.arange(T, device=device)[:, None]
    return causal_mask(T, device=device) | (i - torch.arange(T, device=device)[None, :] >= window)


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                     padding_mask: torch.Tensor | None = None,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """The explicit definition of sliding-window attention: steps 2 to 6 with a banded mask.

    ``bias`` (ALiBi) is added to the scaled scores before the mask.

    Shape:
        q: (B, h, T, d_h), k, v: (B, h_kv, T, d_h); padding_mask: (B, T); bias: broadcastable
        to (B, h, T, T) -> (B, h, T, d_h)
    """
    if k.size(1) != q.size(1):
        k, v = repeat_kv(k, q.size(1)), repeat_kv(v, q.size(1))
    blocked = window_mask(q.size(2), window, device=q.device)  # (T, T)
    if padding_mask is not None:
        blocked = blocked | ~padding_mask[:, None, None, :]  # (B, 1, T, T)
    scores = scale_scores(attention_scores(q, k), q.size(-1))  # (B, h, T, T)
    if bias is not None:
        scores = scores + bias
    return weighted_sum(masked_softmax(scores, blocked).to(v.dtype), v)  # float32 scores if half


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
    the loop has the shape of generation without a vocabulary (:meth:`attnbook.TinyModel.generate`
    is the real thing).

    Args:
        attn: the attention module (``Attention`` or ``MultiHeadAttention``).
        prompt: the first tokens.
        steps: how many tokens to generate.
        next_input: output of the last token -> the next token's vector.
        use_cache: attend over a KV cache (O(d² + t·d) per step) or recompute the whole
            sequence with ``attn`` every step (O(t·d² + t²·d) per step), the slow way it replaces.

    Returns:
        The outputs of the generated tokens.

    Raises:
        ValueError: for a negative ``steps`` or an empty prompt (generation continues from the
            prompt's last output, so it needs one).

    Shape:
        prompt: (B, t0, d) -> (B, steps, d)
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0 (tokens to generate), got {steps!r}")
    if prompt.dim() == 3 and prompt.size(1) == 0:
        raise ValueError("the prompt has no tokens; generation continues from the output of "
                         "the prompt's last token, so give it at least one")
    if steps == 0:
        return prompt.new_zeros(prompt.size(0), 0, prompt.size(-1))
    outputs = []
    if use_cache:
        cache = KVCache.for_module(attn, prompt.size(0))
        y = cached_attention(attn, prompt, cache)[:, -1:]  # (B, 1, d) the prompt in one call
        attn = AttentionLayer.of(attn)  # once, not every step: the hot path takes the layer
        for _ in range(steps):
            x = next_input(y)  # (B, 1, d)
            # The module, the cache and an input of y's shape and dtype passed the checks with
            # the prompt: such a step skips them (checks per step are a measurable part of a
            # step's time). Anything else goes through them and gets their error.
            if isinstance(x, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype:
                y = decode_step(attn, x, cache)  # (B, 1, d)
            else:
                y = cached_attention(attn, x, cache)
            outputs.append(y)
    else:
        seq = prompt
        y = attn(seq)[:, -1:]
        for _ in range(steps):
            seq = torch.cat([seq, next_input(y)], dim=1)  # (B, t, d)
            y = attn(seq)[:, -1:]  # every earlier token recomputed, only the last row kept
            outputs.append(y)
    return torch.cat(outputs, dim=1)


def kv_cache_bytes(n_layers: int, batch: int, n_kv_heads: int, length: int, d_head: int,
                   bytes_per_number: int = 4) -> int:
    """Bytes of a model's KV cache: keys and values, every layer, every key/value head.

    2 · n_layers · B · h_kv · T · d_h · bytes. Multi-head attention has h_kv = h; grouped-query
    attention divides the cache by h / h_kv; multi-query attention (h_kv = 1) by h.
    """
    return 2 * n_layers * batch * n_kv_heads * length * d_head * bytes_per_number
