"""RoPE and ALiBi inside Attention and MultiHeadAttention: every path agrees with the definition."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnbook import AttentionLayer, MultiHeadAttention
from attnbook.fused import fused_attention
from attnbook.positions import alibi_slopes, apply_rope
from attnbook.scores import attention_scores, scale_scores
from attnbook.seed import Attention as SeedAttention
from attnbook.softmax import masked_softmax
from attnbook.weighted_sum import weighted_sum

F64 = torch.float64


def reference(m, x, padding_mask=None, positions=None):
    """The definition, written out in float64: project, rotate or bias, mask, softmax, mix."""
    B, T, d = x.shape
    h = m.n_heads
    hk = m.n_kv_heads
    d_h = d // h
    q = (x @ m.query.weight.T).view(B, T, h, d_h).transpose(1, 2)  # (B, h, T, d_h)
    k = (x @ m.key.weight.T).view(B, T, hk, d_h).transpose(1, 2)
    v = (x @ m.value.weight.T).view(B, T, hk, d_h).transpose(1, 2)
    k, v = k.repeat_interleave(h // hk, 1), v.repeat_interleave(h // hk, 1)
    pos = torch.arange(T).expand(B, T) if positions is None else positions.expand(B, T)
    if m.position == "rope":
        q = torch.stack([apply_rope(q[b], pos[b], m.rope_base, m.rope_layout) for b in range(B)])
        k = torch.stack([apply_rope(k[b], pos[b], m.rope_base, m.rope_layout) for b in range(B)])
    s = q @ k.transpose(-1, -2) / math.sqrt(d_h)  # (B, h, T, T)
    if m.position == "alibi":
        rel = (pos[:, :, None] - pos[:, None, :]).to(F64)  # (B, T, T)
        s = s - alibi_slopes(h, F64)[None, :, None, None] * rel[:, None]
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)
    if padding_mask is not None:
        blocked = blocked | ~padding_mask[:, None, None, :]
    s = s.masked_fill(blocked, -math.inf)
    w = torch.softmax(s, -1).nan_to_num(0.0)  # empty rows: zeros
    out = (w @ v).transpose(1, 2).reshape(B, T, d)
    return out @ m.out.weight.T if isinstance(m, MultiHeadAttention) else out


def make(kind, position, fused=False, **kw):
    torch.manual_seed(0)
    if kind == "single":
        return AttentionLayer(16, 12, fused=fused, position=position, **kw).double()
    if kind == "gqa":
        return MultiHeadAttention(16, 12, 4, fused=fused, n_kv_heads=2, position=position,
                                  **kw).double()
    return MultiHeadAttention(16, 12, 4, fused=fused, position=position, **kw).double()


LEFT_PAD = torch.tensor([[False, False, True, True, True, True, True, True, True],
                         [True] * 9, [False] * 9])


@pytest.mark.parametrize("kind", ["single", "multi", "gqa"])
@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_every_path_equals_the_definition(kind, position, fused, padded):
    m = make(kind, position, fused)
    x = torch.randn(3, 9, 16, dtype=F64)
    pm = LEFT_PAD if padded else None
    out = m(x, pm)
    # default positions skip the pads: cumsum(padding_mask) - 1 (clamped at 0)
    pos = None if pm is None else (pm.long().cumsum(-1) - 1).clamp(min=0)
    torch.testing.assert_close(out, reference(m, x, pm, pos), rtol=1e-10, atol=1e-10)
    if padded:
        assert (out[2] == 0).all()  # a row of pads sees no real key: zeros


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_fused_and_explicit_agree_in_float32_with_gradients(position):
    m = make("multi", position).float()
    x = torch.randn(3, 9, 16, requires_grad=True)
    outs, grads = [], []
    for fused in (False, True):
        m.fused = fused
        out = m(x, LEFT_PAD)
        (g,) = torch.autograd.grad(out.square().sum(), x)
        outs.append(out)
        grads.append(g)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-4)
    assert torch.isfinite(grads[1]).all()


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_shifting_all_positions_changes_nothing(position):
    m = make("multi", position)
    x = torch.randn(2, 9, 16, dtype=F64)
    base = m(x)
    torch.testing.assert_close(m(x, positions=torch.arange(9) + 1000), base, rtol=1e-9,
                               atol=1e-9)
    other = m(x, positions=torch.arange(9) * 3)  # distances change: the output does
    assert not torch.allclose(other, base)


def test_positions_per_sequence():
    m = make("multi", "rope")
    x = torch.randn(2, 9, 16, dtype=F64)
    pos = torch.stack([torch.arange(9), torch.arange(9) * 2])
    out = m(x, positions=pos)
    torch.testing.assert_close(out[1:], m(x[1:], positions=pos[1]))
    torch.testing.assert_close(out, reference(m, x, None, pos), rtol=1e-10, atol=1e-10)


def test_rope_changes_the_output_and_none_is_the_seed():
    torch.manual_seed(0)
    original = SeedAttention(8, 6)
    ours = AttentionLayer(8, 6)
    assert ours.position == "none"
    ours.load_state_dict(original.state_dict())
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(ours(x), original(x), rtol=1e-6, atol=1e-6)  # as the original's test
    # bit for bit the original module's steps as the library wrote them before positions existed
    q, k, v = ours.query(x), ours.key(x), ours.value(x)
    w = masked_softmax(scale_scores(attention_scores(q, k), 8), ours.mask[:6, :6])
    assert torch.equal(ours(x), weighted_sum(w, v))
    for position in ("rope", "alibi"):
        m = AttentionLayer(8, 6, position=position)
        assert m.state_dict().keys() == original.state_dict().keys()  # no new parameter or buffer
        m.load_state_dict(original.state_dict())
        assert not torch.allclose(m(x), original(x))
    mha = MultiHeadAttention(8, 6, 2)
    assert MultiHeadAttention(8, 6, 2, position="alibi").state_dict().keys() == \
        mha.state_dict().keys()


def test_one_head_alibi_uses_the_one_head_slope():
    m = AttentionLayer(4, 5, position="alibi").double()
    x = torch.randn(1, 5, 4, dtype=F64)
    _, w = m(x, return_weights=True)
    q, k = m.query(x), m.key(x)
    s = q @ k.transpose(-1, -2) / 2.0 - (2 ** -8) * (torch.arange(5)[:, None]
                                                     - torch.arange(5)[None, :]).to(F64)
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(w, torch.softmax(s, -1))


def test_rope_scaling_is_an_attribute():
    m = make("multi", "rope")
    x = torch.randn(1, 8, 16, dtype=F64)
    m.rope_scaling = ("interpolation", 2)
    scaled = m(x, positions=torch.arange(8) * 2)
    m.rope_scaling = None
    torch.testing.assert_close(scaled, m(x))


def test_the_cpu_kernel_for_a_float_bias_is_flash():
    """With ALiBi as a float attn_mask and is_causal=True, CPU SDPA still picks its flash
    kernel (SDPBackend.FLASH_ATTENTION = 1), not the math kernel (0), for 4-D input."""
    from torch.nn.attention import SDPBackend
    q = torch.randn(2, 4, 64, 16)
    bias = torch.randn(1, 4, 64, 64)
    choice = torch._fused_sdp_choice(q, q, q, bias, 0.0, True)
    assert choice == int(SDPBackend.FLASH_ATTENTION)
    with torch.profiler.profile() as prof:
        F.scaled_dot_product_attention(q, q, q, attn_mask=bias, is_causal=True)
    names = {e.key for e in prof.key_averages()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
    assert "aten::_scaled_dot_product_attention_math" not in names


def test_fused_attention_bias_one_head_shapes():
    q, k, v = (torch.randn(2, 7, 8, dtype=F64) for _ in range(3))
    bias = torch.randn(2, 7, 7, dtype=F64)  # (B, T, T) for one head
    s = q @ k.transpose(-1, -2) / math.sqrt(8) + bias
    s = s.masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(fused_attention(q, k, v, bias=bias), torch.softmax(s, -1) @ v)


def test_bad_position_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="added to the token vectors.*TinyConfig"):
        AttentionLayer(8, 4, position="learned")
    with pytest.raises(ValueError, match="'none', 'rope' or 'alibi'"):
        MultiHeadAttention(8, 4, 2, position="rotary")
    with pytest.raises(ValueError, match="head width must be even.*d_head = 3"):
        MultiHeadAttention(6, 4, 2, position="rope")
    with pytest.raises(ValueError, match="rope_layout"):
        AttentionLayer(8, 4, position="rope", rope_layout="gptj")
    with pytest.raises(ValueError, match="scaling must be None"):
        AttentionLayer(8, 4, position="rope", rope_scaling=("yarn", 2))
    m = AttentionLayer(8, 4, position="rope")
    with pytest.raises(TypeError, match="positions must be integers"):
        m(torch.randn(1, 4, 8), positions=torch.arange(4.0))
    with pytest.raises(ValueError, match="T = 4"):
        m(torch.randn(1, 4, 8), positions=torch.arange(3))


def test_tiled_attention_with_the_alibi_score_mod_equals_the_module():
    """The tiled path (chapter 10/21) takes ALiBi as a score_mod: forward and gradients."""
    from attnbook.online import tiled_attention
    from attnbook.positions import alibi_score_mod

    m = make("multi", "alibi")
    x = torch.randn(2, 9, 16, dtype=F64, requires_grad=True)
    q, k, v = m.project_heads(x)
    tiled = tiled_attention(q, k, v, LEFT_PAD[:2], block_size=4,
                            score_mod=alibi_score_mod(alibi_slopes(4, F64)))
    explicit = m.attend(q, k, v, LEFT_PAD[:2], bias=m.with_positions(q, k)[2])[0]
    torch.testing.assert_close(tiled, explicit, rtol=1e-10, atol=1e-10)
    g1, = torch.autograd.grad(tiled.square().sum(), x, retain_graph=True)
    g2, = torch.autograd.grad(explicit.square().sum(), x)
    torch.testing.assert_close(g1, g2, rtol=1e-9, atol=1e-9)
