"""The single-head module with every later chapter's option: Attention plus its layers.

:class:`attnbook.Attention` is what chapters 0 to 8 derive and nothing more. ``AttentionLayer``
subclasses it (same parameters, same state_dict, same random initialisation) and adds what
later chapters build on top of the six steps:

* the fused path (chapter 11): steps 2 to 6 in one ``scaled_dot_product_attention`` call;
* the hooks the KV cache uses (chapter 12): :meth:`project_heads` and :meth:`merge`;
* a steps-2-to-6 that also takes many heads and grouped-query heads (chapter 13);
* positions (chapter 20): RoPE turns q and k after step 1, ALiBi adds a bias before step 4;
* mask functions (chapter 21): a ``mask_mod`` AND-ed into step 4.

:class:`attnbook.MultiHeadAttention` subclasses it in turn.
"""

from __future__ import annotations

import torch

from .attention import Attention
from .checks import check_input, check_padding_mask
from .fused import fused_attention, repeat_kv
from .masks import blocked_positions, check_not_lost_to_causal, materialize
from .positions import (
    alibi_bias_from_positions,
    alibi_slopes,
    apply_rope,
    check_alibi_slopes,
    check_positions,
    check_rotary_dim,
    check_scaling,
    default_positions,
)
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax
from .weighted_sum import weighted_sum


class AttentionLayer(Attention):
    """:class:`attnbook.Attention` with the options of chapters 11 to 21.

    ``AttentionLayer(d_model, context_length)`` computes exactly what ``Attention`` computes,
    from the same parameters drawn in the same order; each option below switches on one later
    chapter's layer.

    Args:
        d_model: width ``d`` of each token vector (input and output).
        context_length: the longest sequence the module accepts; sizes the causal mask.

    Mask conventions and empty rows: those of :class:`attnbook.Attention` (``mask`` True =
    blocked, ``padding_mask`` True = real token; a query with no visible key outputs zeros).

    Fused path:
        With ``fused=True`` (or ``m.fused = True`` later) steps 2 to 6 run as one call to
        ``F.scaled_dot_product_attention`` (:func:`attnbook.fused.fused_attention`): the same
        outputs up to rounding, faster at long sequences (chapter 9 measures it), and no (T, T)
        matrix. It never forms the weights, so ``return_weights=True`` computes them with the
        explicit steps instead.

    Positions (chapter 20):
        ``position="none"`` (the default) is the original module: it sees its keys as a set.
        ``"rope"`` rotates q and k after step 1 (:func:`attnbook.positions.apply_rope`, with
        ``rope_base``, ``rope_layout`` and ``rope_scaling``, a plain attribute that may be
        changed after training); ``"alibi"`` adds -m_h (i - j) to the scaled scores before
        masking (one head: m = alibi_slopes(1) = 1/256; ``alibi_slopes=`` chooses the slopes,
        one positive float per head, kept as a plain attribute). ``rotary_dim=r`` (an even
        number <= d_head, a plain attribute checked at every forward) turns only the first r
        features of each head (partial rotary, GPT-J's ``rotary_dim``; transformers'
        ``partial_rotary_factor`` f is r = int(d_head * f)); ``rope_scaling`` also takes
        transformers' dicts (``{"rope_type": "linear" | "dynamic" | "yarn" | "llama3" |
        "default", ...}``, :func:`attnbook.positions.check_scaling`). None of these adds a
        parameter, so the state_dict is the original module's. Positions default to
        0 .. T - 1, skipping pads when a padding mask is given
        (:func:`attnbook.positions.default_positions`); ``forward(..., positions=p)``
        overrides them.

    Shape:
        x: (B, T, d_model) with T <= context_length; padding_mask: (B, T) bool
        -> (B, T, d_model)

    The state_dict is the original module's (``query``, ``key``, ``value``, ``mask``).
    """

    def __init__(self, d_model: int, context_length: int, fused: bool = False,
                 position: str = "none", rope_base: float = 10000.0, rope_layout: str = "half",
                 rope_scaling=None, *, alibi_slopes=None, rotary_dim: int | None = None,
                 _heads: int = 1, _head_dim: int | None = None):
        check_position_args(position, rope_base, rope_layout, rope_scaling)
        if d_model < 1 or context_length < 1:
            raise ValueError(
                f"d_model and context_length must be positive, got {d_model}, {context_length}"
            )
        if rotary_dim is not None and position != "rope":
            raise ValueError(f"rotary_dim={rotary_dim!r} turns features with RoPE: it needs "
                             f"position='rope', got position={position!r}")
        alibi_slopes = check_alibi_slopes(alibi_slopes, _heads)
        # The head width: d_model / heads, unless a many-head module gives its own (head_dim).
        d_h = _head_dim if _head_dim is not None else (
            d_model // _heads if _heads >= 1 and d_model % _heads == 0 else None)
        if position == "rope" and d_h is not None and d_h % 2:
            raise ValueError(f"RoPE turns pairs of features, so the head width must be even, "
                             f"got d_head = {d_h} (d_model={d_model}, "
                             f"n_heads={_heads})")
        super().__init__(d_model, context_length)  # the three projections and the causal mask
        # One head of width d: the KV cache (chapter 12) reads these three numbers.
        self.n_heads = self.n_kv_heads = 1
        self.d_head = d_model
        # A plain attribute, not saved in the state_dict: which path computes the same result.
        self.fused = fused
        # Plain attributes too: RoPE and ALiBi have no parameters, so the state_dict stays the
        # original module's.
        self.position, self.rope_base, self.rope_layout = position, rope_base, rope_layout
        self.rope_scaling = rope_scaling
        self.alibi_slopes = alibi_slopes  # None: the paper's rule, alibi_slopes(h)
        if position == "rope" and d_h is not None:
            check_rotary_dim(rotary_dim, d_h)
        self.rotary_dim = rotary_dim  # None: every feature of each head turns

    @classmethod
    def of(cls, attn: Attention) -> AttentionLayer:
        """``attn`` seen as a layer: the same parameter and buffer objects, no option on.

        The KV cache (chapter 12) and other later layers call this, so that the core module of
        chapters 0 to 8 works with them unchanged. A layer is returned as it is.
        """
        if isinstance(attn, AttentionLayer):
            return attn
        with torch.device("meta"):  # nothing drawn from the random generator, nothing allocated
            layer = cls(attn.d_model, attn.context_length)
        layer.query, layer.key, layer.value = attn.query, attn.key, attn.value
        layer.mask = attn.mask
        return layer.train(attn.training)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, context_length={self.context_length}, fused={self.fused}"
                + ("" if self.position == "none" else f", position={self.position!r}"))

    def with_positions(self, q: torch.Tensor, k: torch.Tensor,
                       padding_mask: torch.Tensor | None = None,
                       positions: torch.Tensor | None = None):
        """Where order enters (chapter 20): RoPE turns q and k; ALiBi returns a score bias.

        Returns:
            q, k (rotated with ``position="rope"``) and the bias to add to the scaled scores
            (``position="alibi"``; else None).

        Shape:
            q: (B, T, d) or (B, h, T, d_h); k likewise (h_kv heads); positions: (T,) or (B, T)
            -> q, k, and bias (T, T) / (B, T, T) for one head, (h, T, T) / (B, h, T, T) for many
        """
        if self.position == "none":
            return q, k, None
        T = q.size(-2)
        if positions is None:
            positions = default_positions(T, padding_mask, device=q.device)
        check_positions(positions, q)  # integers, (T,) or (B, T)
        positions = positions.to(q.device)
        if self.position == "rope":
            kw = self.rope_kwargs()
            return apply_rope(q, positions, **kw), apply_rope(k, positions, **kw), None
        return q, k, self.alibi(positions, positions, q)

    def rope_kwargs(self) -> dict:
        """The keywords of :func:`attnbook.positions.apply_rope` for this module's q and k:
        base, layout, scaling, rotary_dim (checked: None or even, <= d_head), and the token
        axis ``seq_dim=-2`` named explicitly (q and k are (B, T, d) or (B, h, T, d_h))."""
        return {"base": self.rope_base, "layout": self.rope_layout, "scaling": self.rope_scaling,
                "rotary_dim": check_rotary_dim(self.rotary_dim, self.d_head), "seq_dim": -2}

    def alibi(self, q_positions: torch.Tensor, k_positions: torch.Tensor,
              q: torch.Tensor) -> torch.Tensor:
        """ALiBi's bias -m_h (p_i - p_j), in float32 (float64 for float64 q), shaped for q.

        Shape:
            q_positions: (T_q,) or (B, T_q); k_positions: (T_k,) or (B, T_k)
            -> (h, T_q, T_k) or (B, h, T_q, T_k); the head axis dropped for 3-D q
        """
        dt = torch.float64 if q.dtype == torch.float64 else torch.float32
        chosen = check_alibi_slopes(self.alibi_slopes, self.n_heads)  # None: the paper's rule
        slopes = (alibi_slopes(self.n_heads, dt) if chosen is None
                  else torch.tensor(chosen, dtype=dt)).to(q.device)  # (h,)
        bias = alibi_bias_from_positions(slopes, q_positions, k_positions)  # (..., h, T_q, T_k)
        return bias[..., 0, :, :] if q.dim() == 3 else bias

    def forward(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        *,
        mask_mod=None,
        positions: torch.Tensor | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from every token to the real tokens at or before it.

        Runs the input checks (before step 1, not a step), step 1 (project), the position
        scheme (:meth:`with_positions`) and then :meth:`attend` (steps 2 to 6).

        Args:
            x: token vectors.
            padding_mask: True for real tokens, False for padding; None if all are real.
            mask_mod: a mask function ``mask_mod(b, h, q_idx, kv_idx)``, True = MAY attend
                (FlexAttention's convention, chapter 21), materialised and AND-ed with the
                causal buffer and the padding; it takes the explicit steps. None: as before.
                A mask_mod that lets queries see later keys on purpose (``prefix_mod``, marked
                ``bidirectional``) is refused with a ValueError: the AND would silently give
                plain causal attention.
            positions: integer positions (T,) or (B, T) for RoPE or ALiBi; None gives the
                default (0 .. T - 1, skipping pads). Unused with ``position="none"``.
            return_weights: also return the attention weights (for plots and checks).

        Returns:
            The outputs, and with ``return_weights=True`` also the weights (B, T, T),
            each row summing to 1 over its visible keys (or all 0 for an empty row).

        Shape:
            x: (B, T, d_model), padding_mask: (B, T) -> (B, T, d_model)
        """
        B, T, d = check_input(x, self.d_model, self.context_length, self.query.weight.dtype)
        if padding_mask is not None:
            check_padding_mask(padding_mask, B, T)

        q = self.query(x)  # (B, T, d)
        k = self.key(x)  # (B, T, d)
        v = self.value(x)  # (B, T, d)
        q, k, bias = self.with_positions(q, k, padding_mask, positions)  # RoPE, or ALiBi's bias
        # The fused kernel never forms the weights: asking for them takes the explicit path.
        fused = self.fused and not return_weights
        out, weights = self.attend(q, k, v, padding_mask, fused=fused,
                                   mask_mod=mask_mod, bias=bias)  # (B, T, d), (B, T, T)
        return (out, weights) if return_weights else out

    def project_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step 1 in the layout of many heads, with h = 1: what the KV cache stores.

        Shape:
            x: (B, T, d) -> q, k, v: (B, 1, T, d)
        """
        return self.query(x)[:, None], self.key(x)[:, None], self.value(x)[:, None]

    def merge(self, heads: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`project_heads`' head axis: (B, 1, T, d) -> (B, T, d)."""
        return heads[:, 0]

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        *,
        fused: bool | None = None,
        mask_mod=None,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Steps 2 to 6: score, scale, mask, softmax, weighted sum.

        Works for one head, (B, T, d), and for many, (B, h, T, d_h): the scale uses the width
        of q and k, which is d_h per head, not d_model.

        Args:
            q, k, v: queries, keys and values, already projected.
            padding_mask: True for real tokens, False for padding; None if all are real.
            fused: run the fused kernel instead of the explicit steps (default: ``self.fused``).
            mask_mod: True = may attend, AND-ed with the causal buffer and the padding (see
                :meth:`forward`); a mask_mod always takes the explicit steps.
            bias: added to the scaled scores before masking (ALiBi, :meth:`with_positions`).

        Returns:
            The outputs and the attention weights; the weights are None on the fused path.

        Shape:
            q, k, v: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T)
            -> (B, T, d) or (B, h, T, d_h), and weights (B, T, T) or (B, h, T, T)
        """
        if (self.fused if fused is None else fused) and mask_mod is None:
            return fused_attention(q, k, v, padding_mask, bias=bias), None  # one fused call
        T = q.size(-2)
        if q.dim() == 4 and k.size(1) != q.size(1):  # grouped-query attention (chapter 13)
            k, v = repeat_kv(k, q.size(1)), repeat_kv(v, q.size(1))
        if T == 0:  # no tokens: an empty result (a softmax over zero keys is undefined)
            return v.clone(), q.new_zeros(*q.shape[:-1], 0)  # v is empty: (..., 0, d)
        scores = attention_scores(q, k)  # (B, T, T)
        scores = scale_scores(scores, q.size(-1))  # (B, T, T)
        if bias is not None:  # ALiBi: -m_h (i - j), before the mask
            scores = scores + bias  # (B, T, T) or (B, h, T, T)
        blocked = blocked_positions(self.mask[:T, :T], padding_mask)  # (T, T) or (B, T, T)
        if padding_mask is not None and scores.dim() == 4:
            blocked = blocked[:, None]  # (B, 1, T, T): every head sees the same padding
        if mask_mod is not None:  # chapter 21: the mask as a function, True = may attend
            h = q.size(1) if q.dim() == 4 else 1
            allowed = materialize(mask_mod, T, T, q.size(0), h, q.device)  # (B, h, T, T)
            check_not_lost_to_causal(mask_mod, allowed, self.mask[:T, :T],
                                     f"{type(self).__name__}")  # prefix_mod: refused
            blocked = blocked | ~(allowed if scores.dim() == 4 else allowed[:, 0])
        # Half inputs give float32 scores and weights; the weights meet v in v's dtype.
        weights = masked_softmax(scores, blocked).to(v.dtype)  # (B, T, T)
        out = weighted_sum(weights, v)  # (B, T, d)
        return out, weights


def check_position_args(position, rope_base, rope_layout, rope_scaling) -> None:
    """ValueError naming what an attention layer's position scheme may be."""
    if position in ("learned", "sinusoidal"):
        raise ValueError(f"position={position!r} is added to the token vectors, not inside "
                         "attention: use TinyConfig(position=...) or add the table yourself; "
                         "an attention layer takes 'none', 'rope' or 'alibi'")
    if position not in ("none", "rope", "alibi"):
        raise ValueError(f"position must be 'none', 'rope' or 'alibi', got {position!r}")
    if rope_layout not in ("half", "interleaved"):
        raise ValueError(f"rope_layout must be 'half' or 'interleaved', got {rope_layout!r}")
    if isinstance(rope_base, bool) or not isinstance(rope_base, (int, float)) or rope_base <= 0:
        raise ValueError(f"rope_base must be a positive number, got {rope_base!r}")
    check_scaling(rope_scaling)
