"""The final module: single-head causal self-attention, computed one step at a time."""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_input, check_padding_mask
from .fused import fused_attention, repeat_kv
from .masks import blocked_positions, causal_mask, materialize
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax
from .weighted_sum import weighted_sum


class Attention(nn.Module):
    """Single-head causal self-attention, the seed's module made robust.

    Each token's output is a weighted average of the value vectors of the tokens at or
    before it; the weights come from how well its query matches their keys.

    Args:
        d_model: width ``d`` of each token vector (input and output).
        context_length: the longest sequence the module accepts; sizes the causal mask.

    Mask conventions (the seed's):
        * ``self.mask`` (the causal mask) is True where attention is blocked (``j > i``).
        * ``padding_mask`` is True for real tokens, False for padding. It masks keys:
          no query attends to a padded token.

    Empty rows:
        A query that can see no real key (left padding: it and everything before it is
        padding) gets all-zero weights, so its output is the zero vector, with finite
        (zero) gradients. The seed returned NaN there.

    Fused path:
        With ``fused=True`` (or ``m.fused = True`` later) steps 2 to 6 run as one call to
        ``F.scaled_dot_product_attention`` (:func:`attnbook.fused.fused_attention`): the same
        outputs up to rounding, faster at long sequences (chapter 9 measures it), and no (T, T)
        matrix. It never forms the weights, so ``return_weights=True`` computes them with the
        explicit steps instead.

    Shape:
        x: (B, T, d_model) with T <= context_length; padding_mask: (B, T) bool
        -> (B, T, d_model)

    The parameter and buffer names (``query``, ``key``, ``value``, ``mask``) are the seed's,
    so a ``state_dict`` saved from the seed's module loads unchanged.
    """

    def __init__(self, d_model: int, context_length: int, fused: bool = False):
        super().__init__()
        if d_model < 1 or context_length < 1:
            raise ValueError(
                f"d_model and context_length must be positive, got {d_model}, {context_length}"
            )
        self.d_model = d_model
        self.context_length = context_length
        # Three learned maps, each stored as an (out, in) weight W, computing x @ W.T.
        self.query = nn.Linear(d_model, d_model, bias=False)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        # A buffer, not a parameter: it follows .to(device), is saved, and is never trained.
        # Named "mask" because the seed's checkpoints call it that.
        self.register_buffer("mask", causal_mask(context_length))
        # One head of width d: the KV cache (chapter 12) reads these three numbers.
        self.n_heads = self.n_kv_heads = 1
        self.d_head = d_model
        # A plain attribute, not saved in the state_dict: which path computes the same result.
        self.fused = fused

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, context_length={self.context_length}, fused={self.fused}"

    @property
    def causal_mask(self) -> torch.Tensor:
        """The causal mask buffer, (context_length, context_length), True = blocked."""
        return self.mask

    def forward(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        *,
        mask_mod=None,
        return_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from every token to the real tokens at or before it.

        Runs the input checks (before step 1, not a step), step 1 (project) and then
        :meth:`attend` (steps 2 to 6).

        Args:
            x: token vectors.
            padding_mask: True for real tokens, False for padding; None if all are real.
            mask_mod: a mask function ``mask_mod(b, h, q_idx, kv_idx)``, True = MAY attend
                (FlexAttention's convention, chapter 21), materialised and AND-ed with the
                causal buffer and the padding; it takes the explicit steps. None: as before.
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
        # The fused kernel never forms the weights: asking for them takes the explicit path.
        fused = self.fused and not return_weights
        out, weights = self.attend(q, k, v, padding_mask, fused=fused,
                                   mask_mod=mask_mod)  # (B, T, d), (B, T, T)
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

        Returns:
            The outputs and the attention weights; the weights are None on the fused path.

        Shape:
            q, k, v: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T)
            -> (B, T, d) or (B, h, T, d_h), and weights (B, T, T) or (B, h, T, T)
        """
        if (self.fused if fused is None else fused) and mask_mod is None:
            return fused_attention(q, k, v, padding_mask), None  # Part III: one fused call
        T = q.size(-2)
        if q.dim() == 4 and k.size(1) != q.size(1):  # grouped-query attention (chapter 13)
            k, v = repeat_kv(k, q.size(1)), repeat_kv(v, q.size(1))
        if T == 0:  # no tokens: an empty result (a softmax over zero keys is undefined)
            return v.clone(), q.new_zeros(*q.shape[:-1], 0)  # v is empty: (..., 0, d)
        scores = attention_scores(q, k)  # (B, T, T)
        scores = scale_scores(scores, q.size(-1))  # (B, T, T)
        blocked = blocked_positions(self.mask[:T, :T], padding_mask)  # (T, T) or (B, T, T)
        if padding_mask is not None and scores.dim() == 4:
            blocked = blocked[:, None]  # (B, 1, T, T): every head sees the same padding
        if mask_mod is not None:  # chapter 21: the mask as a function, True = may attend
            h = q.size(1) if q.dim() == 4 else 1
            allowed = materialize(mask_mod, T, T, q.size(0), h, q.device)  # (B, h, T, T)
            blocked = blocked | ~(allowed if scores.dim() == 4 else allowed[:, 0])
        # Half inputs give float32 scores and weights; the weights meet v in v's dtype.
        weights = masked_softmax(scores, blocked).to(v.dtype)  # (B, T, T)
        out = weighted_sum(weights, v)  # (B, T, d)
        return out, weights
