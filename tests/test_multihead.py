"""MultiHeadAttention: built on Attention, equal to the seed for one head, equal to PyTorch's."""

from __future__ import annotations

import pytest
import torch
from conftest import random_padding
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook import Attention
from attnbook.multihead import (
    MultiHeadAttention,
    multihead_sdpa,
    to_torch_multihead,
    torch_multihead_forward,
)
from attnbook.seed import Attention as SeedAttention

TOL = {"rtol": 1e-10, "atol": 1e-10}


def one_head_like(module: torch.nn.Module, d: int, T: int) -> MultiHeadAttention:
    """A one-head MultiHeadAttention with ``module``'s weights and an identity output projection."""
    m = MultiHeadAttention(d, T, n_heads=1).double()
    missing, unexpected = m.load_state_dict(module.state_dict(), strict=False)
    assert missing == ["out.weight"] and unexpected == []
    with torch.no_grad():
        m.out.weight.copy_(torch.eye(d, dtype=torch.float64))
    return m


@pytest.mark.parametrize("seed", range(5))
def test_one_head_with_identity_output_is_the_seed(seed):
    torch.manual_seed(seed)
    B, T, d = 3, 10, 8
    seed_module = SeedAttention(d, T).double()
    m = one_head_like(seed_module, d, T)
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, "right")
    # The seed's torch.softmax and our masked_softmax round differently in the last bit.
    torch.testing.assert_close(m(x), seed_module(x), rtol=0, atol=1e-15)
    torch.testing.assert_close(m(x, pad)[pad], seed_module(x, pad)[pad], rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_head_with_identity_output_is_bit_for_bit_the_single_head_module(dtype):
    B, T, d = 2, 7, 6
    single = Attention(d, T).to(dtype)
    m = one_head_like(single, d, T).to(dtype)
    x = torch.randn(B, T, d, dtype=dtype)
    pad = random_padding(B, T, "left")
    assert torch.equal(m(x), single(x))
    assert torch.equal(m(x, pad), single(x, pad))


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 10), d_head=st.integers(1, 5),
       h=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_matches_nn_multihead_attention(B, T, d_head, h, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    m = MultiHeadAttention(h * d_head, 12, h).double()
    x = torch.randn(B, T, h * d_head, dtype=torch.float64, generator=g)
    torch.testing.assert_close(m(x), torch_multihead_forward(m, x), **TOL)
    pad = random_padding(B, T, "right", generator=g)
    # Padded queries' rows are ignored by every consumer; compare the real ones.
    torch.testing.assert_close(m(x, pad)[pad], torch_multihead_forward(m, x, pad)[pad], **TOL)


def test_nn_multihead_attention_weights_match_ours():
    B, T, d, h = 2, 6, 8, 4
    m = MultiHeadAttention(d, T, h).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    _, ours = m(x, return_weights=True)
    _, theirs = to_torch_multihead(m)(x, x, x, attn_mask=m.mask[:T, :T], need_weights=True,
                                      average_attn_weights=False)
    torch.testing.assert_close(ours, theirs, **TOL)


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 10), d_head=st.integers(1, 5),
       h=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_matches_sdpa_on_4d_input(B, T, d_head, h, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    m = MultiHeadAttention(h * d_head, 12, h).double()
    x = torch.randn(B, T, h * d_head, dtype=torch.float64, generator=g)
    torch.testing.assert_close(m(x), multihead_sdpa(m, x), **TOL)
    pad = random_padding(B, T, "right", generator=g)
    torch.testing.assert_close(m(x, pad)[pad], multihead_sdpa(m, x, pad)[pad], **TOL)


def test_each_head_is_single_head_attention_on_its_slice():
    B, T, d, h = 2, 5, 12, 3
    m = MultiHeadAttention(d, T, h).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    _, weights = m(x, return_weights=True)  # (B, h, T, T)
    q, k, v = m.query(x), m.key(x), m.value(x)
    single = Attention(m.d_head, T).double()
    heads = []
    for i in range(h):
        cut = slice(i * m.d_head, (i + 1) * m.d_head)  # head i owns features cut
        out_i, w_i = single.attend(q[..., cut], k[..., cut], v[..., cut])  # scaled by sqrt(d_h)
        torch.testing.assert_close(weights[:, i], w_i, **TOL)
        heads.append(out_i)
    torch.testing.assert_close(m(x), m.out(torch.cat(heads, dim=-1)), **TOL)


def test_split_and_merge_heads():
    m = MultiHeadAttention(6, 4, n_heads=3)
    x = torch.arange(2 * 4 * 6, dtype=torch.float32).view(2, 4, 6)
    split = m.split_heads(x)
    assert split.shape == (2, 3, 4, 2)
    assert torch.equal(split[:, 1], x[..., 2:4])  # head 1 gets features 2 and 3
    assert torch.equal(m.merge_heads(split), x)


@pytest.mark.parametrize("d,h", [(8, 3), (6, 4), (5, 0), (4, -1)])
def test_heads_must_divide_d_model(d, h):
    with pytest.raises(ValueError, match="must be a positive divisor of d_model"):
        MultiHeadAttention(d, 4, h)


def test_error_message_suggests_valid_head_counts():
    with pytest.raises(ValueError, match=r"\[1, 2, 3, 6\]"):
        MultiHeadAttention(6, 4, 4)


@pytest.mark.parametrize("d,h", [(8, 1), (8, 2), (16, 4), (12, 12)])
def test_parameter_count_is_4_d_squared(d, h):
    m = MultiHeadAttention(d, 5, h)
    assert sum(p.numel() for p in m.parameters()) == 4 * d * d


def test_causal_and_padding_safe():
    B, T, d, h = 2, 7, 8, 2
    m = MultiHeadAttention(d, T, h)
    x = torch.randn(B, T, d)
    y, w = m(x, return_weights=True)
    assert w.shape == (B, h, T, T)
    assert torch.allclose(w.sum(-1), torch.ones(B, h, T))
    assert (w.triu(diagonal=1) == 0).all()
    x2 = x.clone()
    x2[:, 4:] = torch.randn(B, T - 4, d)  # change the future of token 3
    torch.testing.assert_close(m(x2)[:, :4], y[:, :4])
    pad = random_padding(B, T, "left")
    pad[0, :3] = False  # queries 0..2 of sequence 0 see only padding
    x.requires_grad_(True)
    out = m(x, pad)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


def test_checks_its_input():
    m = MultiHeadAttention(8, 4, 2)
    with pytest.raises(ValueError, match="context_length"):
        m(torch.randn(1, 5, 8))
    with pytest.raises(ValueError, match="d_model=8"):
        m(torch.randn(1, 3, 6))


def test_fused_multihead_equals_explicit_and_still_returns_weights():
    torch.manual_seed(0)
    explicit = MultiHeadAttention(16, 12, n_heads=4).double()
    fused = MultiHeadAttention(16, 12, n_heads=4, fused=True).double()
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(3, 12, 16, dtype=torch.float64)
    pad = torch.arange(12)[None, :] >= torch.tensor([0, 4, 9])[:, None]  # left padding
    torch.testing.assert_close(fused(x, pad), explicit(x, pad))
    out, w = fused(x, pad, return_weights=True)
    assert w is not None and w.shape == (3, 4, 12, 12)
    torch.testing.assert_close(out, explicit(x, pad))
