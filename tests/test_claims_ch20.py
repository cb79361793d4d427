"""Claims of chapter 20 (rotary positions and ALiBi) that the page states and the lab shows."""

from __future__ import annotations

import math

import torch

from attnbook.positions import alibi_bias, alibi_slopes, apply_rope, rope_frequencies


def test_ex_20_2_frequencies_wavelengths_and_full_turns():
    """d_h = 8, base 10^4: theta_c = 10^-c; only pairs 0 and 1 turn fully within 64 tokens."""
    theta = rope_frequencies(8, dtype=torch.float64)
    assert torch.allclose(theta, torch.tensor([1.0, 0.1, 0.01, 0.001], dtype=torch.float64))
    wavelengths = 2 * math.pi / theta
    assert [round(w, 2) for w in wavelengths.tolist()] == [6.28, 62.83, 628.32, 6283.19]
    assert [c for c, w in enumerate(wavelengths.tolist()) if w <= 64] == [0, 1]


def test_alibi_bias_alone_favours_future_keys_and_the_causal_mask_fixes_it():
    T = 6
    bias = alibi_bias(1, T, T, dtype=torch.float64)[0]  # (T, T)
    assert (bias.triu(1)[bias.triu(1) != 0] > 0).all(), "above the diagonal the bias is positive"
    alone = torch.softmax(bias, dim=-1)  # equal content scores, the bias as the only mask
    assert (alone[0].diff() > 0).all(), "query 0 should weight later (future) keys more"
    assert alone[0, -1] == alone[0].max()
    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    masked = torch.softmax(bias + causal, dim=-1)
    assert masked.triu(1).abs().max() == 0
    assert (masked[-1].diff() > 0).all(), "with the mask, nearer earlier keys weigh more"


def test_the_two_head_slopes_leave_a_16_token_model_nearly_free_of_positions():
    slopes = alibi_slopes(2, torch.float64)
    assert slopes.tolist() == [1 / 16, 1 / 256]
    reach = 15 * slopes  # the largest penalty within 16 tokens
    assert reach[0] < 1 and reach[1] < 0.06


def test_ntk_scaling_changes_every_pair_but_the_first():
    d_h, s = 16, 2.0
    kappa = s ** (d_h / (d_h - 2))
    ratio = rope_frequencies(d_h, 10000.0 * kappa, torch.float64) / rope_frequencies(
        d_h, dtype=torch.float64)
    assert ratio[0] == 1.0
    assert (ratio[1:] < 1).all() and (ratio.diff() < 0).all()
    assert math.isclose(ratio[-1].item(), 1 / s, rel_tol=1e-12)
    assert math.isclose(ratio[1].item(), 2 ** (-1 / 7), rel_tol=1e-12)  # the page's 0.91
    # the library's ("ntk", s) is exactly that base
    x = torch.randn(5, d_h, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(5)
    assert torch.allclose(apply_rope(x, pos, scaling=("ntk", s)),
                          apply_rope(x, pos, base=10000.0 * kappa), atol=1e-12)
