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
from .layer import AttentionLayer
from .masks import blocked_positions, to_key_padding_mask, to_sdpa_mask


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
                 *, alibi_slopes=None, rotary_dim: int | None = None):
        super().__init__(d_model, context_length, fused=fused, position=position,
                         rope_base=rope_base, rope_layout=rope_layout, rope_scaling=rope_scaling,
                         alibi_slopes=alibi_slopes, rotary_dim=rotary_dim, _heads=n_heads)
        if n_heads < 1 or d_model % n_heads != 0:
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
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_head = d_model // n_heads
        if n_kv_heads != n_heads:
            # Grouped-query attention: keys and values get n_kv_heads heads of width d_h, so
            # their projections (and the KV cache) shrink by n_heads / n_kv_heads.
            self.key = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
            self.value = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        # W_o mixes the heads' outputs back into one d-wide vector per token.
        self.out = nn.Linear(d_model, d_model, bias=False)

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
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, h * d_h)

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
        return (f"d_model={self.d_model}, n_heads={self.n_heads}{kv}, d_head={self.d_head}, "
                f"fused={self.fused}")


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
