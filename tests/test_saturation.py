"""attnbook.lab.saturation: the measurements chapter 3 makes, and the claims it rests on."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook import Attention, attention_scores, scale_scores
from attnbook.lab.saturation import (
    SCALES,
    divisor,
    dot_products,
    entropy,
    gradient_sweep,
    jacobian_norm,
    linear_init_weight,
    logit_spread,
    max_weight,
    query_gradient,
    saturation,
    saturation_sweep,
    score_rows,
    variance_sweep,
)
from attnbook.softmax import softmax_jacobian, stable_softmax


def test_divisor():
    assert divisor(64, "none") == 1.0
    assert divisor(64, "sqrt(d)") == 8.0
    assert divisor(64, "d") == 64.0
    assert divisor(64, 2.5) == 2.5
    with pytest.raises(ValueError, match="scale must be"):
        divisor(64, "sqrt")


def test_sampling_is_seeded_float64_and_shaped():
    a, b = dot_products(8, 100, seed=3), dot_products(8, 100, seed=3)
    assert a.shape == (100,) and a.dtype == torch.float64
    assert torch.equal(a, b)
    assert not torch.equal(a, dot_products(8, 100, seed=4))
    s = score_rows(8, 5, 7, "none", seed=1)
    assert s.shape == (5, 7) and s.dtype == torch.float64
    assert torch.allclose(score_rows(8, 5, 7, "sqrt(d)", seed=1), s / math.sqrt(8))
    assert torch.allclose(score_rows(8, 5, 7, "d", seed=1), s / 8)


def test_score_rows_are_dot_products_of_the_drawn_vectors():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(4, 1, 6, generator=g, dtype=torch.float64)
    k = torch.randn(4, 3, 6, generator=g, dtype=torch.float64)
    expected = torch.einsum("rd,rkd->rk", q[:, 0], k)
    assert torch.allclose(score_rows(6, 4, 3, "none", seed=5), expected)


@pytest.mark.parametrize("d", [4, 64, 1024])
def test_variance_of_the_dot_product_is_d(d):
    # The variance theorem; with 4000 pairs the relative standard error is about 2.3 %.
    var = dot_products(d, 4000, seed=d).var().item()
    assert abs(var / d - 1) < 0.1


def test_variance_sweep():
    rows = variance_sweep([4, 256], n=4000)
    assert [r["d"] for r in rows] == [4, 256]
    for r in rows:
        assert r["var_over_d"] == pytest.approx(r["var"] / r["d"])
        assert abs(r["var_over_d"] - 1) < 0.1


def test_measurements_on_uniform_and_one_hot_rows():
    n = 8
    uniform = torch.full((n,), 1 / n, dtype=torch.float64)
    one_hot = torch.zeros(n, dtype=torch.float64)
    one_hot[2] = 1
    assert max_weight(uniform).item() == pytest.approx(1 / n)
    assert entropy(uniform).item() == pytest.approx(math.log(n))
    assert entropy(one_hot).item() == 0.0  # 0 log 0 counts as 0, not NaN
    assert jacobian_norm(uniform).item() == pytest.approx(1 / n)
    assert jacobian_norm(uniform, ord="fro").item() == pytest.approx(math.sqrt(n - 1) / n)
    assert jacobian_norm(one_hot).item() == pytest.approx(0.0, abs=1e-12)
    assert logit_spread(torch.tensor([1.0, 3.0])).item() == pytest.approx(math.sqrt(2))


def test_measurements_are_per_row():
    p = stable_softmax(torch.randn(3, 5, 7, dtype=torch.float64))
    for f in (max_weight, entropy, jacobian_norm, logit_spread):
        assert f(p).shape == (3, 5)


def test_jacobian_norm_is_the_largest_gradient_through_softmax():
    # ||J||_2 = max over unit score changes of the change in the weights; compare with
    # torch.linalg.matrix_norm and with autograd's Jacobian.
    s = torch.randn(6, dtype=torch.float64)
    p = stable_softmax(s)
    auto = torch.autograd.functional.jacobian(stable_softmax, s)
    assert torch.allclose(auto, softmax_jacobian(p))
    assert jacobian_norm(p).item() == pytest.approx(torch.linalg.matrix_norm(auto, ord=2).item())


def test_jacobian_bound_from_the_chapter():
    # The chapter's proposition: ||J||_2 <= 2 (1 - max weight).
    s = torch.randn(2000, 10, dtype=torch.float64) * torch.logspace(-1, 1.5, 2000)[:, None]
    p = stable_softmax(s)
    assert (jacobian_norm(p) <= 2 * (1 - max_weight(p)) + 1e-12).all()


def test_saturation_summary():
    stats = saturation(score_rows(16, 50, 8, "sqrt(d)", seed=0))
    assert set(stats) == {"spread", "max_weight", "entropy", "jacobian_norm", "saturated"}
    assert all(isinstance(v, float) for v in stats.values())


def test_unscaled_scores_saturate_and_scaled_ones_do_not():
    rows = saturation_sweep([4, 1024], rows=200)
    by = {(r["d"], r["scale"]): r for r in rows}
    assert len(rows) == 2 * len(SCALES)
    # Without scaling the spread grows like sqrt(d) and the softmax saturates...
    assert by[1024, "none"]["spread"] > 25
    assert by[1024, "none"]["max_weight"] > 0.99
    assert by[1024, "none"]["jacobian_norm"] < 1e-3
    assert by[1024, "none"]["saturated"] > 0.5
    # ... with sqrt(d) nothing depends on d ...
    for key in ("spread", "max_weight", "entropy", "jacobian_norm"):
        assert by[1024, "sqrt(d)"][key] == pytest.approx(by[4, "sqrt(d)"][key], rel=0.25)
    # ... and dividing by d flattens the weights towards uniform (1/16, log 16).
    assert by[1024, "d"]["max_weight"] < 0.07
    assert by[1024, "d"]["entropy"] > math.log(16) - 0.01


def test_attend_scales_by_the_width_of_q_and_k():
    # With heads, (B, h, T, d_h), Attention.attend must divide by sqrt(d_h), not sqrt(d_model).
    B, h, T, d_h = 2, 4, 5, 8
    m = Attention(h * d_h, context_length=T).double()
    q, k, v = (torch.randn(B, h, T, d_h, dtype=torch.float64) for _ in range(3))
    _, w = m.attend(q, k, v)
    s = scale_scores(attention_scores(q, k), d_h).masked_fill(m.mask[:T, :T], float("-inf"))
    assert torch.allclose(w, torch.softmax(s, dim=-1))
    wrong = (attention_scores(q, k) / math.sqrt(h * d_h)).masked_fill(m.mask, float("-inf"))
    assert not torch.allclose(w, torch.softmax(wrong, dim=-1))


def test_query_gradient_is_the_chain_rule_with_the_factor_one_over_tau():
    # dL/dq = (1/tau) K^T J V g^T: the softmax Jacobian J and the factor 1/tau both count.
    d, keys, rows = 8, 5, 3
    for scale in SCALES:
        g = torch.Generator().manual_seed(9)
        q = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)
        k = torch.randn(rows, keys, d, generator=g, dtype=torch.float64)
        v = torch.randn(rows, keys, d, generator=g, dtype=torch.float64)
        up = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)
        tau = divisor(d, scale)
        p = stable_softmax((q @ k.transpose(-2, -1) / tau)[:, 0])  # (rows, keys)
        by_hand = (k.transpose(-2, -1) @ softmax_jacobian(p) @ (v @ up.transpose(-2, -1))) / tau
        expected = by_hand.squeeze(-1).norm(dim=-1)  # (rows,)
        assert torch.allclose(query_gradient(d, rows, keys, scale, seed=9), expected)
    # The same queries and keys as score_rows with the same seed.
    assert query_gradient(d, rows, keys, seed=2).shape == (rows,)


def test_raw_scores_give_larger_gradients_at_small_widths_and_vanishing_ones_at_large():
    # The chapter's claim, in both directions: at d = 16 the raw gradient is larger (factor
    # 1/tau = 1 against 1/4, and J is not yet small); at d = 1024 saturation wins by far.
    rows = gradient_sweep([16, 1024], rows=200)
    by = {(r["d"], r["scale"]): r for r in rows}
    assert by[16, "none"]["grad"] > by[16, "sqrt(d)"]["grad"]
    assert by[1024, "none"]["grad"] < 0.01 * by[1024, "sqrt(d)"]["grad"]
    # With sqrt(d), one entry of the gradient has the same typical size at every width.
    assert by[1024, "sqrt(d)"]["grad_per_entry"] == pytest.approx(
        by[16, "sqrt(d)"]["grad_per_entry"], rel=0.25)
    for r in rows:
        assert r["grad_per_entry"] == pytest.approx(r["grad"] / math.sqrt(r["d"]))


# A realistic initialisation: nn.Linear's default, entry variance 1/3 ---------------------------


def test_linear_init_weight_is_nn_linears_initialisation():
    torch.manual_seed(4)
    layer = torch.nn.Linear(6, 5, bias=False)
    w = linear_init_weight(6, 5, seed=4, dtype=torch.float32)  # (in, out): the book's W
    assert torch.equal(w, layer.weight.T)
    big = linear_init_weight(512, 512, seed=0)  # float64
    assert big.dtype == torch.float64 and big.abs().max() <= 1 / math.sqrt(512)
    assert big.var().item() * 3 * 512 == pytest.approx(1.0, rel=0.02)


def test_linear_init_scores_have_variance_d_over_9():
    # Entry variance 1/3 for queries and keys, so Var(q·k) = d/9: a spread of sqrt(d)/3.
    d = 256
    raw = score_rows(d, 400, 16, "none", seed=0, init="linear")  # (rows, keys)
    assert raw.var().item() / (d / 9) == pytest.approx(1.0, rel=0.1)
    # The same queries and keys in query_gradient: its gradient is (1/τ) Kᵀ J V g, finite.
    assert torch.isfinite(query_gradient(d, 50, 16, "none", seed=0, init="linear")).all()


def test_linear_init_saturates_only_at_widths_nine_times_larger():
    # The raw spread at width 9d with nn.Linear's init is the unit-entry spread at width d.
    unit = saturation_sweep([64], scales=("none",), rows=200)[0]
    lin = saturation_sweep([576], scales=("none",), rows=200, init="linear")[0]
    assert lin["spread"] == pytest.approx(unit["spread"], rel=0.15)
    small = saturation_sweep([64], scales=("none",), rows=200, init="linear")[0]
    assert small["saturated"] < 0.05 < unit["saturated"]


def test_unknown_init_is_rejected():
    with pytest.raises(ValueError, match="init must be one of"):
        score_rows(4, 2, 3, init="xavier")
    with pytest.raises(ValueError, match="init must be one of"):
        query_gradient(4, 2, 3, init="xavier")
