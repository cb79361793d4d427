"""Claims of chapters 4 to 7 about PyTorch, pinned: each fails if the sentence it backs breaks.

book/04_causal_mask.md, 05_padding.md, 06_softmax.md and 07_weighted_sum.md name these tests where
they make the claims. They run on the CPU, the machine CI uses. The empty row in SDPA and
nn.MultiheadAttention is pinned by tests/test_mask_conventions.py::test_empty_row_in_each_api.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnbook import Attention, blocked_positions, causal_mask, masked_softmax
from attnbook.seed import Attention as SeedAttention

# ---- chapter 4: fill values, buffers, causality ----------------------------------------------


def test_minus_1e9_cannot_be_filled_into_float16():
    scores = torch.tensor([2.0, 1.0, 0.5, -1.0], dtype=torch.float16)
    blocked = torch.tensor([False, False, True, True])
    with pytest.raises(RuntimeError, match="c10::Half without overflow"):
        scores.masked_fill(blocked, -1e9)


def test_cast_constants_float16_and_bfloat16():
    """A float32 mask cast to half precision: -1e9 becomes -inf in float16; bfloat16 rounds."""
    additive = torch.tensor([-1e4, -1e9])  # float32
    assert additive.tolist() == [-1e4, -1e9]  # both exact in float32
    assert additive.half().tolist() == [-1e4, float("-inf")]
    assert additive.bfloat16().tolist() == [-9984.0, -998244352.0]


def test_finfo_min_overflows_when_added():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        low = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
        assert (low + low).item() == float("-inf"), dtype
    assert (torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16) - 20).isinf()
    for dtype in (torch.float32, torch.bfloat16):  # only float16 overflows at min - 20
        assert (torch.tensor(torch.finfo(dtype).min, dtype=dtype) - 20).isfinite(), dtype


def test_softmax_of_a_row_of_minus_inf_is_nan_in_every_dtype():
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        row = torch.full((4,), float("-inf"), dtype=dtype)
        assert torch.softmax(row, dim=-1).isnan().all(), dtype


def test_masked_fill_needs_a_bool_mask():
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        torch.zeros(3).masked_fill(torch.tensor([1, 0, 1]), 1.0)


def test_a_bool_tensor_cannot_require_grad():
    with pytest.raises(RuntimeError, match="floating point"):
        torch.ones(2, dtype=torch.bool).requires_grad_()


def test_buffer_parameter_and_plain_attribute():
    """The table of chapter 4: what .to, state_dict and parameters() do with each kind."""

    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.plain = torch.zeros(2)
            self.weight = nn.Parameter(torch.zeros(2))
            self.register_buffer("kept", torch.zeros(2))
            self.register_buffer("dropped", torch.zeros(2), persistent=False)

    m = Three().to("meta")
    assert m.plain.device.type == "cpu"  # a plain attribute stays behind
    with pytest.raises(RuntimeError, match="not on the expected device"):
        torch.zeros(2, device="meta").masked_fill(m.plain.bool(), 0.0)  # ... and fails later
    assert m.weight.device.type == "meta" and m.kept.device.type == "meta"
    assert m.dropped.device.type == "meta"
    assert set(Three().state_dict()) == {"weight", "kept"}  # not plain, not persistent=False
    assert [name for name, _ in Three().named_parameters()] == ["weight"]
    half = Attention(4, 4).half()
    assert half.mask.dtype == torch.bool and half.query.weight.dtype == torch.float16


def test_mask_buffer_costs_one_byte_per_entry():
    mask = Attention(4, 1024).mask
    assert mask.element_size() == 1 and mask.nelement() * mask.element_size() == 2**20


def test_seed_fails_with_a_shape_mismatch_beyond_context_length():
    with pytest.raises(RuntimeError, match="must match the size"):
        SeedAttention(4, 16)(torch.randn(1, 17, 4))
    with pytest.raises(ValueError, match="context_length"):
        Attention(4, 16)(torch.randn(1, 17, 4))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("t", [0, 3, 8])
def test_causality_is_bit_exact(t, dtype):
    m = Attention(8, 10).to(dtype)
    x = torch.randn(2, 10, 8, dtype=dtype)
    y = x.clone()
    y[:, t + 1 :] = torch.randn_like(y[:, t + 1 :]) * 100  # a different future
    assert torch.equal(m(x)[:, : t + 1], m(y)[:, : t + 1])  # the past, to the last bit
    assert not torch.allclose(m(x)[:, t + 1 :], m(y)[:, t + 1 :])  # the future did change


# ---- chapter 5: the empty row under each policy ---------------------------------------------


def test_finite_fill_on_an_empty_row_averages_every_value_future_included():
    """A -1e9 fill gives a query that sees only padding the mean of ALL T values (a leak)."""
    T, d = 5, 4
    m = Attention(d, T).double()
    x = torch.randn(1, T, d, dtype=torch.float64)
    pad = torch.tensor([[False, False, True, True, True]])  # left padding: rows 0, 1 empty
    blocked = blocked_positions(m.mask, pad)[0]  # (T, T)
    q, k, v = m.query(x)[0], m.key(x)[0], m.value(x)[0]
    scores = (q @ k.T / d**0.5).masked_fill(blocked, -1e9)
    out = torch.softmax(scores, dim=-1) @ v  # (T, d)
    torch.testing.assert_close(out[0], v.mean(dim=0))  # every value, the real future ones too
    x2 = x.clone()
    x2[0, 4] += 1.0  # change a real token in query 0's future
    v2 = m.value(x2)[0]
    out2 = torch.softmax(scores, dim=-1) @ v2
    assert not torch.allclose(out2[0], out[0])  # causality is broken for the padded query
    assert (m(x, pad)[0, :2] == 0).all()  # attnbook's policy: zero output


def test_other_empty_row_policies():
    T = 4
    scores = torch.randn(T, T, dtype=torch.float64)
    blocked = causal_mask(T) | torch.tensor([True, True, False, False])[None, :]
    v = torch.randn(T, 3, dtype=torch.float64)
    weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    assert weights[:2].isnan().all()  # the seed: NaN
    assert (torch.nan_to_num(weights)[:2] @ v == 0).all()  # nan_to_num: zeros
    diagonal = blocked & ~torch.eye(T, dtype=torch.bool)  # unblock the diagonal
    own = torch.softmax(scores.masked_fill(diagonal, float("-inf")), dim=-1) @ v
    torch.testing.assert_close(own[:2], v[:2])  # the query's own value
    assert (masked_softmax(scores, blocked)[:2] == 0).all()  # attnbook: zeros


# ---- chapter 6: the naive softmax in half precision ------------------------------------------


def _naive(s):
    e = s.exp()
    return e / e.sum(dim=-1, keepdim=True)


def test_float16_naive_softmax_gives_zeros_or_nan():
    zeros = _naive(torch.tensor([11.0, 10.0, 8.0], dtype=torch.float16))
    assert zeros.tolist() == [0.0, 0.0, 0.0]  # every exp fits, their sum does not
    first_nan = _naive(torch.tensor([12.0, 11.0, 9.0], dtype=torch.float16))
    assert first_nan[0].isnan() and first_nan[1:].tolist() == [0.0, 0.0]  # inf / inf, x / inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_exp_leaves_the_range_where_finfo_says(dtype):
    info = torch.finfo(dtype)
    top = math.log(info.max)  # exp(x) = inf above
    bottom = math.log(info.smallest_normal * info.eps / 2)  # half the smallest subnormal
    x = torch.tensor([top - 0.5, top + 0.5, bottom + 0.5, bottom - 0.5], dtype=torch.float64)
    e = x.to(dtype).exp()
    assert e[0].isfinite() and e[1].isinf() and e[2] > 0 and e[3] == 0


def _first_inf_float16_sum(threads: int) -> int:
    """The fewest float16 ones whose CPU sum is inf, with ``threads`` threads (bisection)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        lo, hi = 1, 2 * 65504
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if torch.ones(mid, dtype=torch.float16).sum().isinf() else (mid, hi)
        return hi
    finally:
        torch.set_num_threads(before)


def test_float16_sum_of_ones_overflow_depends_on_how_the_cpu_splits_it():
    # Chapter 6: an exact sum rounded once is inf from 65520 on; PyTorch's CPU sum rounds partial
    # sums along the way, so one thread and two overflow at different counts.
    assert torch.tensor(65519.0).half().item() == 65504
    assert torch.tensor(65520.0).half().isinf()
    assert _first_inf_float16_sum(1) == 65520
    assert _first_inf_float16_sum(2) == 65519


def test_masked_softmax_computes_half_precision_in_float32():
    s = torch.tensor([[[12.0, 11.0, 9.0]]], dtype=torch.float16)
    p = masked_softmax(s, torch.zeros(1, 1, 3, dtype=torch.bool))
    assert p.dtype == torch.float16 and p.isfinite().all()
    torch.testing.assert_close(p.float(), torch.softmax(s.float(), -1), atol=1e-3, rtol=0)


def test_fig_pad_nan_rows_agree_up_to_rounding():
    """Fig. 5.2: 'Every other row agrees with the original module's up to rounding (about 3e-8)'."""
    torch.manual_seed(0)
    T = 5
    pm = torch.tensor([False, False, True, True, True])  # two left padding tokens
    x = torch.randn(1, T, 8)
    original = SeedAttention(8, 8)
    ours = Attention(8, 8)
    ours.load_state_dict(original.state_dict())
    with torch.no_grad():
        q, k = original.query(x), original.key(x)
        s = (q @ k.transpose(-2, -1)) / 8**0.5
        s = s.masked_fill(original.mask[:T, :T], float("-inf"))
        w_seed = torch.softmax(s.masked_fill(~pm[None, None, :], float("-inf")), dim=-1)[0]
        _, w_ours = ours(x, pm[None], return_weights=True)
    real = ~torch.isnan(w_seed).any(-1)
    assert real.tolist() == [False, False, True, True, True]
    assert (w_ours[0][~real] == 0).all()
    assert (w_seed[real] - w_ours[0][real]).abs().max() < 1e-6
