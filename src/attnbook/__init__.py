"""attnbook: single-head causal self-attention, derived step by step.

The library behind the book *Attention, Step by Step*. Shape legend: B batch, T tokens,
d model width (``d_model``), h heads, d_h head width.
"""

from .attention import Attention
from .masks import (
    blocked_positions,
    causal_mask,
    to_additive_mask,
    to_key_padding_mask,
    to_sdpa_mask,
)
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax, stable_softmax
from .weighted_sum import weighted_sum

__version__ = "0.1.0"

__all__ = [
    "Attention",
    "attention_scores",
    "blocked_positions",
    "causal_mask",
    "masked_softmax",
    "scale_scores",
    "stable_softmax",
    "to_additive_mask",
    "to_key_padding_mask",
    "to_sdpa_mask",
    "weighted_sum",
]
