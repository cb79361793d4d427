"""The module of Parts I and II: single-head causal self-attention, one step at a time.

This is the seed's module made robust, and nothing more: step 1 (three projections), steps 2 to
6 (score, scale, mask, softmax, weighted sum), the input checks, and zero weights for a query
that can see no real key. Later parts add their options in layers of their own
(:class:`attnbook.AttentionLayer`: the fused path, the KV cache, positions, mask functions;
:class:`attnbook.MultiHeadAttention`: many heads), so this file stays what chapters 0 to 8 derive.
Passing one of their options here (``fused=``, ``position=``, ``mask_mod=``, ...) raises a
TypeError that names the layer that has it.
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_input, check_padding_mask, refuse_moved_options
from .masks import blocked_positions, causal_mask
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax
from .weighted_sum import weighted_sum


class Attention(nn.Module):
    """Single-head causal self-attention, the original module made robust.

    Each token's output is a weighted average of the value vectors of the tokens at or
    before it; the weights come from how well its query matches their keys.

    Args:
        d_model: width ``d`` of each token vector (input and output).
        context_length: the longest sequence the module accepts; sizes the causal mask.

    Mask conventions (the original module's):
        * ``self.mask`` (the causal mask) is True where attention is blocked (``j > i``).
        * ``padding_mask`` is True for real tokens, False for padding. It masks keys:
          no query attends to a padded token.

    Empty rows:
        A query that can see no real key (left padding: it and everything before it is
        padding) gets all-zero weights, so its output is the zero vector, with finite
        (zero) gradients. The original module returned NaN there.

    Shape:
        x: (B, T, d_model) with T <= context_length; padding_mask: (B, T) bool
        -> (B, T, d_model)

    The parameter and buffer names (``query``, ``key``, ``value``, ``mask``) are the original
    module's, so a ``state_dict`` saved from the original module loads unchanged.
    """

    def __init__(self, d_model: int, context_length: int):
        super().__init__()
        if d_model < 1 or context_length < 1:
            raise ValueError(f"d_model and context_length must be positive, "
                             f"got {d_model}, {context_length}")
        self.d_model = d_model
        self.context_length = context_length
        # Three learned maps, each an (out, in) weight W computing x @ W.T.
        self.query = nn.Linear(d_model, d_model, bias=False)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        # A buffer, not a parameter: it follows .to(device), is saved, not trained.
        # Named "mask" because the original module's checkpoints call it that.
        self.register_buffer("mask", causal_mask(context_length))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, context_length={self.context_length}"

    @property
    def causal_mask(self) -> torch.Tensor:
        """The causal mask buffer, (context_length, context_length), True = blocked."""
        return self.mask

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None,
                *, return_weights: bool = False):
        """Attend from every token to the real tokens at or before it.

        Shape: x (B, T, d), padding_mask (B, T), True = real -> (B, T, d),
        and with ``return_weights=True`` also the weights (B, T, T).
        """
        B, T, d = check_input(x, self.d_model, self.context_length,
                              self.query.weight.dtype)
        if padding_mask is not None:
            check_padding_mask(padding_mask, B, T)
        q, k, v = self.query(x), self.key(x), self.value(x)  # step 1: (B, T, d)
        out, weights = self.attend(q, k, v, padding_mask)  # steps 2 to 6
        return (out, weights) if return_weights else out

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               padding_mask: torch.Tensor | None = None):
        """Steps 2 to 6: q, k, v (B, T, d) -> output (B, T, d), weights (B, T, T)"""
        T = q.size(-2)
        scores = attention_scores(q, k)  # step 2: (B, T, T)
        scores = scale_scores(scores, q.size(-1))  # step 3: divide by sqrt(d)
        blocked = blocked_positions(self.mask[:T, :T], padding_mask)  # step 4
        # Step 5: an empty row gets zeros; half inputs give float32 weights.
        weights = masked_softmax(scores, blocked).to(v.dtype)  # (B, T, T)
        return weighted_sum(weights, v), weights  # step 6: (B, T, d)

    # Later chapters' options are refused with the layer that has them (not a step; never shown).
    def __new__(cls, *args, **kwargs):
        if cls is Attention:  # fused=True, position=...: a TypeError naming AttentionLayer
            refuse_moved_options(cls.__init__, kwargs, len(args), 2)
        return super().__new__(cls)

    def __call__(self, *args, **kwargs):
        if kwargs:  # forward(x, mask_mod=...): a TypeError naming the layer that takes it
            refuse_moved_options(self.forward, kwargs, owner=type(self).__name__)
        return super().__call__(*args, **kwargs)
