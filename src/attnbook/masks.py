"""Step 4 and padding: which keys a query may not see, and how other libraries say the same.

Convention used throughout attnbook (the original module's):

* the causal mask is True where attention is **blocked** (key j is in the future of query i);
* ``padding_mask`` is True for **real** tokens and False for padding.

PyTorch's ``scaled_dot_product_attention`` wants the opposite of the first (True = may attend),
and ``nn.MultiheadAttention``'s ``key_padding_mask`` the opposite of the second (True = ignore).
The converters below are the only places those flips happen.

Chapter 21 adds masks as functions, FlexAttention's ``mask_mod(b, h, q_idx, kv_idx)``, which
return True where a query MAY attend (SDPA's convention, the opposite of the causal buffer);
``materialize`` turns one into a tensor and ``block_mask`` classifies its tiles.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .checks import check_whole_number


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


# ---------------------------------------------------------------------------------------------
# Masks as functions (chapter 21): FlexAttention's mask_mod and score_mod.
#
# A mask_mod answers, for broadcastable integer tensors of batch, head, query and key indices,
# whether the query MAY ATTEND to the key: True = may attend. That is FlexAttention's (and
# SDPA's bool attn_mask's) convention, the OPPOSITE of the causal buffer above (True = blocked).
# ``~materialize(mod, T, T)[0, 0]`` is a True = blocked mask again.

BLOCK_EMPTY = 0  # no entry of the tile may attend: the tiled loop skips it
BLOCK_PARTIAL = 1  # some may: the tile is computed and the mask applied
BLOCK_FULL = 2  # all may: the tile is computed without a mask

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
                    torch.Tensor]


def causal_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
               kv_idx: torch.Tensor) -> torch.Tensor:
    """The causal mask as a mask_mod: query i may attend to key j when ``j <= i``.

    True = MAY attend (FlexAttention's convention); :func:`causal_mask` is its complement,
    True = blocked.
    """
    return q_idx >= kv_idx


def sliding_window_mod(W: int) -> MaskMod:
    """Causal attention to the last ``W`` keys, the query's own included: ``0 <= i - j < W``.

    Args:
        W: the window, at least 1 (W = 1: each token sees only itself).

    Returns:
        A mask_mod, True = may attend.
    """
    W = check_whole_number("sliding_window_mod's window W", W)

    def sliding_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < W)

    return sliding_window


def prefix_mod(n: int) -> MaskMod:
    """Prefix-LM: the first ``n`` keys are visible to every query, causal elsewhere.

    The prefix (a prompt, an image's tokens) is read bidirectionally; the rest is generated
    causally. Note that a query in the prefix sees the whole prefix, including later tokens.

    Args:
        n: the prefix length, at least 0 (0 gives the causal mask).

    Returns:
        A mask_mod, True = may attend. It carries ``bidirectional = True``: a module that ANDs
        its causal mask with a mask_mod (``Attention.forward(mask_mod=...)``) refuses it, since
        the AND would give back plain causal attention (:func:`check_not_lost_to_causal`).
        Use it with FlexAttention, ``tiled_attention(..., causal=False)`` or
        :func:`materialize`.
    """
    n = check_whole_number("prefix_mod's prefix length n", n, minimum=0)

    def prefix(b, h, q_idx, kv_idx):
        return (kv_idx < n) | (q_idx >= kv_idx)

    prefix.bidirectional = True  # lets queries see later keys on purpose
    return prefix


def check_document_ids(document_ids: torch.Tensor) -> torch.Tensor:
    """``document_ids`` if it is a (T,) or (B, T) integer tensor, non-decreasing along T."""
    if not isinstance(document_ids, torch.Tensor):
        raise TypeError(f"document_ids must be an integer torch.Tensor of shape (T,) or (B, T), "
                        f"got {type(document_ids).__name__}")
    if document_ids.dtype == torch.bool or document_ids.is_floating_point() \
            or document_ids.is_complex():
        raise TypeError(f"document_ids must hold integers (one id per token), got dtype "
                        f"{document_ids.dtype}; convert with .long()")
    if document_ids.dim() not in (1, 2):
        raise ValueError(f"document_ids must be (T,) or (B, T), got shape "
                         f"{tuple(document_ids.shape)}")
    steps = document_ids[..., 1:] - document_ids[..., :-1]
    if (steps < 0).any():
        where = (steps < 0).nonzero()[0].tolist()
        t = where[-1]
        raise ValueError(
            f"document_ids must be non-decreasing along T (a packed row holds each document's "
            f"tokens together, in order), but position {t + 1} has id "
            f"{document_ids[(*where[:-1], t + 1)].item()} after "
            f"{document_ids[(*where[:-1], t)].item()}")
    return document_ids


def document_mod(document_ids: torch.Tensor) -> MaskMod:
    """The document mask of a packed row: same document and causal (block-diagonal causal).

    Args:
        document_ids: the document of each token, non-decreasing ints: (T,) for one row
            shared by every batch entry, or (B, T) one row per batch entry. The ids are
            indexed with ``q_idx`` and ``kv_idx``, so they must cover every position.

    Returns:
        A mask_mod, True = may attend: ``ids[q] == ids[kv] and q >= kv``.

    Raises:
        TypeError: ``document_ids`` is not an integer tensor.
        ValueError: it is not (T,) or (B, T), or it decreases somewhere (named).
    """
    ids = check_document_ids(document_ids)

    def document(b, h, q_idx, kv_idx):
        if ids.dim() == 1:
            same = ids[q_idx] == ids[kv_idx]
        else:
            same = ids[b, q_idx] == ids[b, kv_idx]
        return same & (q_idx >= kv_idx)

    return document


def sink_mod(n_sink: int, W: int) -> MaskMod:
    """Attention sinks (StreamingLLM, Xiao et al. 2023): a sliding window of ``W`` plus the first
    ``n_sink`` keys, causal.

    Args:
        n_sink: how many leading tokens every query keeps seeing (at least 0).
        W: the window, at least 1.

    Returns:
        A mask_mod, True = may attend: ``j <= i and (i - j < W or j < n_sink)``.
    """
    n_sink = check_whole_number("sink_mod's n_sink", n_sink, minimum=0)
    W = check_whole_number("sink_mod's window W", W)

    def sink(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & ((q_idx - kv_idx < W) | (kv_idx < n_sink))

    return sink


def padding_mod(padding_mask: torch.Tensor) -> MaskMod:
    """Key padding as a mask_mod: the key is a real token (``padding_mask`` True = real).

    Not causal by itself: combine with ``and_mods(causal_mod, padding_mod(padding_mask))``.

    Shape:
        padding_mask: (B, T_k) bool
    """
    if not isinstance(padding_mask, torch.Tensor) or padding_mask.dtype != torch.bool \
            or padding_mask.dim() != 2:
        raise TypeError("padding_mask must be a bool tensor of shape (B, T_k), True = real token")

    def padding(b, h, q_idx, kv_idx):
        return padding_mask[b, kv_idx]

    return padding


def and_mods(*mods: MaskMod) -> MaskMod:
    """The intersection of mask_mods: a query may attend where every one of them allows it."""
    mods = _check_mods("and_mods", mods)

    def intersection(b, h, q_idx, kv_idx):
        out = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            out = out & mod(b, h, q_idx, kv_idx)
        return out

    _mark_bidirectional(intersection, mods)
    return intersection


def or_mods(*mods: MaskMod) -> MaskMod:
    """The union of mask_mods: a query may attend where at least one of them allows it."""
    mods = _check_mods("or_mods", mods)

    def union(b, h, q_idx, kv_idx):
        out = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            out = out | mod(b, h, q_idx, kv_idx)
        return out

    _mark_bidirectional(union, mods)
    return union


def not_mod(mod: MaskMod) -> MaskMod:
    """The complement of a mask_mod: allowed where ``mod`` blocks, and the other way round."""
    (mod,) = _check_mods("not_mod", (mod,))

    def complement(b, h, q_idx, kv_idx):
        return ~mod(b, h, q_idx, kv_idx)

    return complement


def _mark_bidirectional(combined, mods) -> None:
    if any(getattr(m, "bidirectional", False) for m in mods):
        combined.bidirectional = True


def check_not_lost_to_causal(mask_mod, allowed: torch.Tensor, causal_blocked: torch.Tensor,
                             where: str = "this module") -> None:
    """Refuse a bidirectional mask_mod (``prefix_mod``) whose future keys a causal AND would drop.

    A mask_mod marked ``bidirectional = True`` (:func:`prefix_mod`, and ``and_mods`` /
    ``or_mods`` of one) means some queries should see later keys. AND-ed with the causal mask
    those entries are blocked again and the result is plain causal attention, silently. This
    raises when ``allowed`` has an entry the causal mask blocks; a marked mod that allows no
    such entry here (``prefix_mod(0)`` or ``prefix_mod(1)``: the same as causal) passes.

    Raises:
        ValueError: saying what would be lost and what to use instead.

    Shape:
        allowed: (..., T_q, T_k) bool, True = may attend; causal_blocked: (T_q, T_k), True =
        blocked
    """
    if not getattr(mask_mod, "bidirectional", False):
        return
    lost = allowed & causal_blocked
    if bool(lost.any()):
        i, j = lost.nonzero()[0].tolist()[-2:]
        name = getattr(mask_mod, "__name__", type(mask_mod).__name__)
        raise ValueError(
            f"mask_mod {name!r} lets queries see later keys (query {i} may attend to key {j}; a "
            f"prefix-LM mask), but {where} ANDs every mask_mod with its causal mask, so those "
            "keys would be blocked again and the result would be plain causal attention: the "
            "prefix would be lost silently. Compute a bidirectional mask with FlexAttention "
            "(create_block_mask + flex_attention), tiled_attention(..., causal=False) or "
            "materialize(mask_mod, T, T) and your own masked softmax (chapter 21); pass this "
            "module only causal mask_mods")


def check_mask_mod(mask_mod, name: str = "mask_mod") -> None:
    """TypeError unless ``mask_mod`` is a callable taking four arguments (b, h, q_idx, kv_idx)."""
    _check_arity(mask_mod, 4, name, "mask_mod(b, h, q_idx, kv_idx) -> bool tensor, "
                 "True = may attend")


def check_score_mod(score_mod, name: str = "score_mod") -> None:
    """TypeError unless ``score_mod`` is a callable taking five arguments."""
    _check_arity(score_mod, 5, name, "score_mod(score, b, h, q_idx, kv_idx) -> new score")


def mask_mod_values(mask_mod: MaskMod, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                    kv_idx: torch.Tensor) -> torch.Tensor:
    """Call ``mask_mod`` on broadcastable index tensors; check that it answers with bool.

    Returns:
        The mask_mod's answer, broadcast to the indices' common shape (a view, no copy).
    """
    shape = torch.broadcast_shapes(b.shape, h.shape, q_idx.shape, kv_idx.shape)
    try:
        out = mask_mod(b, h, q_idx, kv_idx)
    except RuntimeError as err:
        if "ambiguous" in str(err):
            raise TypeError("the mask_mod used Python's and / or / not / if on tensors; it is "
                            "called with whole tensors of indices at once, so combine "
                            "conditions with & | ~ (and parenthesise each comparison)") from err
        raise
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"a mask_mod must return a bool tensor (True = may attend), got "
                        f"{type(out).__name__}; build it from the index tensors, e.g. "
                        f"q_idx >= kv_idx")
    if out.dtype != torch.bool:
        raise TypeError(f"a mask_mod must return a bool tensor (True = may attend), got dtype "
                        f"{out.dtype}; compare instead of computing numbers")
    try:
        return out.broadcast_to(shape)
    except RuntimeError as err:
        raise ValueError(f"the mask_mod returned shape {tuple(out.shape)}, which does not "
                         f"broadcast to the indices' shape {tuple(shape)}; it must answer "
                         f"elementwise for (b, h, q_idx, kv_idx)") from err


def mod_indices(B: int, h: int, i0: int, i1: int, j0: int, j1: int,
                device=None) -> tuple[torch.Tensor, ...]:
    """Broadcastable index tensors for queries i0..i1 and keys j0..j1: (B,1,1,1), (1,h,1,1),
    (1,1,i1-i0,1), (1,1,1,j1-j0)."""
    return (torch.arange(B, device=device).view(B, 1, 1, 1),
            torch.arange(h, device=device).view(1, h, 1, 1),
            torch.arange(i0, i1, device=device).view(1, 1, -1, 1),
            torch.arange(j0, j1, device=device).view(1, 1, 1, -1))


def materialize(mask_mod: MaskMod, T_q: int, T_k: int, B: int = 1, h: int = 1,
                device: torch.device | str | None = None) -> torch.Tensor:
    """The mask_mod evaluated on every (batch, head, query, key): a bool tensor, True = may attend.

    This is what the explicit module does with a mask_mod (and what FlexAttention's
    ``create_mask`` does). ``~materialize(...)`` is attnbook's True = blocked convention.

    Args:
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool``, called once with broadcastable
            index tensors of shapes (B,1,1,1), (1,h,1,1), (1,1,T_q,1), (1,1,1,T_k).
        T_q, T_k: numbers of queries and keys.
        B, h: batch entries and heads to evaluate.
        device: where to build the indices.

    Returns:
        ``allowed``, True where query i may attend to key j.

    Raises:
        TypeError: the mask_mod does not take four arguments, or returns something other
            than a bool tensor (Python's ``and``/``or`` on tensors is named).
        ValueError: its result does not broadcast to (B, h, T_q, T_k).

    Shape:
        -> (B, h, T_q, T_k)
    """
    check_mask_mod(mask_mod)
    for name, value, low in (("T_q", T_q, 0), ("T_k", T_k, 0), ("B", B, 1), ("h", h, 1)):
        check_whole_number(f"materialize's {name}", value, minimum=low)
    idx = mod_indices(B, h, 0, T_q, 0, T_k, device)
    return mask_mod_values(mask_mod, *idx).contiguous()  # (B, h, T_q, T_k)


def softcap_mod(cap: float) -> ScoreMod:
    """Tanh softcapping (Gemma 2): ``cap * tanh(score / cap)`` keeps every score in (-cap, cap).

    Its derivative, ``1 - tanh²(score / cap)``, is attached as ``.derivative`` so that the
    tiled backward can use it instead of differentiating the function.

    Args:
        cap: a positive number (Gemma 2 uses 50 on the attention scores).
    """
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0 \
            or cap == float("inf"):
        raise ValueError(f"softcap_mod's cap must be a positive finite number, got {cap!r}")
    cap = float(cap)

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    def derivative(score, b, h, q_idx, kv_idx):
        return 1 - torch.tanh(score / cap) ** 2  # d/ds cap tanh(s / cap)

    softcap.derivative = derivative
    return softcap


def relative_bias_mod(table: torch.Tensor) -> ScoreMod:
    """A learned relative-position bias (T5-style, without buckets) added to the scores.

    Indexing: with ``R = (table.size(-1) + 1) // 2`` (the table covers distances
    ``-(R-1) .. R-1``), the bias of query ``i`` and key ``j`` in head ``h`` is
    ``table[h, i - j + R - 1]``; a 1-D table is shared by every head: ``table[i - j + R - 1]``.
    A table made for sequences of length ``T`` has ``2T - 1`` entries per head.

    Args:
        table: (h, 2R - 1) or (2R - 1,) floats.

    Returns:
        A score_mod ``score + bias``. Its ``.derivative`` with respect to the score is 1. The
        tiled path's own backward gives no gradient to ``table``; train it through the explicit
        module or with ``tiled_attention(..., recompute=False)``.
    """
    if not isinstance(table, torch.Tensor) or not table.is_floating_point() \
            or table.dim() not in (1, 2) or table.size(-1) % 2 == 0:
        shape = tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__
        raise ValueError(f"relative_bias_mod's table must be a float tensor (h, 2R - 1) or "
                         f"(2R - 1,), an odd number of distances -(R-1)..R-1, got {shape}")
    R = (table.size(-1) + 1) // 2

    def relative_bias(score, b, h, q_idx, kv_idx):
        rel = q_idx - kv_idx + (R - 1)
        bias = table[rel] if table.dim() == 1 else table[h, rel]
        return score + bias.to(score.dtype)

    def derivative(score, b, h, q_idx, kv_idx):
        return torch.ones_like(score)

    relative_bias.derivative = derivative
    return relative_bias


def symmetric_alibi_mod(slopes: torch.Tensor) -> ScoreMod:
    """ALiBi for attention without a causal mask: ``score - m_h * |q_idx - kv_idx|``.

    Causal ALiBi's ``-m_h (i - j)`` (:func:`attnbook.positions.alibi_score_mod`) is positive
    for a later key (j > i): without a causal mask it favours the future, the more the further
    ahead. The symmetric form penalises distance both ways (the bidirectional ALiBi of
    encoders, e.g. MosaicBERT); on and below the diagonal it equals the causal form.

    Args:
        slopes: one positive slope per head, (h,) (:func:`attnbook.positions.alibi_slopes`).

    Returns:
        A score_mod; its ``.derivative`` with respect to the score is 1.
    """
    if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1 or not slopes.is_floating_point():
        raise ValueError(f"symmetric_alibi_mod's slopes must be a 1-D float tensor, one slope "
                         f"per head (alibi_slopes(h)), got {getattr(slopes, 'shape', slopes)!r}")

    def symmetric_alibi(score, b, h, q_idx, kv_idx):
        m = slopes.to(device=score.device, dtype=score.dtype)[h]
        return score - m * (q_idx - kv_idx).abs().to(score.dtype)

    def derivative(score, b, h, q_idx, kv_idx):
        return torch.ones_like(score)

    symmetric_alibi.derivative = derivative
    return symmetric_alibi


def is_causal_alibi(score_mod) -> bool:
    """Whether ``score_mod`` is causal ALiBi (:func:`attnbook.positions.alibi_score_mod`): it
    carries ``causal_only = True`` or is that function's inner ``score_mod``."""
    if getattr(score_mod, "causal_only", False):
        return True
    return getattr(score_mod, "__qualname__", "").startswith("alibi_score_mod.")


def warn_alibi_without_causal(score_mod, mask_mod, causal: bool, T_q: int, T_k: int,
                              where: str = "attention") -> bool:
    """Warn when causal ALiBi meets a mask that lets a query see later keys.

    ALiBi's ``-m_h (q_idx - kv_idx)`` is positive above the diagonal, so with ``causal=False``
    and a mask_mod that allows some key j > i (or none at all) later keys are favoured. Returns
    whether it warned. (An Attention module is always causal: it never warns there.)

    Shape:
        the mask_mod is evaluated on (1, 1, T_q, T_k) when it is marked ``bidirectional``
        or unmarked; T_q, T_k: numbers of queries and keys
    """
    if causal or not is_causal_alibi(score_mod):
        return False
    future = True if mask_mod is None else bool(
        (materialize(mask_mod, T_q, T_k) & causal_mask_rect(T_q, T_k)).any())
    if future:
        warnings.warn(
            f"ALiBi's score_mod adds -m_h (q_idx - kv_idx) in {where} without a causal mask: "
            "for a key after the query that is a bonus growing with the distance, so later "
            "keys are favoured. Add the causal mask (causal=True or and_mods(causal_mod, ...)) "
            "or, for bidirectional attention, use symmetric_alibi_mod(slopes): "
            "-m_h |q_idx - kv_idx|", UserWarning, stacklevel=3)
    return future


def causal_mask_rect(T_q: int, T_k: int, device=None) -> torch.Tensor:
    """True where key j lies after query i (j > i): the causal mask for T_q != T_k too."""
    return torch.arange(T_k, device=device)[None, :] > torch.arange(T_q, device=device)[:, None]


@dataclass(frozen=True)
class BlockMask:
    """Which (query block, key block) tiles of a mask are empty, partial or full.

    Attributes:
        kinds: (B, h, ceil(T_q / block_m), ceil(T_k / block_n)) int8, BLOCK_EMPTY (0),
            BLOCK_PARTIAL (1) or BLOCK_FULL (2). The last row and column of tiles may be
            shorter; only the entries that exist count (torch's ``create_block_mask`` pads
            them with False, so it calls such a tile partial even when all of it may attend).
        counts: {"empty": n, "partial": n, "full": n} over every (b, h) and tile.
        block_m, block_n: queries and keys per tile.
        T_q, T_k: numbers of queries and keys.
    """

    kinds: torch.Tensor
    counts: dict
    block_m: int
    block_n: int
    T_q: int
    T_k: int

    @property
    def computed_fraction(self) -> float:
        """The share of score entries that lie in non-empty tiles (what the tiled loop computes)."""
        rows = _tile_sizes(self.T_q, self.block_m, self.kinds.device)  # (n_m,)
        cols = _tile_sizes(self.T_k, self.block_n, self.kinds.device)  # (n_n,)
        area = rows[:, None] * cols[None, :]  # (n_m, n_n) entries per tile
        total = area.sum() * self.kinds.shape[0] * self.kinds.shape[1]
        if total == 0:
            return 0.0
        return float((area * (self.kinds != BLOCK_EMPTY)).sum() / total)


def block_mask(mask_mod: MaskMod, T_q: int, T_k: int, block_m: int, block_n: int,
               B: int = 1, h: int = 1, device: torch.device | str | None = None) -> BlockMask:
    """Classify every tile of ``block_m`` queries × ``block_n`` keys as empty, partial or full.

    The mask_mod is evaluated one row of tiles at a time, so memory is O(block_m · T_k), never
    (T_q, T_k) at once.

    Args:
        mask_mod: ``mask_mod(b, h, q_idx, kv_idx) -> bool``, True = may attend.
        T_q, T_k: numbers of queries and keys.
        block_m, block_n: tile size, positive ints.
        B, h: batch entries and heads (a mask_mod that ignores b and h gives equal rows).
        device: where to evaluate.

    Returns:
        A :class:`BlockMask`.

    Raises:
        TypeError / ValueError: a mask_mod of the wrong signature or result, or block sizes
            and lengths that are not whole numbers (named).

    Shape:
        -> kinds (B, h, ceil(T_q / block_m), ceil(T_k / block_n))
    """
    check_mask_mod(mask_mod)
    block_m = check_whole_number("block_mask's block_m", block_m)
    block_n = check_whole_number("block_mask's block_n", block_n)
    for name, value, low in (("T_q", T_q, 0), ("T_k", T_k, 0), ("B", B, 1), ("h", h, 1)):
        check_whole_number(f"block_mask's {name}", value, minimum=low)
    n_m, n_n = -(-T_q // block_m), -(-T_k // block_n)
    kinds = torch.empty(B, h, n_m, n_n, dtype=torch.int8, device=device)
    for a in range(n_m):
        i0, i1 = a * block_m, min((a + 1) * block_m, T_q)
        allowed = mask_mod_values(mask_mod, *mod_indices(B, h, i0, i1, 0, T_k, device))
        kinds[:, :, a] = _row_kinds(allowed, block_n)
    counts = {name: int((kinds == kind).sum())
              for name, kind in (("empty", BLOCK_EMPTY), ("partial", BLOCK_PARTIAL),
                                 ("full", BLOCK_FULL))}
    return BlockMask(kinds, counts, block_m, block_n, T_q, T_k)


def _row_kinds(allowed: torch.Tensor, block_n: int) -> torch.Tensor:
    """Tile kinds of one row of tiles from its (B, h, b_m, T_k) allowed entries -> (B, h, n_n)."""
    T_k = allowed.size(-1)
    n_n = -(-T_k // block_n)
    pad = n_n * block_n - T_k
    # Pad with True for "all" and False for "any", so padding never decides a tile's kind.
    any_ = torch.nn.functional.pad(allowed, (0, pad), value=False)
    all_ = torch.nn.functional.pad(allowed, (0, pad), value=True)
    any_ = any_.unflatten(-1, (n_n, block_n)).any(-1).any(-2)  # (B, h, n_n)
    all_ = all_.unflatten(-1, (n_n, block_n)).all(-1).all(-2)  # (B, h, n_n)
    if allowed.size(-2) == 0:
        all_ = torch.zeros_like(all_)
    return torch.where(all_, BLOCK_FULL, torch.where(any_, BLOCK_PARTIAL, BLOCK_EMPTY)).to(
        torch.int8)


def _tile_sizes(T: int, block: int, device) -> torch.Tensor:
    """Lengths of the tiles along one axis: block, ..., block, the remainder."""
    starts = torch.arange(0, T, block, device=device)
    return (starts + block).clamp(max=T) - starts


def _check_mods(name: str, mods) -> tuple:
    """The mods as a tuple, after checking there is at least one and each takes four arguments."""
    if not mods:
        raise TypeError(f"{name} needs at least one mask_mod")
    for i, mod in enumerate(mods):
        check_mask_mod(mod, f"{name}'s argument {i}")
    return tuple(mods)


def _check_arity(fn, n: int, name: str, expected: str) -> None:
    """TypeError unless ``fn`` is callable with exactly ``n`` positional arguments."""
    if not callable(fn):
        raise TypeError(f"{name} must be a function {expected}, got {type(fn).__name__}")
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError as err:
        raise TypeError(f"{name} must take {n} arguments: {expected}; "
                        f"{getattr(fn, '__name__', fn)!s} has signature "
                        f"{inspect.signature(fn)}") from err
    except ValueError:  # a builtin without a signature: it is checked when called
        pass
