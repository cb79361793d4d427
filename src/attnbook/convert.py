"""From a transformers attention layer to the book's module: the attention of real models.

:func:`from_transformers` reads one attention layer of a Hugging Face ``transformers`` model and
its config, builds a :class:`attnbook.MultiHeadAttention` with the options that layer needs, and
copies the weights in with ``load_state_dict(strict=True)``. transformers itself is not
imported: the function reads attributes, so it works with the installed version (4.x) and with
the field names of transformers 5.

The config fields it reads (:data:`FIELDS`), per option of the module:

=========================================  ===============================================
config field (layer attribute)             MultiHeadAttention option
=========================================  ===============================================
hidden_size                                d_model
num_attention_heads, num_key_value_heads   n_heads, n_kv_heads (grouped-query attention)
head_dim (layer.head_dim / head_size)      head_dim (Gemma: 8 x 256 != 2304)
attention_bias, q/k/v/o_proj.bias          bias (Qwen2: q, k, v; Phi, GPT-NeoX: all four)
query_pre_attn_scalar (layer.scaling)      scale (Gemma 2 and 3)
attn_logit_softcapping                     score_mod = softcap_mod(cap) (Gemma 2)
sliding_window, layer_types                window (Mistral: every layer; Gemma 2/3, Qwen:
                                           the layers marked "sliding_attention")
q_norm, k_norm, rms_norm_eps               qk_norm (Qwen3; Gemma 3 stores weight - 1);
                                           qk_norm_over="projection" when the norm spans
                                           all heads (OLMo 2: h * d_h and h_kv * d_h)
sinks                                      sinks (gpt-oss)
rope_theta, rope_scaling (transformers 4)  position="rope", rope_base, rope_scaling
rope_parameters (transformers 5)           the same, read from one dict (per layer type
                                           for Gemma 3)
rope_local_base_freq                       rope_base of Gemma 3's sliding layers
partial_rotary_factor, rotary_pct          rotary_dim = int(head_dim * factor)
max_position_embeddings                    context_length (default), and the length L of
                                           ``dynamic`` scaling, as transformers reads it
=========================================  ===============================================

Anything else that changes what the layer computes is refused with a ValueError that names the
field (Phi's ``qk_layernorm``, a ``longrope`` rope type, bidirectional attention, a model type
it does not know).
"""

from __future__ import annotations

import torch

from .masks import softcap_mod
from .multihead import MultiHeadAttention
from .positions import _ROPE_TYPE_KEYS

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text",
            "phi", "gpt_neox", "gpt_oss", "olmo2")
"""The ``config.model_type`` values :func:`from_transformers` converts."""

FIELDS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
          "attention_bias", "query_pre_attn_scalar", "attn_logit_softcapping", "sliding_window",
          "layer_types", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
          "rope_local_base_freq", "partial_rotary_factor", "rotary_pct",
          "max_position_embeddings")
"""The config fields :func:`from_transformers` reads."""


def _refuse(model_type: str, field: str, value, why: str):
    raise ValueError(f"{model_type}: config.{field}={value!r} cannot be held by "
                     f"attnbook.MultiHeadAttention: {why}")


def rope_settings(config, layer_idx: int, head_dim: int) -> dict:
    """``rope_base``, ``rope_scaling`` and ``rotary_dim`` of one layer, as the installed
    transformers computes its rotation, from transformers 4's ``rope_theta`` + ``rope_scaling``
    or transformers 5's ``rope_parameters`` (a dict, or for Gemma 3 one dict per layer type).

    ``dynamic`` scaling takes its length L from ``max_position_embeddings`` (transformers 4.57
    reads no ``original_max_position_embeddings`` for it, and transformers 5 ignores that key);
    ``yarn`` from the dict's ``original_max_position_embeddings``, else max_position_embeddings.
    """
    mt = config.model_type
    kind = _layer_type(config, layer_idx)
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params:
        if kind in params and isinstance(params[kind], dict):  # transformers 5, Gemma 3
            params = params[kind]
        params = dict(params)
        base = params.pop("rope_theta", None)
        partial = params.pop("partial_rotary_factor", None)
        scaling = params
        if base is None:
            _refuse(mt, "rope_parameters", config.rope_parameters,
                    "it has no 'rope_theta'")
    else:
        base = getattr(config, "rope_theta", None)
        if mt == "gpt_neox" and base is None:
            base = getattr(config, "rotary_emb_base", None)
        scaling = getattr(config, "rope_scaling", None)
        partial = None
        if mt.startswith("gemma3") and kind == "sliding_attention":  # Gemma 3's local layers
            base, scaling = config.rope_local_base_freq, None
        if base is None:
            _refuse(mt, "rope_theta", None, "a rotary model needs its base")
    if partial is None:
        partial = getattr(config, "partial_rotary_factor", None)
    if partial is None and mt == "gpt_neox":
        partial = getattr(config, "rotary_pct", 1.0)
    partial = 1.0 if partial is None else partial
    rotary_dim = int(head_dim * partial)
    if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
        _refuse(mt, "partial_rotary_factor", partial,
                f"it turns {rotary_dim} of {head_dim} features; RoPE turns pairs")
    return {"rope_base": float(base),
            "rope_scaling": _scaling(mt, scaling, config),
            "rotary_dim": None if rotary_dim == head_dim else rotary_dim}


def _scaling(mt: str, scaling, config):
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        _refuse(mt, "rope_scaling", scaling, "transformers' rope dicts only")
    scaling = dict(scaling)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return None
    if kind not in ("linear", "dynamic", "yarn", "llama3"):
        _refuse(mt, "rope_scaling", scaling,
                f"rope_type {kind!r} is not one of default, linear, dynamic, yarn, llama3")
    scaling.pop("type", None)
    scaling["rope_type"] = kind
    L = config.max_position_embeddings
    if kind == "dynamic":  # transformers' L: max_position_embeddings, whatever the dict says
        scaling["original_max_position_embeddings"] = L
    elif kind == "yarn" and not scaling.get("original_max_position_embeddings"):
        scaling["original_max_position_embeddings"] = L
    need, may = _ROPE_TYPE_KEYS[kind]  # the keys transformers reads; it ignores the others
    return {k: v for k, v in scaling.items() if k in ("rope_type", *need, *may)}


def _layer_type(config, layer_idx: int) -> str:
    types = getattr(config, "layer_types", None)
    return types[layer_idx] if types else "full_attention"


def _get(layer, *names):
    for name in names:
        if hasattr(layer, name):
            return getattr(layer, name)
    raise AttributeError(f"{type(layer).__name__} has none of {names}")


def from_transformers(layer: torch.nn.Module, config, layer_idx: int | None = None, *,
                      context_length: int | None = None,
                      fused: bool = False) -> MultiHeadAttention:
    """The book's module computing what the transformers attention ``layer`` computes.

    Args:
        layer: one attention layer of a transformers model (``model.layers[i].self_attn``,
            GPT-NeoX's ``attention``), any dtype and device: the module gets its weights.
        config: the model's config (for Gemma 3 the text config).
        layer_idx: the layer's index (for the layer types of Gemma 2/3 and Qwen); default
            ``layer.layer_idx``.
        context_length: the longest sequence; default ``config.max_position_embeddings``. The
            module keeps no (T, T) buffer, so a long context costs nothing.
        fused: the fused path where PyTorch offers one (no score_mod, no sinks).

    Raises:
        ValueError: naming the config field that the module cannot hold.
    """
    if getattr(config, "model_type", None) == "gemma3" and hasattr(config, "text_config"):
        config = config.text_config  # Gemma 3 with vision: its language model's config
    mt = getattr(config, "model_type", None)
    if mt not in FAMILIES:
        raise ValueError(f"config.model_type={mt!r}: from_transformers converts {FAMILIES}")
    layer_idx = getattr(layer, "layer_idx", 0) if layer_idx is None else layer_idx
    kind = _layer_type(config, layer_idx)
    if kind not in ("full_attention", "sliding_attention"):
        _refuse(mt, "layer_types", kind, f"layer {layer_idx}'s attention is neither full "
                "nor sliding")
    if getattr(layer, "is_causal", True) is not True:
        _refuse(mt, "use_bidirectional_attention", True, "the module is causal")
    dropout = getattr(config, "attention_dropout", 0.0) or 0.0
    if layer.training and dropout > 0:
        _refuse(mt, "attention_dropout", dropout, "the module has no dropout on its weights; "
                "convert the layer in eval mode (model.eval())")
    if mt == "phi" and getattr(config, "qk_layernorm", False):
        _refuse(mt, "qk_layernorm", True, "Phi's LayerNorm on q and k (with a bias) is not "
                "QK-norm's RMSNorm")
    d = config.hidden_size
    h = config.num_attention_heads
    h_kv = getattr(config, "num_key_value_heads", None) or h
    d_h = _get(layer, "head_dim", "head_size")
    if mt == "gpt_neox":
        q_w, k_w, v_w, q_b, k_b, v_b = _split_neox(layer.query_key_value, h, d_h)
        o = layer.dense
    else:
        projs = [layer.q_proj, layer.k_proj, layer.v_proj]
        o = layer.o_proj if hasattr(layer, "o_proj") else layer.dense
        q_w, k_w, v_w = (p.weight for p in projs)
        q_b, k_b, v_b = (p.bias for p in projs)
    biases = tuple(name for name, b in zip(("query", "key", "value", "out"),
                                           (q_b, k_b, v_b, o.bias)) if b is not None)
    scaling = float(getattr(layer, "scaling", d_h ** -0.5))
    scale = None if scaling == d_h ** -0.5 else scaling
    cap = getattr(config, "attn_logit_softcapping", None) if mt.startswith("gemma") else None
    window = None
    if mt == "mistral":
        window = getattr(config, "sliding_window", None)
    elif kind == "sliding_attention":
        window = getattr(layer, "sliding_window", None) or config.sliding_window
    qk_norm, qk_norm_over = None, "head"
    if getattr(layer, "q_norm", None) is not None:
        qk_norm = float(getattr(layer.q_norm, "variance_epsilon",
                                getattr(layer.q_norm, "eps", None)))
        # OLMo 2's RMSNorm spans the whole projection (h * d_h features), not one head
        if layer.q_norm.weight.numel() != d_h:
            qk_norm_over = "projection"
    sinks = getattr(layer, "sinks", None)
    rope = rope_settings(config, layer_idx, d_h)
    T = config.max_position_embeddings if context_length is None else context_length
    w = q_w
    with torch.device("meta"):  # nothing drawn from the random generator, nothing allocated
        m = MultiHeadAttention(
        d, T, h, fused=fused, n_kv_heads=h_kv, position="rope", bias=biases or False,
        head_dim=d_h, scale=scale, score_mod=None if cap is None else softcap_mod(float(cap)),
        window=window, qk_norm=qk_norm, qk_norm_over=qk_norm_over, sinks=sinks is not None,
        causal_buffer=False, **rope)
    state = {"query.weight": q_w, "key.weight": k_w, "value.weight": v_w,
             "out.weight": o.weight}
    for name, b in zip(("query", "key", "value", "out"), (q_b, k_b, v_b, o.bias)):
        if b is not None:
            state[f"{name}.bias"] = b
    if qk_norm is not None:
        gemma = mt.startswith("gemma")  # Gemma's RMSNorm multiplies by 1 + weight
        state["q_norm.weight"] = layer.q_norm.weight + 1 if gemma else layer.q_norm.weight
        state["k_norm.weight"] = layer.k_norm.weight + 1 if gemma else layer.k_norm.weight
    if sinks is not None:
        state["sinks"] = sinks
    m.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True,
                      assign=True)
    m.mask = torch.zeros(0, 0, dtype=torch.bool)  # the placeholder, off the meta device
    return m.to(device=w.device, dtype=w.dtype).train(layer.training)


def _split_neox(qkv: torch.nn.Linear, h: int, d_h: int):
    """GPT-NeoX's fused ``query_key_value``: rows head by head, [q_h, k_h, v_h] per head."""
    W = qkv.weight.view(h, 3, d_h, -1)  # (h, 3, d_h, d)
    parts = [W[:, i].reshape(h * d_h, -1) for i in range(3)]
    if qkv.bias is None:
        return (*parts, None, None, None)
    b = qkv.bias.view(h, 3, d_h)
    return (*parts, *(b[:, i].reshape(-1) for i in range(3)))


def largest_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over every entry, as a float (0 for empty tensors)."""
    return float((a - b).abs().max()) if a.numel() else 0.0


__all__ = ["FAMILIES", "FIELDS", "from_transformers", "largest_difference", "rope_settings"]
