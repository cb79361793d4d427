"""The attention of real models in the book's module (issue 45), against the pinned transformers.

Tiny random-weight models are built from transformers config objects (no downloads), in float64
with eager attention. Each attention layer goes through :func:`attnbook.convert.from_transformers`
(``load_state_dict(strict=True)``), and its outputs are compared with the layer's own, captured by
a hook inside the transformers model, in five cases: causal prefill, a left-padded batch,
token-by-token decoding with ``KVCache`` against ``DynamicCache`` (after a left-padded prompt),
chunked prefill, and packed documents (position ids restarting per document).

transformers computes its RoPE angles (and Qwen3's and Gemma 3's QK-norm) in float32. As in
tests/test_rope_types.py, the rotary modules are given float64 angles from the frequencies
transformers chose (checked against attnbook's to float32 precision inside the patch), and the
two QK-norms compute in the input's dtype, so the comparison is a float64 one (about 1e-14).

The options themselves (biases, head_dim, scale, score_mod, window, QK-norm, sinks, no causal
buffer) are also checked against an independent float64 loop, with the KV cache, and their
defaults against the draws of the plain module.
"""

from __future__ import annotations

import copy
from types import MethodType

import pytest
import torch
from transformers import (
    DynamicCache,
    Gemma2Config,
    Gemma2Model,
    Gemma3TextConfig,
    Gemma3TextModel,
    GemmaConfig,
    GemmaModel,
    GPTNeoXConfig,
    GPTNeoXModel,
    GptOssConfig,
    GptOssModel,
    LlamaConfig,
    LlamaModel,
    MistralConfig,
    MistralModel,
    Olmo2Config,
    Olmo2Model,
    PhiConfig,
    PhiModel,
    Qwen2Config,
    Qwen2Model,
    Qwen3Config,
    Qwen3Model,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from attnbook import MultiHeadAttention
from attnbook.convert import from_transformers, rope_settings
from attnbook.kv_cache import KVCache, cached_attention
from attnbook.masks import document_mod, softcap_mod
from attnbook.positions import rope_parameters

F64 = torch.float64
TOL = 1e-12
SMALL = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
             intermediate_size=16, vocab_size=11, max_position_embeddings=64)

# family -> (model class, config)
FAMILIES = {
    "llama": (LlamaModel, LlamaConfig(**SMALL)),
    "llama-bias-llama3": (LlamaModel, LlamaConfig(**SMALL, attention_bias=True, rope_theta=500.0,
                                                  rope_scaling={
                                                      "rope_type": "llama3", "factor": 8.0,
                                                      "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8})),
    "llama-yarn": (LlamaModel, LlamaConfig(**SMALL, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8})),
    # a key transformers does not read for linear scaling is dropped, as transformers does
    "llama-linear": (LlamaModel, LlamaConfig(**SMALL, rope_scaling={
        "type": "linear", "factor": 2.0, "original_max_position_embeddings": 8})),
    # transformers reads max_position_embeddings (24) as dynamic's length, not the dict's 16
    "llama-dynamic": (LlamaModel, LlamaConfig(**{**SMALL, "max_position_embeddings": 6},
                                              rope_scaling={
                                                  "rope_type": "dynamic", "factor": 2.0,
                                                  "original_max_position_embeddings": 3})),
    "mistral": (MistralModel, MistralConfig(**SMALL, head_dim=6, sliding_window=3)),
    "qwen2": (Qwen2Model, Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=3,
                                      max_window_layers=1)),
    "qwen3": (Qwen3Model, Qwen3Config(**SMALL, head_dim=6, use_sliding_window=True,
                                      sliding_window=3, max_window_layers=1)),
    "gemma": (GemmaModel, GemmaConfig(**{**SMALL, "num_key_value_heads": 1}, head_dim=10)),
    "gemma2": (Gemma2Model, Gemma2Config(**SMALL, head_dim=10, query_pre_attn_scalar=7,
                                         attn_logit_softcapping=3.0, sliding_window=3,
                                         layer_types=["sliding_attention", "full_attention"])),
    "gemma3": (Gemma3TextModel, Gemma3TextConfig(
        **SMALL, head_dim=10, query_pre_attn_scalar=7, sliding_window=3, rope_local_base_freq=100.0,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        layer_types=["sliding_attention", "full_attention"])),
    "phi": (PhiModel, PhiConfig(**{k: v for k, v in SMALL.items()
                                   if k != "num_key_value_heads"},
                                partial_rotary_factor=0.5)),
    "gpt_neox": (GPTNeoXModel, GPTNeoXConfig(**{k: v for k, v in SMALL.items()
                                                if k != "num_key_value_heads"},
                                             rotary_pct=0.25, attention_bias=True)),
    # QK-norm over the whole projection (h * d_h and h_kv * d_h features), with biases
    "olmo2": (Olmo2Model, Olmo2Config(**SMALL, attention_bias=True)),
    # sinks, biases, yarn with truncate=False, a sliding layer
    "gpt_oss": (GptOssModel, GptOssConfig(**{**SMALL, "intermediate_size": 8}, head_dim=6,
                                          num_local_experts=2, num_experts_per_tok=1,
                                          sliding_window=3,
                                          layer_types=["sliding_attention", "full_attention"])),
}
# transformers 4.57.1's GptOssModel builds its masks without position_ids, so packed documents
# attend across documents there: the book's module is compared without the document mask.
NO_PACKING = {"gpt_oss"}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny float64 matrices: one thread is several times faster than two fighting over them."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def rms64(self, x):  # Qwen3's and Gemma 3's QK-norm without the float32 round trip
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon
                        if hasattr(self, "variance_epsilon") else
                        x.pow(2).mean(-1, keepdim=True) + self.eps)
    return x * ((1.0 + self.weight) if type(self).__name__.startswith("Gemma") else self.weight)


def rotary64(rot, head_dim):
    """Give a transformers rotary module float64 angles for the frequencies it chose."""
    forward = rot.forward

    def patched(self, x, position_ids):
        cos32, _ = forward(x, position_ids)  # updates dynamic's frequencies as transformers does
        r = 2 * self.inv_freq.numel()
        cfg = self.config
        settings = rope_settings(cfg, 0, head_dim) if cfg.model_type != "gemma3_text" else {
            "rope_base": cfg.rope_theta, "rope_scaling": None if cfg.rope_scaling.get(
                "rope_type") == "default" else {**cfg.rope_scaling}}
        theta, factor = rope_parameters(r, settings["rope_base"], settings["rope_scaling"],
                                        seq_len=int(self.max_seq_len_cached))
        torch.testing.assert_close(theta, self.inv_freq.to(F64), rtol=2e-6, atol=0)
        assert factor == pytest.approx(float(self.attention_scaling), rel=1e-6)
        freqs = position_ids.to(F64)[..., None] * theta  # (B, T, r/2)
        emb = freqs if cos32.size(-1) == r // 2 else torch.cat([freqs, freqs], dim=-1)  # gpt-oss
        return ((emb.cos() * float(self.attention_scaling)).to(x.dtype),
                (emb.sin() * float(self.attention_scaling)).to(x.dtype))

    rot.forward = MethodType(patched, rot)


def build(name):
    cls, config = FAMILIES[name]
    config = copy.deepcopy(config)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = cls(config).to(F64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    layers = model.layers
    head_dim = from_transformers(attn_of(layers[0]), config).d_head
    for rot in (getattr(model, "rotary_emb", None), getattr(model, "rotary_emb_local", None)):
        if rot is not None:
            rotary64(rot, head_dim)
    for layer in layers:
        a = attn_of(layer)
        for norm in (getattr(a, "q_norm", None), getattr(a, "k_norm", None)):
            if norm is not None:
                norm.forward = MethodType(rms64, norm)
    return model, config


def attn_of(layer):
    return layer.attention if hasattr(layer, "attention") else layer.self_attn


class Capture:
    """The input and output of every attention layer, per call of the model."""

    def __init__(self, model):
        self.calls = {i: [] for i in range(len(model.layers))}
        for i, layer in enumerate(model.layers):
            attn_of(layer).register_forward_hook(self.hook(i), with_kwargs=True)

    def hook(self, i):
        def record(module, args, kwargs, output):
            x = kwargs.get("hidden_states", args[0] if args else None)
            self.calls[i].append((x.detach(), output[0].detach()))
        return record


def ids_for(B, T, seed=1):
    return torch.randint(0, 11, (B, T), generator=torch.Generator().manual_seed(seed))


def positions_of(mask):
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def diff(a, b, rows=None):
    if rows is not None:
        a, b = a[rows], b[rows]
    return float((a - b).abs().max())


PAD = torch.tensor([[True] * 9, [False] * 3 + [True] * 6])


def run_cases(name):
    """The five cases for every layer of one family: the largest difference of each."""
    model, config = build(name)
    cap = Capture(model)
    mods = [from_transformers(attn_of(layer), config, i, context_length=16)
            for i, layer in enumerate(model.layers)]
    worst = {}
    with torch.no_grad():
        # 1. causal prefill
        model(ids_for(2, 9), use_cache=False)
        worst["prefill"] = max(diff(m(x), y) for m, ((x, y),) in zip(mods, cap.calls.values()))
        for m, ((x, y),) in zip(mods, cap.calls.values()):  # the fused path, where it exists
            m.fused = True
            worst["prefill"] = max(worst["prefill"], diff(m(x), y))
            m.fused = False
        # 2. a left-padded batch (real rows compared; transformers' padded queries see nothing)
        for c in cap.calls.values():
            c.clear()
        model(ids_for(2, 9), attention_mask=PAD.long(), position_ids=positions_of(PAD),
              use_cache=False)
        worst["left padding"] = max(diff(m(x, PAD), y, PAD)
                                    for m, ((x, y),) in zip(mods, cap.calls.values()))
        for m, ((x, y),) in zip(mods, cap.calls.values()):
            m.fused = True
            worst["left padding"] = max(worst["left padding"], diff(m(x, PAD), y, PAD))
            m.fused = False
        # 3. decoding token by token after a left-padded prompt of 5 (3 real in row 1)
        for c in cap.calls.values():
            c.clear()
        ids, cache = ids_for(2, 9, seed=2), DynamicCache()
        model(ids[:, :5], attention_mask=PAD[:, 4:].long(), position_ids=positions_of(PAD[:, 4:]),
              past_key_values=cache, use_cache=True)
        for t in range(5, 9):
            mask = torch.cat([PAD[:, 4:], torch.ones(2, t - 4, dtype=torch.bool)], 1)[:, :t - 4 + 5]
            model(ids[:, t:t + 1], attention_mask=mask.long(),
                  position_ids=positions_of(mask)[:, -1:], past_key_values=cache, use_cache=True)
        d = 0.0
        for m, calls in zip(mods, cap.calls.values()):
            kv = KVCache.for_module(m, 2)
            (x, y) = calls[0]
            d = max(d, diff(cached_attention(m, x, kv, PAD[:, 4:]), y, PAD[:, 4:]))
            for x, y in calls[1:]:
                d = max(d, diff(cached_attention(m, x, kv), y))
        worst["decode"] = d
        # 4. chunked prefill: 4 tokens, then 5 against the cache
        for c in cap.calls.values():
            c.clear()
        cache = DynamicCache()
        model(ids[:, :4], past_key_values=cache, use_cache=True)
        model(ids[:, 4:], past_key_values=cache, use_cache=True,
              position_ids=torch.arange(4, 9)[None].expand(2, -1))
        d = 0.0
        for m, calls in zip(mods, cap.calls.values()):
            kv = KVCache.for_module(m, 2)
            for x, y in calls:
                d = max(d, diff(cached_attention(m, x, kv), y))
        worst["chunked prefill"] = d
        # 5. packed documents: one row, position ids restart per document
        for c in cap.calls.values():
            c.clear()
        pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1]])
        doc = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2])
        model(ids_for(1, 9, seed=3), position_ids=pos, use_cache=False)  # no cache: packed
        docs = None if name in NO_PACKING else document_mod(doc)
        worst["packed documents"] = max(
            diff(m(x, positions=pos[0], mask_mod=docs), y)
            for m, ((x, y),) in zip(mods, cap.calls.values()))
    return worst, mods


@pytest.fixture
def softmax64(monkeypatch):
    """transformers' eager attention takes its softmax in float32 (``dtype=torch.float32``); for
    float64 scores it is taken in float64 instead, the only change to what the layer computes."""
    softmax = torch.nn.functional.softmax

    def keep64(x, dim=None, _stacklevel=3, dtype=None):
        if x.dtype == F64 and dtype == torch.float32:
            dtype = F64
        return softmax(x, dim=dim, dtype=dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", keep64)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_matches_transformers_in_five_cases(name, softmax64):
    worst, mods = run_cases(name)
    assert max(worst.values()) < TOL, worst
    if name in ("mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gpt_oss"):  # a window
        assert any(m.window == 3 for m in mods)
    assert all("mask" not in m.state_dict() for m in mods)  # no (T, T) buffer


# --- the options against an independent float64 loop --------------------------------------


def loop_reference(m, x, pad=None):
    """Each output as the definition: a loop over batch, head, query, key."""
    B, T, _ = x.shape
    h, h_kv, d_h = m.n_heads, m.n_kv_heads, m.d_head
    q = m.query(x).view(B, T, h, d_h)
    k = m.key(x).view(B, T, h_kv, d_h)
    v = m.value(x).view(B, T, h_kv, d_h)
    if m.q_norm is not None:
        def rms(t, w, eps):
            if m.qk_norm_over == "projection":  # over all heads' features at once
                return rms_all(t.flatten(-2), w, eps).view(t.shape)
            return rms_all(t, w, eps)

        def rms_all(t, w, eps):
            return t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * w
        q, k = rms(q, m.q_norm.weight, m.q_norm.eps), rms(k, m.k_norm.weight, m.k_norm.eps)
    out = torch.zeros(B, T, h, d_h, dtype=x.dtype)
    scale = m.scale if m.scale is not None else d_h ** -0.5
    for b in range(B):
        for hh in range(h):
            g = hh // (h // h_kv)
            for i in range(T):
                logits, vals = [], []
                for j in range(i + 1):
                    if (pad is not None and not pad[b, j]) or (m.window and i - j >= m.window):
                        continue
                    s = (q[b, i, hh] @ k[b, j, g]) * scale
                    if m.score_mod is not None:
                        s = m.score_mod(s, b, hh, i, j)
                    logits.append(s)
                    vals.append(v[b, j, g])
                den = sum(torch.exp(s) for s in logits)
                if m.sinks is not None:
                    den = den + torch.exp(m.sinks[hh])
                for s, val in zip(logits, vals):
                    out[b, i, hh] += torch.exp(s) / den * val
    return m.out(out.reshape(B, T, h * d_h))


OPTIONS = [
    dict(bias=True),
    dict(bias=("query", "key", "value")),
    dict(head_dim=6),
    dict(scale=0.3),
    dict(score_mod=softcap_mod(2.0)),
    dict(window=3),
    dict(qk_norm=1e-6),
    dict(qk_norm=1e-6, qk_norm_over="projection"),
    dict(sinks=True),
    dict(causal_buffer=False),
    dict(bias=("query", "out"), head_dim=6, scale=0.3, score_mod=softcap_mod(2.0), window=3,
         qk_norm=1e-6, sinks=True, causal_buffer=False),
]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "+".join(o))
def test_options_match_a_loop_forward_and_cache(options, fused):
    torch.manual_seed(0)
    m = MultiHeadAttention(12, 12, 4, fused=fused, n_kv_heads=2, **options).to(F64)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name in ("sinks",) or "norm" in name or name.endswith("bias"):
                p.normal_()
    x = torch.randn(2, 7, 12, dtype=F64)
    pad = torch.ones(2, 7, dtype=torch.bool)
    pad[1, :2] = False
    with torch.no_grad():
        for p in (None, pad):
            want = loop_reference(m, x, p)
            assert diff(m(x, p), want) < TOL
            cache = KVCache.for_module(m, 2)
            steps = [cached_attention(m, x[:, i:i + 1], cache,
                                      None if p is None else p[:, i:i + 1]) for i in range(7)]
            assert diff(torch.cat(steps, 1), want) < TOL
            cache = KVCache.for_module(m, 2)
            chunks = [cached_attention(m, x[:, a:b], cache, None if p is None else p[:, a:b])
                      for a, b in ((0, 4), (4, 7))]
            assert diff(torch.cat(chunks, 1), want) < TOL


def test_defaults_draw_what_the_plain_module_drew():
    """Every option off: the parameters are nn.Linear's draws in the order query, key, value,
    (key, value again for GQA), out, and the state_dict holds the causal buffer."""
    for h_kv in (None, 2):
        torch.manual_seed(3)
        m = MultiHeadAttention(16, 8, 4, n_kv_heads=h_kv)
        torch.manual_seed(3)
        lin = [torch.nn.Linear(16, 16, bias=False) for _ in range(3)]
        if h_kv:
            lin[1:3] = [torch.nn.Linear(16, 8, bias=False) for _ in range(2)]
        lin.append(torch.nn.Linear(16, 16, bias=False))
        assert sorted(m.state_dict()) == ["key.weight", "mask", "out.weight", "query.weight",
                                          "value.weight"]
        for name, ref in zip(("query", "key", "value", "out"), lin):
            assert torch.equal(getattr(m, name).weight, ref.weight)
        assert not m.real_options


@pytest.mark.parametrize("kwargs, match", [
    (dict(bias=("query", "q_proj")), "bias"),
    (dict(head_dim=0), "head_dim"),
    (dict(scale=-1.0), "scale"),
    (dict(window=0), "window"),
    (dict(qk_norm=True), "qk_norm"),
    (dict(qk_norm=1e-6, qk_norm_over="heads"), "qk_norm_over"),
    (dict(sinks=1), "sinks"),
])
def test_option_refusals_name_the_option(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(16, 8, 4, **kwargs)


# --- the converter: transformers 5's format, dynamic's length, refusals ---------------------


def test_transformers5_rope_parameters_give_the_same_module():
    _, config = FAMILIES["llama-yarn"]
    v5 = copy.deepcopy(config)
    v5.rope_parameters = {**config.rope_scaling, "rope_theta": config.rope_theta}
    v5.rope_scaling, v5.rope_theta = None, None
    assert rope_settings(v5, 0, 8) == rope_settings(config, 0, 8)
    g = copy.deepcopy(FAMILIES["gemma3"][1])  # one dict per layer type
    g.rope_parameters = {"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                         "full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 10000.0}}
    assert rope_settings(g, 0, 10) == {"rope_base": 100.0, "rope_scaling": None,
                                       "rotary_dim": None}
    assert rope_settings(g, 1, 10)["rope_scaling"] == {"rope_type": "linear", "factor": 2.0}
    p = copy.deepcopy(FAMILIES["phi"][1])
    p.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25}
    assert rope_settings(p, 0, 8)["rotary_dim"] == 2


def test_dynamic_length_is_max_position_embeddings_as_transformers_reads_it():
    config = LlamaConfig(**{**SMALL, "max_position_embeddings": 24}, rope_scaling={
        "rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16})
    s = rope_settings(config, 0, 8)["rope_scaling"]
    assert s["original_max_position_embeddings"] == 24
    assert s == {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 24}
    for n in (16, 24, 40):
        want, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=n)
        got, _ = rope_parameters(8, config.rope_theta, s, seq_len=n)
        torch.testing.assert_close(got, want.to(F64), rtol=2e-6, atol=0)


@pytest.mark.parametrize("name, change, field", [
    ("phi", {"qk_layernorm": True}, "qk_layernorm"),
    ("llama", {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 4,
                                "long_factor": [1.0] * 4}}, "rope_scaling"),
    ("llama", {"model_type": "bert"}, "model_type"),
    ("gemma3", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("qwen2", {"layer_types": ["chunked_attention"] * 2}, "layer_types"),
    ("phi", {"partial_rotary_factor": 0.4}, "partial_rotary_factor"),  # 3 of 8 features
    ("llama", {"attention_dropout": 0.1}, "attention_dropout"),  # in training mode
])
def test_converter_refuses_naming_the_field(name, change, field):
    cls, config = FAMILIES[name]
    config = copy.deepcopy(config)
    torch.manual_seed(0)
    model = cls(config)  # built before the change: the layer as transformers makes it
    for k, v in change.items():
        setattr(config, k, v)
    layer = attn_of(model.layers[0])
    if field == "use_bidirectional_attention":
        layer.is_causal = False
    with pytest.raises(ValueError, match=field):
        from_transformers(layer, config)


def test_converter_draws_nothing_and_keeps_the_layer_dtype():
    cls, config = FAMILIES["qwen3"]
    model = cls(copy.deepcopy(config))
    torch.manual_seed(5)
    before = torch.rand(2)
    torch.manual_seed(5)
    m = from_transformers(model.layers[0].self_attn, config)
    assert torch.equal(torch.rand(2), before)
    assert m.query.weight.dtype == torch.float32 and m.mask.numel() == 0


def test_tiny_model_takes_the_options_and_its_cache_equals_the_full_forward():
    from attnbook import TinyConfig, TinyModel
    torch.manual_seed(0)
    plain = TinyModel(TinyConfig(vocab_size=11, context_length=12, position="rope"))
    torch.manual_seed(0)
    same = TinyModel(TinyConfig(vocab_size=11, context_length=12, position="rope", attention={}))
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(),
                                                 same.state_dict().values()))
    cfg = TinyConfig(vocab_size=11, context_length=12, position="rope", d_model=16, n_heads=4,
                     n_kv_heads=2, attention=dict(bias=True, head_dim=6, scale=0.3, sinks=True,
                                                  score_mod=softcap_mod(5.0), window=4,
                                                  qk_norm=1e-6, causal_buffer=False))
    model = TinyModel(cfg).to(F64).eval()
    idx = ids_for(2, 12)
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches(2)
        assert caches[0].window == 4  # the module's window sizes the ring
        steps = [model.step(idx[:, :5], caches)]
        steps += [model.step(idx[:, t:t + 1], caches) for t in range(5, 12)]
    assert diff(torch.cat(steps, 1), full) < TOL
    with pytest.raises(ValueError, match="unknown"):
        TinyConfig(vocab_size=11, context_length=12, attention={"q_bias": True})
    # OLMo 2's norm over the whole projection is an option of the tiny model too
    olmo = TinyModel(TinyConfig(vocab_size=11, context_length=12, position="rope", d_model=16,
                                n_heads=4, attention=dict(qk_norm=1e-6,
                                                          qk_norm_over="projection"))).to(F64).eval()
    with torch.no_grad():
        caches = olmo.new_caches(2)
        steps = [olmo.step(idx[:, t:t + 1], caches) for t in range(12)]
        assert diff(torch.cat(steps, 1), olmo(idx)) < TOL


def test_window_and_scale_keep_the_fused_path():
    """With fused=True a window or a scale still runs SDPA (no (T, T) weights are formed);
    a score_mod or sinks take the explicit steps."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 4, 6, 8)
    for options, fused_path in ((dict(window=3), True), (dict(scale=0.2), True),
                                (dict(score_mod=softcap_mod(2.0)), False),
                                (dict(sinks=True), False)):
        m = MultiHeadAttention(32, 8, 4, fused=True, **options)
        _, weights = m.attend(q, k, v)
        assert (weights is None) == fused_path, options


def test_gemma3_with_vision_converts_through_its_text_config():
    from types import SimpleNamespace
    cls, text = FAMILIES["gemma3"]
    model = cls(copy.deepcopy(text)).eval()
    outer = SimpleNamespace(model_type="gemma3", text_config=text)
    a, b = (from_transformers(model.layers[1].self_attn, c) for c in (outer, text))
    assert a.extra_repr() == b.extra_repr() and a.rope_scaling == b.rope_scaling


def test_olmo2_qk_norm_spans_the_projection():
    """OLMo 2's RMSNorm weights are h * d_h and h_kv * d_h wide: the converter asks for
    qk_norm_over="projection", and one head's q then depends on the other heads' features."""
    model, config = build("olmo2")
    m = from_transformers(attn_of(model.layers[0]), config)
    assert m.qk_norm_over == "projection"
    assert m.q_norm.weight.shape == (4 * 8,) and m.k_norm.weight.shape == (2 * 8,)
    per_head = from_transformers(attn_of(build("qwen3")[0].layers[0]), FAMILIES["qwen3"][1])
    assert per_head.qk_norm_over == "head"
    q = torch.randn(1, 4, 3, 8, dtype=F64)
    q2 = q.clone()
    q2[:, 1] *= 3.0  # another head's features change
    with torch.no_grad():
        assert diff(m.norm_qk(q, q[:, :2])[0][:, 0], m.norm_qk(q2, q2[:, :2])[0][:, 0]) > 1e-3


def test_dynamic_hint_says_what_transformers_reads():
    """transformers 4.57 takes dynamic's L from max_position_embeddings and never reads the
    dict's original_max_position_embeddings: changing the key changes nothing there, changing
    max_position_embeddings does. The refusal's hint says so; yarn's and llama3's say theirs."""
    def freqs(mpe, original):
        c = LlamaConfig(**{**SMALL, "max_position_embeddings": mpe}, rope_scaling={
            "rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": original})
        return ROPE_INIT_FUNCTIONS["dynamic"](c, "cpu", seq_len=40)[0]

    assert torch.equal(freqs(24, 16), freqs(24, 3))
    assert not torch.equal(freqs(24, 16), freqs(30, 16))
    with pytest.raises(ValueError, match="never read this key for dynamic scaling: their L is "
                                         "the model config's max_position_embeddings"):
        MultiHeadAttention(8, 16, 2, position="rope",
                           rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    with pytest.raises(ValueError, match="when the dict lacks it, takes the model config's"):
        MultiHeadAttention(8, 16, 2, position="rope",
                           rope_scaling={"rope_type": "yarn", "factor": 2.0})
    with pytest.raises(ValueError, match="requires it in the dict too"):
        MultiHeadAttention(8, 16, 2, position="rope", rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0})


def test_chapter_table_names_every_field_the_converter_reads():
    """Ch. 22's table of config fields and the converter cannot drift apart."""
    from pathlib import Path

    from attnbook.convert import FIELDS

    page = (Path(__file__).resolve().parents[1] / "book" / "22_real_models.md").read_text()
    table = page[page.index("| config field |"):page.index("The same table heads")]
    assert [f for f in FIELDS if f"`{f}`" not in table] == []
