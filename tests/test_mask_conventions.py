"""The mask cheat sheet, tested: every conversion gives the same outputs in SDPA and MHA as ours.

The appendix book/mask_conventions.md shows several of these tests as its snippets.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import random_padding
from torch import nn

from attnbook import (
    Attention,
    attention_scores,
    blocked_positions,
    causal_mask,
    masked_softmax,
    scale_scores,
    weighted_sum,
)
from attnbook.masks import (
    from_additive_mask,
    from_key_padding_mask,
    from_sdpa_mask,
    to_additive_mask,
    to_key_padding_mask,
    to_mha_attn_mask,
    to_sdpa_key_mask,
    to_sdpa_mask,
)

B, T, d = 3, 6, 4
TOL = {"rtol": 1e-10, "atol": 1e-10}


def qkv(B=B, T=T, d=d, h=None):
    """Random float64 queries, keys and values, (B, T, d) or (B, h, T, d)."""
    shape = (B, T, d) if h is None else (B, h, T, d)
    return tuple(torch.randn(shape, dtype=torch.float64) for _ in range(3))


def ours(q, k, v, blocked):
    """Our steps 2-6 with any True = blocked mask (`Attention.attend` without its buffer)."""
    scores = scale_scores(attention_scores(q, k), q.size(-1))  # (..., T, T)
    return weighted_sum(masked_softmax(scores, blocked), v)


def mha_copy_of(m: Attention, num_heads: int = 1) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention computing what `m` computes (for num_heads=1)."""
    mha = nn.MultiheadAttention(m.d_model, num_heads, bias=False, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([m.query.weight, m.key.weight, m.value.weight]))
        mha.out_proj.weight.copy_(torch.eye(m.d_model, dtype=mha.out_proj.weight.dtype))
    return mha


# --- ours <-> SDPA ---------------------------------------------------------------------------


def test_sdpa_bool_mask_and_is_causal():
    q, k, v = qkv()
    allowed = to_sdpa_mask(causal_mask(T))  # SDPA: True = may attend
    by_mask = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    by_flag = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(by_mask, by_flag, **TOL)
    torch.testing.assert_close(by_mask, ours(q, k, v, causal_mask(T)), **TOL)
    with pytest.raises(RuntimeError, match="is_causal"):  # 3-D input, the math kernel: not both
        F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=True)
    # (4-D float input on the CPU flash kernel accepts both and applies both masks:
    # tests/test_claims_ch08.py, test_is_causal_with_attn_mask_on_the_cpu_flash_kernel_applies_both)


def test_passing_our_blocked_mask_to_sdpa_is_wrong():
    q, k, v = qkv()
    wrong = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(T))
    assert not torch.allclose(wrong[:, 1:], ours(q, k, v, causal_mask(T))[:, 1:])
    # ... it attends to the future only: the last query sees nothing at all.
    torch.testing.assert_close(wrong, ours(q, k, v, ~causal_mask(T)), **TOL)


@pytest.mark.parametrize("side", ["right", "left"])
def test_sdpa_causal_and_padding(side):
    q, k, v = qkv()
    pad = random_padding(B, T, side)
    blocked = blocked_positions(causal_mask(T), pad)  # (B, T, T)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=to_sdpa_mask(blocked))
    got = ours(q, k, v, blocked)
    # A query that sees only padding has an empty row; PyTorch versions and backends
    # disagree on what it gets (NaN or 0), so compare the real queries' rows.
    torch.testing.assert_close(got[pad], ref[pad], **TOL)


def test_sdpa_key_mask_is_padding_mask_unflipped():
    q, k, v = qkv()
    pad = random_padding(B, T, "right")
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=to_sdpa_key_mask(pad))
    torch.testing.assert_close(ours(q, k, v, ~pad[:, None, :]), ref, **TOL)


def test_sdpa_key_mask_with_heads():
    h = 2
    q, k, v = qkv(h=h)
    pad = random_padding(B, T, "right")
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=to_sdpa_key_mask(pad)[:, None])
    torch.testing.assert_close(ours(q, k, v, ~pad[:, None, None, :]), ref, **TOL)


def test_additive_mask_in_sdpa():
    q, k, v = qkv()
    pad = random_padding(B, T, "right")
    blocked = blocked_positions(causal_mask(T), pad)
    additive = to_additive_mask(blocked, dtype=q.dtype)  # 0 = keep, -inf = blocked
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    torch.testing.assert_close(ours(q, k, v, blocked)[pad], ref[pad], **TOL)


@pytest.mark.parametrize("api", ["sdpa", "mha"])
def test_float_mask_is_added_to_the_scores(api):
    """Any float attn_mask is a bias added to the scaled scores, not only 0 and -inf."""
    q, k, v = qkv()
    bias = torch.randn(T, T, dtype=torch.float64)
    by_hand = torch.softmax(q @ k.transpose(-2, -1) / d**0.5 + bias, dim=-1) @ v
    if api == "sdpa":
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    else:
        m = Attention(d, T).double()
        x = torch.randn(B, T, d, dtype=torch.float64)
        key_bias = torch.randn(B, T, dtype=torch.float64)  # a float key_padding_mask: added too
        got, _ = mha_copy_of(m)(x, x, x, attn_mask=bias, key_padding_mask=key_bias,
                                need_weights=False)
        q, k, v = m.query(x), m.key(x), m.value(x)
        scores = q @ k.transpose(-2, -1) / d**0.5 + bias + key_bias[:, None, :]
        by_hand = torch.softmax(scores, dim=-1) @ v
    torch.testing.assert_close(got, by_hand, **TOL)


def test_is_causal_is_aligned_top_left():
    """With fewer queries than keys (decoding with a cache), is_causal is the wrong triangle."""
    q, _, _ = qkv(T=1)
    _, k, v = qkv(T=4)
    by_flag = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(by_flag, v[:, :1], **TOL)  # the single query saw key 0 only
    newest_sees_all = F.scaled_dot_product_attention(q, k, v)  # what decoding needs
    assert not torch.allclose(by_flag, newest_sees_all)


# --- ours <-> nn.MultiheadAttention -----------------------------------------------------------


def test_mha_masks():
    m = Attention(d, T).double()
    mha = mha_copy_of(m)
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, "right")
    ref, _ = mha(x, x, x, need_weights=False,
                 attn_mask=to_mha_attn_mask(m.mask[:T, :T]),  # MHA: True = not allowed
                 key_padding_mask=to_key_padding_mask(pad))  # MHA: True = ignore
    torch.testing.assert_close(m(x, pad)[pad], ref[pad], **TOL)


def test_mha_key_padding_mask_not_inverted_is_wrong():
    m = Attention(d, T).double()
    mha = mha_copy_of(m)
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, "right")
    wrong, _ = mha(x, x, x, attn_mask=m.mask, key_padding_mask=pad, need_weights=False)
    # Each real query now sees only the padding before it: query 0 sees nothing at all.
    assert not torch.allclose(wrong[:, 0], m(x, pad)[:, 0])
    assert not torch.allclose(wrong[pad], m(x, pad)[pad])


def test_mha_per_sequence_mask_is_repeated_per_head():
    m = Attention(d, T).double()
    mha = mha_copy_of(m, num_heads=2)
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, "right")
    blocked = blocked_positions(m.mask, pad)  # (B, T, T)
    merged, _ = mha(x, x, x, attn_mask=to_mha_attn_mask(blocked, num_heads=2),
                    need_weights=False)
    split, _ = mha(x, x, x, attn_mask=m.mask, key_padding_mask=to_key_padding_mask(pad),
                   need_weights=False)
    torch.testing.assert_close(merged[pad], split[pad], **TOL)
    with pytest.raises(RuntimeError):  # (B, T, T) is the wrong shape for two heads
        mha(x, x, x, attn_mask=blocked, need_weights=False)


def test_mha_per_sequence_mask_with_repeat_is_wrong():
    m = Attention(d, T).double()
    mha = mha_copy_of(m, num_heads=2)
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = torch.tensor([[True] * T, [True] * 2 + [False] * (T - 2), [True] * 4 + [False] * 2])
    blocked = blocked_positions(m.mask, pad)
    right, _ = mha(x, x, x, attn_mask=to_mha_attn_mask(blocked, 2), need_weights=False)
    wrong, _ = mha(x, x, x, attn_mask=blocked.repeat(2, 1, 1), need_weights=False)
    assert not torch.allclose(right[pad], wrong[pad])  # heads paired with another sequence


def test_mha_is_causal_is_only_a_hint():
    m = Attention(d, T).double()
    mha = mha_copy_of(m)
    x = torch.randn(B, T, d, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="attn_mask"):
        mha(x, x, x, is_causal=True)
    # MHA trusts the hint: given a mask that is *not* causal, the SDPA path (need_weights=False)
    # drops the mask and applies the causal one, while need_weights=True uses the mask as given.
    nothing = torch.zeros(T, T, dtype=torch.bool)  # blocks nothing
    causal, _ = mha(x, x, x, attn_mask=m.mask, need_weights=False)
    as_given, _ = mha(x, x, x, attn_mask=nothing, need_weights=False)
    hinted, _ = mha(x, x, x, attn_mask=nothing, is_causal=True, need_weights=False)
    torch.testing.assert_close(hinted, causal, **TOL)
    hinted, _ = mha(x, x, x, attn_mask=nothing, is_causal=True, need_weights=True)
    torch.testing.assert_close(hinted, as_given, **TOL)
    # ... and so is it with a key_padding_mask, which MHA merges into the mask first.
    keep_all = torch.zeros(B, T, dtype=torch.bool)  # True = ignore: ignores nothing
    hinted, _ = mha(x, x, x, attn_mask=nothing, key_padding_mask=keep_all, is_causal=True,
                    need_weights=False)
    torch.testing.assert_close(hinted, as_given, **TOL)


def test_mha_mismatched_mask_types_warn():
    m = Attention(d, T).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, "right")
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
        mha_copy_of(m)(x, x, x, attn_mask=to_additive_mask(m.mask, dtype=x.dtype),
                       key_padding_mask=to_key_padding_mask(pad), need_weights=False)


def test_mha_float_masks_must_match_in_type():
    m = Attention(d, T).double()
    mha = mha_copy_of(m)
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = random_padding(B, T, "right")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # mixing a bool and a float mask is deprecated
        ref, _ = mha(x, x, x, need_weights=False,
                     attn_mask=to_additive_mask(m.mask, dtype=x.dtype),
                     key_padding_mask=to_additive_mask(to_key_padding_mask(pad), dtype=x.dtype))
    torch.testing.assert_close(m(x, pad)[pad], ref[pad], **TOL)


def test_large_negative_fill_is_not_a_mask():
    assert torch.tensor(-1e9).half() == float("-inf")  # overflows in float16
    q, k, v = qkv()
    nothing_visible = torch.full((T, T), -1e9, dtype=torch.float64)  # every key "blocked"
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=nothing_visible)
    # A shift shared by the whole row changes nothing: the row sees every key after all
    # (up to the digits lost when 1e9 is added to the scores).
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), rtol=0, atol=1e-6)
    # In float32, adding 1e9 wipes out the scores (a float32 near 1e9 has steps of 64):
    # the row becomes uniform, the plain mean of the values.
    q, k, v = q.float(), k.float(), v.float()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=nothing_visible.float())
    torch.testing.assert_close(out, v.mean(dim=1, keepdim=True).expand_as(v))
    with pytest.raises(ValueError):
        from_additive_mask(nothing_visible)


_FILLS_THAT_RAISE = {  # every one checks the fill value against float16's range first
    "masked_fill": lambda s, m: s.masked_fill(m, -1e9),
    "masked_fill_": lambda s, m: s.clone().masked_fill_(m, -1e9),
    "fill_": lambda s, m: s.clone().fill_(-1e9),
    "torch.full": lambda s, m: torch.full(s.shape, -1e9, dtype=s.dtype),
    "new_full": lambda s, m: s.new_full(s.shape, -1e9),
}


def _assign(s, m):
    s = s.clone()
    s[m] = -1e9
    return s


_FILLS_THAT_GIVE_MINUS_INF = {  # these round -1e9 to the nearest float16, which is -inf
    "torch.tensor": lambda s, m: torch.tensor([-1e9] * s.numel(), dtype=s.dtype),
    "cast with .half()": lambda s, m: torch.full(s.shape, -1e9).half(),
    "arithmetic s - 1e9": lambda s, m: s - 1e9,
    "torch.where": lambda s, m: torch.where(m, -1e9, s),
    "indexed assignment": _assign,
}


@pytest.mark.parametrize("name", _FILLS_THAT_RAISE)
def test_minus_1e9_fill_raises_in_float16(name):
    """Mask appendix: a -1e9 fill of float16 scores raises in masked_fill, fill_ and full."""
    s, m = torch.zeros(4, dtype=torch.float16), torch.tensor([True, False, True, True])
    with pytest.raises(RuntimeError, match="to type c10::Half without overflow"):
        _FILLS_THAT_RAISE[name](s, m)


@pytest.mark.parametrize("name", _FILLS_THAT_GIVE_MINUS_INF)
def test_minus_1e9_becomes_minus_inf_in_float16(name):
    s, m = torch.zeros(4, dtype=torch.float16), torch.tensor([True, False, True, True])
    out = _FILLS_THAT_GIVE_MINUS_INF[name](s, m)
    assert out.dtype == torch.float16 and out[m].eq(float("-inf")).all()


def test_float16_fill_limit_is_the_largest_value_not_the_rounding():
    """The check compares with 65504 itself: -65519, which would round to -65504, raises too."""
    s, m = torch.zeros(2, dtype=torch.float16), torch.tensor([True, False])
    assert s.masked_fill(m, -65504.0)[0] == -65504
    assert torch.tensor(-65519.0).half() == -65504
    with pytest.raises(RuntimeError, match="without overflow"):
        s.masked_fill(m, -65519.0)
    assert torch.tensor(-1e9).bfloat16() == -998244352  # bfloat16 holds it, rounded


def test_empty_row_in_each_api():
    """A query that sees no key (left padding): zeros or NaN, by code path (CPU)."""
    m = Attention(d, T).double()
    x = torch.randn(1, T, d, dtype=torch.float64)
    pad = torch.tensor([[False, False] + [True] * (T - 2)])  # queries 0 and 1 see no real key
    empty = torch.tensor([[True, True] + [False] * (T - 2)])
    blocked = blocked_positions(m.mask, pad)  # (1, T, T)
    q, k, v = m.query(x), m.key(x), m.value(x)
    sdpa = F.scaled_dot_product_attention
    outputs = {
        "attnbook": m(x, pad),
        "SDPA, math kernel (3-D)": sdpa(q, k, v, attn_mask=to_sdpa_mask(blocked)),
        "SDPA, CPU flash kernel (4-D)": sdpa(q[:, None], k[:, None], v[:, None],
                                             attn_mask=to_sdpa_mask(blocked)[:, None])[:, 0],
        "SDPA, float mask": sdpa(q, k, v, attn_mask=to_additive_mask(blocked, dtype=q.dtype)),
        "SDPA, float mask, CPU flash kernel (4-D)": sdpa(
            q[:, None], k[:, None], v[:, None],
            attn_mask=to_additive_mask(blocked, dtype=q.dtype)[:, None])[:, 0],
        "MHA, need_weights=False": mha_copy_of(m)(
            x, x, x, attn_mask=m.mask, key_padding_mask=to_key_padding_mask(pad),
            need_weights=False)[0],
    }
    for name, out in outputs.items():
        assert (out[empty] == 0).all(), name
    mha_out, mha_weights = mha_copy_of(m)(x, x, x, attn_mask=m.mask,
                                          key_padding_mask=to_key_padding_mask(pad),
                                          need_weights=True)
    assert mha_out[empty].isnan().all() and mha_weights[empty].isnan().all()
    assert torch.isfinite(mha_out[~empty]).all()
    scores = torch.zeros(T, T).masked_fill(blocked[0], float("-inf"))
    assert torch.softmax(scores, dim=-1)[empty[0]].isnan().all()  # torch.softmax: 0/0


def test_mha_empty_row_is_out_proj_bias():
    """MHA's empty row (need_weights=False) is out_proj's bias: zeros only with bias=False.

    SDPA gives the empty row a zero attention output, and out_proj maps zero to its bias. A
    freshly built MHA initialises that bias to zero, so the row reads zeros until the bias is
    trained (here: set to random values).
    """
    x = torch.randn(1, T, d, dtype=torch.float64)
    pad = torch.tensor([[False, False] + [True] * (T - 2)])  # queries 0 and 1 see no real key
    empty = torch.tensor([[True, True] + [False] * (T - 2)])
    causal = causal_mask(T)
    kpm = to_key_padding_mask(pad)

    def empty_rows(mha):
        out = mha(x, x, x, attn_mask=causal, key_padding_mask=kpm, need_weights=False)[0]
        return out[empty]  # (2, d)

    fresh = nn.MultiheadAttention(d, 1, batch_first=True).double()
    assert (fresh.out_proj.bias == 0).all()  # PyTorch's initialisation
    assert (empty_rows(fresh) == 0).all()
    with torch.no_grad():
        fresh.in_proj_bias.normal_()
        fresh.out_proj.bias.normal_()
    rows = empty_rows(fresh)
    assert (rows != 0).all()
    assert torch.equal(rows, fresh.out_proj.bias.expand_as(rows))
    unbiased = nn.MultiheadAttention(d, 1, bias=False, batch_first=True).double()
    assert (empty_rows(unbiased) == 0).all()


def test_transformer_square_subsequent_mask_is_our_causal_mask():
    additive = nn.Transformer.generate_square_subsequent_mask(T)  # float: 0 and -inf
    assert torch.equal(from_additive_mask(additive), causal_mask(T))


def test_hugging_face_style_attention_mask_is_our_padding_mask():
    m = Attention(d, T)
    x = torch.randn(2, T, d)
    attention_mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])  # 1 = real
    out = m(x, attention_mask.bool())
    torch.testing.assert_close(out[0, :4], m(x[:1, :4])[0])  # as if run alone, unpadded
    torch.testing.assert_close(out[1], m(x[1:])[0])


# --- round trips and refusals ------------------------------------------------------------------


def test_round_trips():
    blocked = blocked_positions(causal_mask(T), random_padding(B, T, "left"))
    pad = random_padding(B, T, "right")
    assert torch.equal(from_sdpa_mask(to_sdpa_mask(blocked)), blocked)
    assert torch.equal(from_additive_mask(to_additive_mask(blocked)), blocked)
    assert torch.equal(from_additive_mask(to_additive_mask(blocked, torch.float16)), blocked)
    assert torch.equal(from_key_padding_mask(to_key_padding_mask(pad)), pad)
    assert torch.equal(to_mha_attn_mask(causal_mask(T), num_heads=4), causal_mask(T))
    assert to_mha_attn_mask(blocked, num_heads=4).shape == (B * 4, T, T)
    assert torch.equal(to_mha_attn_mask(blocked, num_heads=4)[4:8], blocked[1].expand(4, T, T))
    assert torch.equal(to_mha_attn_mask(blocked, num_heads=4)[::4], blocked)  # the way back


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="bias"):
        from_additive_mask(torch.full((2, 2), -1e9))  # a large negative is not -inf
    with pytest.raises(TypeError, match="float"):
        from_additive_mask(causal_mask(3))
    with pytest.raises(TypeError, match="from_additive_mask"):
        from_sdpa_mask(to_additive_mask(causal_mask(3)))
    with pytest.raises(TypeError, match="True = ignore"):
        from_key_padding_mask(torch.ones(2, 3))
