"""Many heads: split d_model into h heads of width d_h, let each attend on its own, merge.

``MultiHeadAttention`` extends :class:`attnbook.AttentionLayer` (the single-head module with
the later chapters' options) instead of rewriting it: the same
three projections (``query``, ``key``, ``value``, each d -> d), the same causal ``mask`` and the
same ``attend`` (steps 2 to 6), which works on (B, h, T, d_h) tensors and scales by sqrt(d_h).
What is new is the split into heads (before step 2), and after step 6 the merge and one output
projection ``out``.

Two reference versions sit beside it, so the book and the tests can check it against PyTorch:
:func:`to_torch_multihead` (``nn.MultiheadAttention`` with our weights) and
:func:`multihead_sdpa` (``scaled_dot_product_attention`` on 4-D input).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_input, check_padding_mask
from .fused import repeat_kv
from .layer import AttentionLayer
from .masks import (
    blocked_positions,
    check_not_lost_to_causal,
    check_score_mod,
    materialize,
    to_key_padding_mask,
    to_sdpa_mask,
)
from .softmax import masked_softmax


class MultiHeadAttention(AttentionLayer):
    """Causal multi-head self-attention built on the single-head module.

    Each of the ``n_heads`` heads gets its own slice of width ``d_head = d_model // n_heads``
    of the queries, keys and values, attends on its own (scaled by sqrt(d_head)), and the
    heads' outputs are concatenated and mixed by the output projection ``out``.

    Args:
        d_model: width ``d`` of each token vector (input and output).
        context_length: the longest sequence the module accepts; sizes the causal mask.
        n_heads: number of heads ``h``; must divide ``d_model``.
        fused: compute steps 2-6 with PyTorch's fused kernel (same result, see chapter 11).
        n_kv_heads: key/value heads ``h_kv`` (grouped-query attention); must divide
            ``n_heads``. None gives one per query head; 1 is multi-query attention.
        position, rope_base, rope_layout, rope_scaling: the position scheme, as in
            :class:`attnbook.Attention` ("none", "rope" or "alibi"); RoPE turns every head's
            q and k (d_head must be even), ALiBi gives head h its slope ``alibi_slopes(h)[h]``.
        alibi_slopes: ALiBi's slopes, one positive float per head (None: the paper's rule,
            :func:`attnbook.positions.alibi_slopes`); a plain attribute, not in the state_dict.
        rotary_dim: partial rotary, as in :class:`attnbook.Attention`: RoPE turns the first
            ``rotary_dim`` features of every head (even, <= d_head); None: all of them.

    The options of current models (:func:`attnbook.convert.from_transformers` sets them from a
    transformers layer; each is off by default, and then nothing is drawn or stored anew):

        bias: True (all four projections), False, or some of ``("query", "key", "value",
            "out")`` (Qwen2: the first three).
        head_dim: the head width, independent of d_model / n_heads (Gemma: 8 x 256 in 2304).
        scale: multiplies q k^T instead of 1 / sqrt(d_head) (Gemma 2: query_pre_attn_scalar).
        score_mod: ``score_mod(score, b, h, q_idx, kv_idx)`` on the scaled scores, in forward
            and in the KV cache (Gemma 2's softcapping: :func:`attnbook.masks.softcap_mod`).
        window: a query sees the last ``window`` tokens (itself included), in forward and in
            the KV cache (Mistral; Gemma 2's sliding layers); fused with SDPA when asked.
        qk_norm: RMSNorm's eps: each head's q and k are normalised (``q_norm``, ``k_norm``,
            weights of width d_head) before RoPE (Qwen3, Gemma 3).
        qk_norm_over: what one RMSNorm spans: ``"head"`` (each head's d_head features, as
            above) or ``"projection"`` (the whole projection, h * d_head features of q and
            h_kv * d_head of k, weights of those widths: OLMo 2).
        sinks: one learned logit per head in the softmax's denominator (gpt-oss).
        causal_buffer: False keeps no (context_length, context_length) ``mask`` in the
            state_dict; the causal rule is computed from token indices.

    Mask conventions: those of :class:`attnbook.Attention` (``mask`` True = blocked,
    ``padding_mask`` True = real token).

    Raises:
        ValueError: if ``n_heads`` does not divide ``d_model`` or ``n_kv_heads`` does not
            divide ``n_heads``, listing the divisors that would.

    Shape:
        x: (B, T, d_model), padding_mask: (B, T) -> (B, T, d_model);
        weights (with ``return_weights=True``): (B, h, T, T)

    With ``n_heads=1`` and ``out.weight`` set to the identity it computes exactly what the
    single-head module (and the seed's) computes.
    """

    def __init__(self, d_model: int, context_length: int, n_heads: int, fused: bool = False,
                 n_kv_heads: int | None = None, position: str = "none",
                 rope_base: float = 10000.0, rope_layout: str = "half", rope_scaling=None,
                 *, alibi_slopes=None, rotary_dim: int | None = None,
                 bias=False, head_dim: int | None = None, scale: float | None = None,
                 score_mod=None, window: int | None = None, qk_norm: float | None = None,
                 qk_norm_over: str = "head", sinks: bool = False, causal_buffer: bool = True):
        check_real_options(n_heads, bias, head_dim, scale, score_mod, window, qk_norm, sinks)
        if qk_norm_over not in QK_NORM_OVER:
            raise ValueError(f"qk_norm_over must be one of {QK_NORM_OVER} (one RMSNorm per head, "
                             f"or over the whole projection as OLMo 2), got {qk_norm_over!r}")
        # Without the (T, T) buffer the causal rule is computed from token indices (visible).
        if not causal_buffer and (isinstance(context_length, bool) or context_length < 1):
            raise ValueError(f"context_length must be positive, got {context_length}")
        super().__init__(d_model, context_length if causal_buffer else 1, fused=fused,
                         position=position, rope_base=rope_base, rope_layout=rope_layout,
                         rope_scaling=rope_scaling, alibi_slopes=alibi_slopes,
                         rotary_dim=rotary_dim, _heads=n_heads, _head_dim=head_dim)
        if head_dim is None and (n_heads < 1 or d_model % n_heads != 0):
            raise ValueError(
                f"n_heads={n_heads} must be a positive divisor of d_model={d_model}: each head "
                f"gets d_model / n_heads features (try n_heads in {_divisors(d_model)})"
            )
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads < 1 or n_heads % n_kv_heads != 0:
            raise ValueError(
                f"n_kv_heads={n_kv_heads} must be a positive divisor of n_heads={n_heads}: each "
                f"key/value head serves n_heads / n_kv_heads query heads "
                f"(try n_kv_heads in {_divisors(n_heads)})"
            )
        self.causal_buffer = causal_buffer
        if not causal_buffer:  # no context_length² bytes: a placeholder outside the state_dict
            self.context_length = context_length
            del self._buffers["mask"]
            self.register_buffer("mask", torch.zeros(0, 0, dtype=torch.bool), persistent=False)
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads if head_dim is None else head_dim
        biases = projection_biases(bias)  # the projections that add a learned bias
        if head_dim is not None or biases:
            # Real models' projections: a head width of its own (Gemma: 8 x 256 != 2304), or
            # biases (Qwen2: q, k, v; Phi, GPT-NeoX: all four). Drawn anew, in the same order.
            width = n_heads * self.d_head
            self.query = nn.Linear(d_model, width, bias="query" in biases)
            self.key = nn.Linear(d_model, n_kv_heads * self.d_head, bias="key" in biases)
            self.value = nn.Linear(d_model, n_kv_heads * self.d_head, bias="value" in biases)
            self.out = nn.Linear(width, d_model, bias="out" in biases)
        else:
            if n_kv_heads != n_heads:
                # Grouped-query attention: keys and values get n_kv_heads heads of width d_h,
                # so their projections (and the KV cache) shrink by n_heads / n_kv_heads.
                self.key = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
                self.value = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
            # W_o mixes the heads' outputs back into one d-wide vector per token.
            self.out = nn.Linear(d_model, d_model, bias=False)
        # The options of current models (none draws a random number; all off by default):
        # the score scale (None: 1 / sqrt(d_h)), a score_mod on the scaled scores (Gemma 2's
        # softcapping), a sliding window of `window` keys, RMSNorm on each head's q and k,
        # and one learned sink logit per head in the softmax's denominator (gpt-oss).
        self.scale, self.score_mod, self.window = scale, score_mod, window
        self.q_norm = self.k_norm = self.sinks = None
        self.qk_norm_over = qk_norm_over
        if qk_norm is not None:
            # OLMo 2 normalises the whole projection: h * d_h features of q, h_kv * d_h of k.
            whole = qk_norm_over == "projection"
            self.q_norm = nn.RMSNorm(self.d_head * (n_heads if whole else 1), eps=qk_norm)
            self.k_norm = nn.RMSNorm(self.d_head * (n_kv_heads if whole else 1), eps=qk_norm)
        if sinks:
            self.sinks = nn.Parameter(torch.zeros(n_heads))

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """Cut the last dimension into contiguous slices of width d_h, one per head.

        Shape:
            (B, T, h * d_h) -> (B, h, T, d_h); keys and values of grouped-query attention
            have h_kv heads: (B, T, h_kv * d_h) -> (B, h_kv, T, d_h)
        """
        B, T, width = x.shape
        # View first (features = heads * d_h, head-major), then move heads before tokens.
        return x.view(B, T, width // self.d_head, self.d_head).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate the heads' outputs side by side: the inverse of :meth:`split_heads`.

        Shape:
            (B, h, T, d_h) -> (B, T, d)
        """
        B, h, T, d_h = x.shape
        return x.transpose(1, 2).reshape(B, T, h * d_h)  # (B, T, h * d_h)

    def forward(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        *,
        mask_mod=None,
        positions: torch.Tensor | None = None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Every head attends from each token to the real tokens at or before it.

        Args:
            x: token vectors.
            padding_mask: True for real tokens, False for padding; None if all are real.
            mask_mod: ``mask_mod(b, h, q_idx, kv_idx)``, True = may attend, evaluated per head
                and AND-ed with the causal buffer and the padding, as in
                :meth:`attnbook.Attention.forward` (explicit steps, also with ``fused=True``;
                ``prefix_mod`` is refused). None: as before.
            positions: integer positions (T,) or (B, T) for RoPE or ALiBi (see
                :class:`attnbook.Attention`); None: 0 .. T - 1, skipping pads.
            return_weights: also return every head's attention weights.

        Returns:
            The outputs, and with ``return_weights=True`` also the weights (B, h, T, T).

        Shape:
            x: (B, T, d_model), padding_mask: (B, T) -> (B, T, d_model)
        """
        B, T, d = check_input(x, self.d_model, self.context_length, self.query.weight.dtype)
        if padding_mask is not None:
            check_padding_mask(padding_mask, B, T)

        q, k, v = self.project_heads(x)  # (B, h, T, d_h), (B, h_kv, T, d_h) twice
        q, k = self.norm_qk(q, k)  # QK-norm (Qwen3, Gemma 3), before the rotation
        q, k, bias = self.with_positions(q, k, padding_mask, positions)  # bias (B?, h, T, T)
        # The fused kernel never forms the weights: asking for them takes the explicit path.
        fused = self.fused and not return_weights
        heads, weights = self.attend(q, k, v, padding_mask, fused=fused, mask_mod=mask_mod,
                                     bias=bias)  # (B, h, T, d_h), ...
        out = self.merge(heads)  # (B, T, d)
        return (out, weights) if return_weights else out

    def project_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step 1 and the split: queries, keys and values, one slice per head.

        Shape:
            x: (B, T, d) -> q: (B, h, T, d_h), k and v: (B, h_kv, T, d_h)
        """
        return (self.split_heads(self.query(x)), self.split_heads(self.key(x)),
                self.split_heads(self.value(x)))

    def merge(self, heads: torch.Tensor) -> torch.Tensor:
        """After step 6: concatenate the heads and mix them with the output projection.

        Shape:
            (B, h, T, d_h) -> (B, T, d)
        """
        return self.out(self.merge_heads(heads))

    def extra_repr(self) -> str:
        kv = f", n_kv_heads={self.n_kv_heads}" if self.n_kv_heads != self.n_heads else ""
        extra = "".join(f", {name}={getattr(self, name)!r}" for name in ("scale", "window")
                        if getattr(self, name, None) is not None)
        return (f"d_model={self.d_model}, n_heads={self.n_heads}{kv}, d_head={self.d_head}, "
                f"fused={self.fused}{extra}")

    # The options of current models (the closing part of the book): QK-norm, a score scale, a
    # score_mod, a sliding window and sink logits. None is on by default.

    def norm_qk(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """QK-norm: RMSNorm over each head's d_h features of q and k (Qwen3, Gemma 3), or
        over the whole projection, all heads' features at once (OLMo 2).

        Shape:
            q: (B, h, T, d_h), k: (B, h_kv, T, d_h) -> the same
        """
        if self.q_norm is None:
            return q, k
        if self.qk_norm_over == "head":
            return self.q_norm(q), self.k_norm(k)
        # the projection's features side by side again, normalised, and split back into heads
        return (self.split_heads(self.q_norm(self.merge_heads(q))),
                self.split_heads(self.k_norm(self.merge_heads(k))))

    @property
    def real_options(self) -> bool:
        """Whether a score scale, score_mod, window, QK-norm or sinks is on: then steps 2 to 6
        (and the KV cache) run :meth:`attend_keys`, which honours them."""
        return (self.scale is not None or self.score_mod is not None or self.window is not None
                or self.q_norm is not None or self.sinks is not None or not self.causal_buffer)

    def attend(self, q, k, v, padding_mask=None, *, fused=None, mask_mod=None, bias=None):
        """Steps 2 to 6: :meth:`attnbook.AttentionLayer.attend`, or, when one of the options of
        current models is on (:attr:`real_options`), :meth:`attend_keys` with the causal rule,
        the window, the padding and a mask_mod as one mask (True = may attend)."""
        if not self.real_options:
            return super().attend(q, k, v, padding_mask, fused=fused, mask_mod=mask_mod,
                                  bias=bias)
        B, T = q.size(0), q.size(-2)
        idx = torch.arange(T, device=q.device)
        allowed = self.visible(idx, idx)  # (T, T): causal, and the window
        if padding_mask is not None:
            allowed = allowed & padding_mask[:, None, None, :]  # (B, 1, T, T)
        if mask_mod is not None:
            may = materialize(mask_mod, T, T, B, self.n_heads, q.device)  # (B, h, T, T)
            check_not_lost_to_causal(mask_mod, may, ~self.visible(idx, idx), "MultiHeadAttention")
            allowed = allowed & may
        fused = self.fused if fused is None else fused
        return self.attend_keys(q, k, v, allowed, idx, idx, bias=bias, fused=fused,
                                no_empty_rows=padding_mask is None and mask_mod is None)

    def visible(self, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        """True where query token q_idx may see key token kv_idx: at or before it, and with a
        window W fewer than W tokens behind (Mistral, Gemma 2: ``kv_idx > q_idx - W``).

        Shape:
            q_idx: (t,), kv_idx: (L,) or (B, L) token indices -> (t, L) or (B, 1, t, L)
        """
        if kv_idx.dim() == 2:
            kv_idx = kv_idx[:, None, None, :]  # (B, 1, 1, L)
        behind = q_idx[:, None] - kv_idx  # (t, L) or (B, 1, t, L)
        allowed = behind >= 0
        if self.window is not None:
            allowed = allowed & (behind < self.window)
        return allowed

    def attend_keys(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    allowed: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor, *,
                    bias: torch.Tensor | None = None, fused: bool = False,
                    no_empty_rows: bool = False):
        """Steps 2 to 6 with the options of current models, for any queries and keys.

        scores = q k^T * scale (default 1 / sqrt(d_h)), + bias (ALiBi), then ``score_mod(score,
        b, h, q_idx, kv_idx)`` (FlexAttention's signature; the indices are token indices),
        blocked where ``allowed`` is False, then a softmax whose denominator also holds
        exp(sink_h) when the module has sinks (gpt-oss; the sink's own weight is dropped),
        and the weighted sum. A query that sees no key outputs zeros. With ``fused=True`` and
        neither score_mod nor sinks, SDPA computes it (its ``scale=`` and a bool mask;
        ``is_causal`` alone when the mask is the causal one); ``no_empty_rows`` says the caller
        knows every query sees a key (no padding), so the empty-row rule is skipped.

        Returns:
            the heads' outputs and the weights (None when fused).

        Shape:
            q: (B, h, t, d_h); k, v: (B, h_kv, L, d_h); allowed: broadcastable to (B, h, t, L);
            q_idx: (t,); kv_idx: (L,) or (B, L) -> (B, h, t, d_h), (B, h, t, L)
        """
        B, h, t, d_h = q.shape
        scale = self.scale if self.scale is not None else d_h ** -0.5
        if k.size(1) != h:  # grouped-query attention
            k, v = repeat_kv(k, h), repeat_kv(v, h)
        allowed = allowed.expand(B, h, t, k.size(2)) if t and k.size(2) else allowed
        if fused and self.score_mod is None and self.sinks is None:
            if no_empty_rows and bias is None and self.window is None and t == k.size(2):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                      scale=scale), None  # causal alone
            if no_empty_rows:
                mask = allowed if bias is None else bias.to(q.dtype).masked_fill(
                    ~allowed, float("-inf"))
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                      scale=scale), None
            empty = ~allowed.any(dim=-1, keepdim=True)  # (B, h, t, 1): the empty-row rule
            mask = allowed | empty
            if bias is not None:
                mask = bias.to(q.dtype).masked_fill(~mask, float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
            return out.masked_fill(empty, 0.0), None
        dt = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        scores = (q.to(dt) @ k.to(dt).transpose(-2, -1)) * scale  # (B, h, t, L)
        if bias is not None:
            scores = scores + bias
        if self.score_mod is not None:
            kv = kv_idx[:, None, None, :] if kv_idx.dim() == 2 else kv_idx
            scores = self.score_mod(scores, torch.arange(B, device=q.device)[:, None, None, None],
                                    torch.arange(h, device=q.device)[None, :, None, None],
                                    q_idx[:, None], kv)
        scores = scores.masked_fill(~allowed, float("-inf"))
        if self.sinks is not None:  # one more logit per head in the denominator, then dropped
            sink = self.sinks.to(dt)[None, :, None, None].expand(B, h, t, 1)
            weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            weights = masked_softmax(scores, ~allowed)
        weights = weights.to(v.dtype)
        return weights @ v, weights


PROJECTIONS = ("query", "key", "value", "out")
QK_NORM_OVER = ("head", "projection")


def projection_biases(bias) -> tuple[str, ...]:
    """The projections that get a bias: ``bias`` is False (none), True (all four) or some of
    :data:`PROJECTIONS` (Qwen2: ``("query", "key", "value")``)."""
    if isinstance(bias, bool):
        return PROJECTIONS if bias else ()
    if isinstance(bias, str):
        bias = (bias,)
    names = tuple(bias)
    unknown = [b for b in names if b not in PROJECTIONS]
    if unknown:
        raise ValueError(f"bias must be True, False or some of {PROJECTIONS}, got {bias!r}")
    return names


def check_real_options(n_heads, bias, head_dim, scale, score_mod, window, qk_norm,
                       sinks) -> None:
    """ValueError (or TypeError) naming the option of current models that is out of range."""
    projection_biases(bias)
    if head_dim is not None and (isinstance(head_dim, bool) or not isinstance(head_dim, int)
                                 or head_dim < 1):
        raise ValueError(f"head_dim must be a positive integer or None, got {head_dim!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not 0 < scale < float("inf")):
        raise ValueError(f"scale must be a positive number (multiplies q k^T) or None "
                         f"(1 / sqrt(d_h)), got {scale!r}")
    if score_mod is not None:
        check_score_mod(score_mod)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                               or window < 1):
        raise ValueError(f"window must be a positive integer (keys a query sees) or None, got "
                         f"{window!r}")
    if qk_norm is not None and (isinstance(qk_norm, bool)
                                or not isinstance(qk_norm, (int, float)) or qk_norm <= 0):
        raise ValueError(f"qk_norm is RMSNorm's eps (a positive number) or None, got "
                         f"{qk_norm!r}")
    if not isinstance(sinks, bool):
        raise ValueError(f"sinks must be True or False, got {sinks!r}")


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def to_torch_multihead(m: MultiHeadAttention) -> nn.MultiheadAttention:
    """PyTorch's ``nn.MultiheadAttention`` holding the same weights as ``m``.

    PyTorch keeps W_q, W_k, W_v stacked in one (3d, d) matrix ``in_proj_weight``, in that
    order, and the output projection in ``out_proj``. Call the result with
    ``batch_first`` inputs, ``attn_mask=m.mask[:T, :T]`` (its bool ``attn_mask`` is True =
    blocked, like ours) and ``key_padding_mask=to_key_padding_mask(padding_mask)`` (its
    True = ignore, the opposite of ours).

    Shape:
        the module maps (B, T, d_model) -> (B, T, d_model), like ``m``.
    """
    if m.n_kv_heads != m.n_heads:
        raise ValueError("nn.MultiheadAttention has no grouped-query form: build the reference "
                         f"from a module with n_kv_heads = n_heads (got {m.n_kv_heads} and "
                         f"{m.n_heads})")
    ref = nn.MultiheadAttention(m.d_model, m.n_heads, bias=False, batch_first=True)
    ref = ref.to(device=m.query.weight.device, dtype=m.query.weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([m.query.weight, m.key.weight, m.value.weight]))
        ref.out_proj.weight.copy_(m.out.weight)
    return ref


def torch_multihead_forward(m: MultiHeadAttention, x: torch.Tensor,
                            padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``m``'s computation done by ``nn.MultiheadAttention``, with the masks translated.

    Shape:
        x: (B, T, d_model), padding_mask: (B, T), True = real -> (B, T, d_model)
    """
    ref = to_torch_multihead(m)
    T = x.size(1)
    key_padding = None if padding_mask is None else to_key_padding_mask(padding_mask)
    out, _ = ref(x, x, x, attn_mask=m.mask[:T, :T], key_padding_mask=key_padding,
                 need_weights=False)
    return out


def multihead_sdpa(m: MultiHeadAttention, x: torch.Tensor,
                   padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``m``'s computation with the heads handed to PyTorch's fused attention as 4-D tensors.

    ``scaled_dot_product_attention`` treats every leading dimension as a batch, so (B, h, T, d_h)
    runs all heads at once and scales by sqrt(d_h), the width of the last dimension.

    Shape:
        x: (B, T, d_model), padding_mask: (B, T), True = real -> (B, T, d_model)
    """
    q = m.split_heads(m.query(x))  # (B, h, T, d_h)
    k = m.split_heads(m.key(x))  # (B, h, T, d_h)
    v = m.split_heads(m.value(x))  # (B, h, T, d_h)
    if padding_mask is None:
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        T = x.size(1)
        blocked = blocked_positions(m.mask[:T, :T], padding_mask)  # (B, T, T)
        allowed = to_sdpa_mask(blocked)[:, None]  # (B, 1, T, T): SDPA's True = may attend
        heads = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return m.out(m.merge_heads(heads))  # (B, T, d)
