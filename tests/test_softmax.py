"""Softmax and the weighted sum: the properties chapters 6 and 7 state, and temperature_softmax."""

from __future__ import annotations

import pytest
import torch

from attnbook.scores import attention_scores, scale_scores
from attnbook.softmax import softmax_jacobian, stable_softmax, temperature_softmax
from attnbook.weighted_sum import weighted_sum


def test_temperature_one_is_the_plain_softmax():
    s = torch.randn(3, 5, dtype=torch.float64)
    torch.testing.assert_close(temperature_softmax(s, 1.0), torch.softmax(s, -1))


def test_temperature_divides_the_scores():
    s = torch.randn(2, 4, 6, dtype=torch.float64)
    torch.testing.assert_close(temperature_softmax(s, 0.5, dim=1), torch.softmax(s / 0.5, 1))


def test_temperature_limits():
    s = torch.tensor([1.0, 3.0, 2.0, 3.0], dtype=torch.float64)
    cold = temperature_softmax(s, 1e-4)  # ties share the argmax evenly
    torch.testing.assert_close(cold, torch.tensor([0.0, 0.5, 0.0, 0.5], dtype=torch.float64))
    hot = temperature_softmax(s, 1e6)
    torch.testing.assert_close(hot, torch.full((4,), 0.25, dtype=torch.float64), atol=1e-5, rtol=0)


def test_temperature_tiny_does_not_overflow():
    s = torch.tensor([1.0, 2.0], dtype=torch.float16)
    p = temperature_softmax(s, 1e-3)
    assert torch.isfinite(p).all() and p.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("scores, dtype", [([70.0, 1.0], torch.float16),
                                           ([1e36, 1.0], torch.bfloat16),
                                           ([1e36, 1.0], torch.float32)])
def test_temperature_shifts_before_dividing(scores, dtype):
    # s / tau alone overflows here (70 / 1e-3 > float16's 65504; 1e36 / 1e-3 > float32's
    # and bfloat16's 3.4e38), so dividing first and shifting afterwards gives inf - inf = NaN.
    s = torch.tensor(scores, dtype=dtype)
    assert torch.isnan(stable_softmax(s / 1e-3)).all()
    p = temperature_softmax(s, 1e-3)
    assert p.dtype == dtype
    assert p.tolist() == [1.0, 0.0]


def test_temperature_half_is_computed_in_float32():
    s = torch.randn(4, 9, dtype=torch.float64)
    want = torch.softmax(s / 0.3, -1)
    got = temperature_softmax(s.half(), 0.3)
    assert got.dtype == torch.float16
    # float32 arithmetic then one rounding to float16: within half an fp16 ulp of the exact
    # value, which a float16 computation of exp and sum would not reliably be.
    torch.testing.assert_close(got.double(), want.half().double(), atol=2e-3, rtol=0)


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan")])
def test_temperature_must_be_positive(tau):
    with pytest.raises(ValueError, match="temperature"):
        temperature_softmax(torch.zeros(3), tau)


def test_sharper_when_colder():
    s = torch.randn(10, dtype=torch.float64)
    tops = [temperature_softmax(s, tau).max().item() for tau in (4.0, 1.0, 0.25)]
    assert tops[0] < tops[1] < tops[2]


def test_shift_invariance():
    s = torch.randn(4, 7, dtype=torch.float64)
    for c in (-500.0, 3.0, 1e3):
        torch.testing.assert_close(stable_softmax(s + c), stable_softmax(s))


@pytest.mark.parametrize("dtype, big", [(torch.float32, 100.0), (torch.float16, 12.0),
                                        (torch.bfloat16, 100.0)])
def test_stable_softmax_survives_where_the_naive_formula_overflows(dtype, big):
    s = torch.tensor([0.0, -1.0, -3.0], dtype=dtype) + big
    e = s.exp()
    assert torch.isnan(e / e.sum()).any()  # the naive formula: inf / inf
    p = stable_softmax(s)
    exact = torch.softmax(torch.tensor([0.0, -1.0, -3.0], dtype=torch.float64), -1)
    torch.testing.assert_close(p.double(), exact, atol=5e-3, rtol=0)


def test_jacobian_is_symmetric_with_zero_row_sums():
    J = softmax_jacobian(torch.softmax(torch.randn(3, 5, dtype=torch.float64), -1))  # (3, 5, 5)
    torch.testing.assert_close(J, J.transpose(-2, -1))
    torch.testing.assert_close(J.sum(-1), torch.zeros(3, 5, dtype=torch.float64))


def test_outputs_lie_in_the_hull_of_the_values():
    w = torch.softmax(torch.randn(2, 6, 6, dtype=torch.float64), -1)  # (B, T, T)
    v = torch.randn(2, 6, 3, dtype=torch.float64)  # (B, T, d)
    y = weighted_sum(w, v)  # (B, T, d)
    # A convex combination stays inside the bounding box of the values, coordinate by coordinate.
    assert (y <= v.amax(dim=1, keepdim=True) + 1e-12).all()
    assert (y >= v.amin(dim=1, keepdim=True) - 1e-12).all()


def test_one_hot_weights_look_up_one_value():
    v = torch.randn(1, 4, 3)
    w = torch.eye(4)[[2, 0, 3, 1]][None]  # (1, T, T): query i takes value perm[i]
    torch.testing.assert_close(weighted_sum(w, v), v[:, [2, 0, 3, 1]])


def _unmasked(x, wq, wk, wv):
    q, k, v = x @ wq, x @ wk, x @ wv  # (T, d) each
    return weighted_sum(stable_softmax(scale_scores(attention_scores(q, k), x.size(-1))), v)


def test_unmasked_attention_is_permutation_equivariant_and_causal_is_not():
    from attnbook import Attention

    x = torch.randn(5, 4, dtype=torch.float64)
    wq, wk, wv = (torch.randn(4, 4, dtype=torch.float64) for _ in range(3))
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(_unmasked(x[perm], wq, wk, wv), _unmasked(x, wq, wk, wv)[perm])
    attn = Attention(4, 8).double()
    with torch.no_grad():
        y = attn(x[None])[0]
        y_perm = attn(x[perm][None])[0]
    assert not torch.allclose(y_perm, y[perm])
