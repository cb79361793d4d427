"""The RoPE of current model configs (rope types, partial rotary), against transformers' own code.

transformers (a test-only dependency, pinned in requirements.txt) computes the frequencies in
float32 (``ROPE_INIT_FUNCTIONS``); the library computes them in float64, so frequencies agree
to float32 precision and the rotation itself (``apply_rotary_pos_emb``, fed the same float64
angles) to float64 precision.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import (
    apply_rotary_pos_emb as neox_apply,
)
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_apply
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply

from attnbook import MultiHeadAttention, TinyConfig, TinyModel
from attnbook.kv_cache import KVCache, cached_attention
from attnbook.positions import (
    ROPE_TYPES,
    apply_rope,
    check_scaling,
    rope_frequencies,
    rope_parameters,
)

F64 = torch.float64
LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
QWEN_YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
DEEPSEEK_YARN = {"rope_type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
                 "mscale": 0.707, "mscale_all_dim": 0.707,
                 "original_max_position_embeddings": 4096}

# (scaling, head_dim, partial_rotary_factor, rope_theta, seq_len) as real configs give them
CASES = [
    ({"rope_type": "default"}, 64, 1.0, 10000.0, None),
    ({"rope_type": "default"}, 64, 0.25, 10000.0, None),  # Pythia: rotary_pct 0.25
    ({"rope_type": "default"}, 80, 0.4, 10000.0, None),  # Phi-2: 32 of 80 features
    ({"rope_type": "linear", "factor": 4.0}, 128, 1.0, 10000.0, None),
    ({"rope_type": "linear", "factor": 2.0}, 64, 0.5, 10000.0, None),
    (LLAMA31, 128, 1.0, 500000.0, None),
    ({**LLAMA31, "factor": 32.0, "original_max_position_embeddings": 8192}, 64, 1.0,
     500000.0, None),  # Llama 3.2's factor
    (QWEN_YARN, 128, 1.0, 1e6, None),
    (DEEPSEEK_YARN, 64, 1.0, 10000.0, None),
    ({**QWEN_YARN, "attention_factor": 1.25, "truncate": False, "beta_fast": 16}, 64, 1.0,
     10000.0, None),
    ({**QWEN_YARN, "factor": 8.0}, 96, 0.5, 10000.0, None),
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}, 128,
     1.0, 10000.0, 1000),  # below L: the default frequencies
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}, 128,
     1.0, 10000.0, 2048),
    ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}, 128,
     1.0, 10000.0, 5000),
    ({"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 512}, 64,
     0.5, 10000.0, 3000),
]


def hf_config(scaling, head_dim, partial, base):
    """The config fields transformers' ROPE_INIT_FUNCTIONS read."""
    L = scaling.get("original_max_position_embeddings", 4096)
    hf_scaling = {k: v for k, v in scaling.items()
                  if not (k == "original_max_position_embeddings"
                          and scaling.get("rope_type") == "dynamic")}
    return SimpleNamespace(rope_theta=base, head_dim=head_dim, hidden_size=head_dim * 4,
                           num_attention_heads=4, partial_rotary_factor=partial,
                           max_position_embeddings=L, rope_scaling=hf_scaling)


def kind(scaling):
    return scaling.get("rope_type", scaling.get("type"))


@pytest.mark.parametrize("scaling, head_dim, partial, base, seq_len", CASES)
def test_frequencies_and_attention_factor_match_transformers(scaling, head_dim, partial, base,
                                                             seq_len):
    cfg = hf_config(scaling, head_dim, partial, base)
    inv_freq, hf_factor = ROPE_INIT_FUNCTIONS[kind(scaling)](cfg, "cpu", seq_len=seq_len)
    r = int(head_dim * partial)
    theta, factor = rope_parameters(r, base, scaling, seq_len=seq_len)
    assert theta.dtype == F64 and theta.shape == (r // 2,)
    torch.testing.assert_close(theta, inv_freq.to(F64), rtol=5e-6, atol=0)
    assert factor == pytest.approx(float(hf_factor), rel=1e-12)


def test_every_rope_type_is_covered_and_changes_something():
    assert {kind(c[0]) for c in CASES} == set(ROPE_TYPES)
    plain = rope_frequencies(128, 500000.0, F64)
    llama, _ = rope_parameters(128, 500000.0, LLAMA31)
    assert torch.equal(llama[:10], plain[:10])  # fast pairs: wavelength < 8192 / 4
    torch.testing.assert_close(llama[-10:], plain[-10:] / 8)  # slow pairs: beyond 8192
    yarn, f = rope_parameters(128, 1e6, QWEN_YARN)
    assert f == pytest.approx(0.1 * math.log(4) + 1)
    assert torch.equal(yarn[0], rope_frequencies(128, 1e6, F64)[0]) and yarn[-1] < plain[-1]
    dyn = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 100}
    below, _ = rope_parameters(64, 10000.0, dyn, seq_len=100)
    above, _ = rope_parameters(64, 10000.0, dyn, seq_len=400)
    assert torch.equal(below, rope_frequencies(64, 10000.0, F64))
    assert above[0] == 1.0 and (above[1:] < below[1:]).all()  # NTK: every pair but c = 0


def angles(theta, positions, factor):
    """cos, sin as transformers lays them out ((T, r) for the half layout), float64."""
    freqs = positions.to(F64)[:, None] * theta[None, :]  # (T, r/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (T, r)
    return emb.cos() * factor, emb.sin() * factor


@pytest.mark.parametrize("scaling, head_dim, partial, base, seq_len", CASES)
def test_rotation_matches_transformers_in_float64(scaling, head_dim, partial, base, seq_len):
    torch.manual_seed(0)
    B, h, T = 2, 3, 7
    r = int(head_dim * partial)
    pos = torch.tensor([0, 1, 2, 5, 100, 2047, (seq_len or 2048) - 1])
    q, k = torch.randn(2, B, h, T, head_dim, dtype=F64)
    theta, factor = rope_parameters(r, base, scaling, seq_len=int(pos.max()) + 1)
    cos, sin = angles(theta, pos, factor)
    # GPT-NeoX's function keeps features r.. as they are (partial rotary); for r = d_h it is
    # Llama's
    want_q, want_k = neox_apply(q, k, cos[None], sin[None])
    kw = {"scaling": scaling, "rotary_dim": r, "base": base}
    torch.testing.assert_close(apply_rope(q, pos, **kw), want_q, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(apply_rope(k, pos, **kw), want_k, rtol=1e-12, atol=1e-12)
    if r == head_dim:
        lq, _ = llama_apply(q, k, cos[None], sin[None])
        torch.testing.assert_close(apply_rope(q, pos, **kw), lq, rtol=1e-12, atol=1e-12)
    # GPT-J: interleaved pairs, tensors (B, T, h, d_h), the first rotary_dim features
    x = q.transpose(1, 2)  # (B, T, h, d_h)
    rot = gptj_apply(x[..., :r], (sin[:, : r // 2])[None].expand(B, -1, -1),
                     (cos[:, : r // 2])[None].expand(B, -1, -1))
    want = torch.cat([rot, x[..., r:]], dim=-1)
    got = apply_rope(x, pos, layout="interleaved", seq_dim=1, **kw)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scaling", [None, {"rope_type": "linear", "factor": 2.0}, LLAMA31,
                                     {"rope_type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 64},
                                     {"rope_type": "dynamic", "factor": 2.0,
                                      "original_max_position_embeddings": 64}])
def test_llama_rotary_module_end_to_end_float32(scaling):
    """transformers' LlamaRotaryEmbedding (float32 angles) and apply_rope on the same q."""
    if scaling is LLAMA31:
        scaling = {**LLAMA31, "original_max_position_embeddings": 64}
    L = 64 if scaling is None else scaling.get("original_max_position_embeddings", 64)
    hf_scaling = None if scaling is None else {
        k: v for k, v in scaling.items()
        if not (k == "original_max_position_embeddings" and kind(scaling) == "dynamic")}
    cfg = LlamaConfig(hidden_size=128, num_attention_heads=2, head_dim=64,
                      max_position_embeddings=L, rope_theta=10000.0, rope_scaling=hf_scaling)
    rope = LlamaRotaryEmbedding(cfg)
    torch.manual_seed(1)
    q = torch.randn(1, 2, 150, 64)
    pos = torch.arange(150)[None]  # past L = 64: dynamic scaling acts
    cos, sin = rope(q, pos)
    want, _ = llama_apply(q, q, cos, sin)
    got = apply_rope(q, pos, scaling=scaling)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_dynamic_ntk_cache_differs_from_full_forward_past_L_only():
    """kv_cache's docstring: each cached key keeps the rotation of the step that appended it.

    transformers' own decoding recomputes the frequencies at each step's length the same way.
    """
    dyn = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8}
    torch.manual_seed(2)
    m = MultiHeadAttention(8, 32, 2, position="rope", rope_scaling=dyn).double()
    x = torch.randn(1, 20, 8, dtype=F64)
    cache = KVCache.for_module(m, 1)
    steps = [cached_attention(m, x[:, t:t + 1], cache) for t in range(20)]
    got = torch.cat(steps, dim=1)
    full_8 = m(x[:, :8])
    torch.testing.assert_close(got[:, :8], full_8, rtol=1e-12, atol=1e-12)  # n <= L: agree
    full = m(x)
    assert (got[:, 8:] - full[:, 8:]).abs().amax() > 1e-3  # past L: the cache differs
    # transformers steps its frequencies by each call's max(position) + 1 too
    cfg = LlamaConfig(hidden_size=8, num_attention_heads=2, head_dim=4,
                      max_position_embeddings=8, rope_scaling={"rope_type": "dynamic",
                                                               "factor": 2.0})
    rope = LlamaRotaryEmbedding(cfg)
    k = torch.randn(1, 2, 1, 4)
    for p in (3, 8, 12, 19):
        cos, sin = rope(k, torch.tensor([[p]]))
        _, want = llama_apply(k, k, cos, sin)
        torch.testing.assert_close(apply_rope(k, torch.tensor([p]), scaling=dyn), want,
                                   rtol=1e-5, atol=1e-6)


STATIC = [{"rope_type": "linear", "factor": 2.0}, LLAMA31,
          {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
          ("ntk", 2.0), ("interpolation", 2.0)]


@pytest.mark.parametrize("scaling", STATIC)
@pytest.mark.parametrize("rotary_dim", [None, 2])
def test_static_types_and_partial_rotary_cache_and_fused_equal_full(scaling, rotary_dim):
    torch.manual_seed(3)
    m = MultiHeadAttention(16, 32, 2, n_kv_heads=1, position="rope", rope_scaling=scaling,
                           rotary_dim=rotary_dim).double()
    x = torch.randn(2, 13, 16, dtype=F64)
    full = m(x)
    cache = KVCache.for_module(m, 2)
    got = torch.cat([cached_attention(m, x[:, a:b], cache)
                     for a, b in ((0, 5), (5, 6), (6, 13))], dim=1)
    torch.testing.assert_close(got, full, rtol=1e-10, atol=1e-10)
    m.fused = True
    torch.testing.assert_close(m(x), full, rtol=1e-10, atol=1e-10)


def test_partial_rotary_leaves_the_rest_and_keeps_relative_scores():
    torch.manual_seed(4)
    x = torch.randn(3, 10, 8, dtype=F64)
    pos = torch.arange(10)
    out = apply_rope(x, pos, rotary_dim=4)
    assert torch.equal(out[..., 4:], x[..., 4:])  # the unrotated features pass unchanged
    torch.testing.assert_close(out[..., :4], apply_rope(x[..., :4], pos))
    assert torch.equal(apply_rope(x, pos, rotary_dim=8), apply_rope(x, pos))
    # scores depend on positions only through differences, whatever part is rotated
    s = apply_rope(x, pos, rotary_dim=4) @ apply_rope(x, pos, rotary_dim=4).mT
    s7 = apply_rope(x, pos + 7, rotary_dim=4) @ apply_rope(x, pos + 7, rotary_dim=4).mT
    torch.testing.assert_close(s, s7, rtol=1e-10, atol=1e-10)
    # the frequencies are those of r features: base ** (-2c / r), not of d_h
    one = torch.zeros(1, 2, 8, dtype=F64)
    one[..., 3] = 1.0  # half layout over r = 4: pair 1 is features (1, 3)
    turned = apply_rope(one, torch.tensor([0, 1]), rotary_dim=4)
    theta = rope_frequencies(4, dtype=F64)  # (2,): 1, 0.01 (d_h = 8 would give 0.1 for pair 1)
    torch.testing.assert_close(turned[0, 1, 1], -torch.sin(theta[1]))
    assert theta[1].item() == pytest.approx(0.01)


def test_tiny_model_with_partial_rotary_and_a_rope_type():
    cfg = TinyConfig(vocab_size=7, context_length=16, d_model=16, n_heads=2, position="rope",
                     rotary_dim=4, rope_scaling=LLAMA31)
    torch.manual_seed(5)
    model = TinyModel(cfg)
    ids = torch.randint(0, 7, (2, 9))
    logits = model(ids)
    assert logits.shape == (2, 9, 7) and torch.isfinite(logits).all()
    assert all(b.attn.rotary_dim == 4 for b in model.blocks)


# --- refusals ----------------------------------------------------------------------------------

def test_ambiguous_four_d_tensor_is_refused_and_seq_dim_resolves_it():
    torch.manual_seed(6)
    x = torch.randn(2, 5, 5, 8)  # (B, h, T, d_h) or (B, T, h, d_h)?
    pos = torch.arange(5)
    with pytest.raises(ValueError, match="ambiguous.*seq_dim=-2.*seq_dim=1"):
        apply_rope(x, pos)
    heads_first = apply_rope(x, pos, seq_dim=-2)
    tokens_first = apply_rope(x, pos, seq_dim=1)
    torch.testing.assert_close(tokens_first, apply_rope(x.transpose(1, 2), pos,
                                                        seq_dim=-2).transpose(1, 2))
    assert not torch.allclose(heads_first, tokens_first)
    # (B, T, h, d_h) with T != h: seq_dim=1 rotates along the tokens, positions (B, T) too
    y = torch.randn(2, 6, 3, 8)
    pb = torch.stack([torch.arange(6), torch.arange(6) + 4])
    got = apply_rope(y, pb, seq_dim=1)
    torch.testing.assert_close(got[1], apply_rope(y[1].transpose(0, 1), pb[1]).transpose(0, 1))


@pytest.mark.parametrize("bad", [-1, 3, 4, -5, 1.0, True, "1"])
def test_bad_seq_dim_is_refused(bad):
    with pytest.raises(ValueError, match="seq_dim must be an axis"):
        apply_rope(torch.randn(2, 3, 4, 8), torch.arange(4), seq_dim=bad)


@pytest.mark.parametrize("bad, match", [
    ({"rope_type": "longrope", "factor": 2.0}, "must be one of"),
    ({"rope_type": "dynamic", "factor": 2.0}, "original_max_position_embeddings"),
    ({"rope_type": "yarn", "factor": 2.0}, "missing"),
    ({"rope_type": "linear", "factr": 2.0}, "missing"),
    ({"rope_type": "linear", "factor": 2.0, "beta_fast": 32}, "unknown \\['beta_fast'\\]"),
    ({"rope_type": "linear", "factor": 0.5}, ">= 1"),
    ({"rope_type": "linear", "factor": float("nan")}, "positive finite"),
    ({**LLAMA31, "low_freq_factor": 4.0}, "low_freq_factor < high_freq_factor"),
    ({"rope_type": "linear", "type": "dynamic", "factor": 2.0}, "two types"),
    ({**QWEN_YARN, "truncate": 1}, "True or False"),
    (("yarn", 2.0), "rope_scaling dict"),
])
def test_bad_rope_scaling_is_refused_naming_what_is_expected(bad, match):
    with pytest.raises(ValueError, match=match):
        check_scaling(bad)
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(8, 16, 2, position="rope", rope_scaling=bad)
    with pytest.raises(ValueError, match=match):
        apply_rope(torch.randn(3, 4), torch.arange(3), scaling=bad)
