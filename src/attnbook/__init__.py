"""attnbook: single-head causal self-attention, derived step by step.

The library behind the book *Attention, Step by Step*. Shape legend: B batch, T tokens,
d model width (``d_model``), h heads, d_h head width.
"""

from . import _moved
from .attention import Attention
from .fused import fused_attention
from .gpu import flash_attention, flash_decoding  # Triton loads on first use, not here
from .kv_cache import KVCache, cached_attention, generate
from .layer import AttentionLayer
from .masks import (
    BLOCK_EMPTY,
    BLOCK_FULL,
    BLOCK_PARTIAL,
    BlockMask,
    and_mods,
    block_mask,
    blocked_positions,
    causal_mask,
    causal_mod,
    document_mod,
    from_additive_mask,
    from_key_padding_mask,
    from_sdpa_mask,
    materialize,
    not_mod,
    or_mods,
    padding_mod,
    prefix_mod,
    relative_bias_mod,
    sink_mod,
    sliding_window_mod,
    softcap_mod,
    to_additive_mask,
    to_key_padding_mask,
    to_mha_attn_mask,
    to_sdpa_key_mask,
    to_sdpa_mask,
)
from .model import TinyConfig, TinyModel
from .multihead import MultiHeadAttention
from .online import online_softmax, tiled_attention, tiled_work
from .packing import Packed, pack, pad, unpack
from .positions import alibi_bias, alibi_slopes, apply_rope, sinusoidal_table
from .ring import ring_attention
from .scores import attention_scores, scale_scores
from .softmax import masked_softmax, softmax_jacobian, stable_softmax, temperature_softmax
from .weighted_sum import weighted_sum

__version__ = "0.1.0"

__all__ = [
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "sinusoidal_table",
    "Attention",
    "AttentionLayer",
    "KVCache",
    "cached_attention",
    "fused_attention",
    "flash_attention",
    "flash_decoding",
    "generate",
    "online_softmax",
    "ring_attention",
    "tiled_attention",
    "tiled_work",
    "BLOCK_EMPTY",
    "BLOCK_FULL",
    "BLOCK_PARTIAL",
    "BlockMask",
    "Packed",
    "and_mods",
    "block_mask",
    "causal_mod",
    "document_mod",
    "materialize",
    "not_mod",
    "or_mods",
    "pack",
    "pad",
    "padding_mod",
    "prefix_mod",
    "relative_bias_mod",
    "sink_mod",
    "sliding_window_mod",
    "softcap_mod",
    "unpack",
    "MultiHeadAttention",
    "TinyConfig",
    "TinyModel",
    "from_additive_mask",
    "from_key_padding_mask",
    "from_sdpa_mask",
    "softmax_jacobian",
    "temperature_softmax",
    "to_mha_attn_mask",
    "to_sdpa_key_mask",
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

# Modules that moved to attnbook.lab stay importable by their old paths (attnbook.notebook, ...):
# the editions handed out before the move import them (attnbook._moved).
_moved.install()

# The lab helpers the top level used to export, still found here for code written before they
# moved to attnbook.lab; they load on first use, so `import attnbook` imports none of the lab.
_MOVED_TO_LAB = {"FirstHead": "first_head", "train_first_head": "first_head",
                 "IGNORE": "tasks", "get_task": "tasks", "evaluate": "train", "train": "train"}


def __getattr__(name: str):
    """``attnbook.lab`` and the names of :data:`_MOVED_TO_LAB`, imported on first access."""
    import importlib

    if name == "lab":
        return importlib.import_module(".lab", __name__)
    if name in _MOVED_TO_LAB:
        module = importlib.import_module(f".lab.{_MOVED_TO_LAB[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
