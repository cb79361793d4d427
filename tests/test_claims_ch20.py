"""Claims of chapter 20 (rotary positions and ALiBi) that the page states and the lab shows."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

from attnbook.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_frequencies,
    rope_parameters,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from nbtools import glued  # noqa: E402


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


def _share(text: str) -> float:
    return float(text.rstrip("%")) / 100


def test_the_rope_types_section_says_what_the_lab_stored():
    """The rope-types section: its comparisons, against the values Lab 20 glued."""
    g = glued("20_positions.ipynb")
    acc = {k: _share(v) for k, v in g.items() if k.startswith(("pos_rt_acc_", "pos_partial_acc_",
                                                             "pos_acc_"))}
    # linear and llama3 (Llama 3.1's thresholds at L = 16) lose the task; both slow pair 0
    for name in ("linear", "llama3"):
        assert acc[f"pos_rt_acc_{name}_2"] <= 0.2 and acc[f"pos_rt_acc_{name}_4"] <= 0.2
        assert float(g[f"pos_rt_theta0_{name}"]) < 1
    for name in ("default", "dynamic", "yarn", "yarn_cold"):
        assert g[f"pos_rt_theta0_{name}"] == "1.00", name  # pair 0 kept
    # dynamic above plain RoPE at 2T and 4T; YaRN best, and better than the steep ALiBi at 4T
    for f in (2, 4):
        assert acc[f"pos_rt_acc_dynamic_{f}"] > acc[f"pos_rt_acc_default_{f}"]
        assert acc[f"pos_rt_acc_yarn_{f}"] > acc[f"pos_rt_acc_dynamic_{f}"]
    assert acc["pos_rt_acc_yarn_4"] > acc["pos_acc_alibi_steep_4"]
    assert acc["pos_rt_acc_yarn_cold_4"] >= acc["pos_rt_acc_yarn_4"]  # the temperature not the help
    assert acc["pos_rt_acc_default_2"] == acc["pos_acc_rope_2"]  # the same model as the table above
    # partial rotary: every width solves T; both partial widths beat full RoPE at 2T; all fall at 4T
    for rd in (16, 8, 4):
        assert acc[f"pos_partial_acc_{rd}_1"] >= 0.99
        assert acc[f"pos_partial_acc_{rd}_4"] < 0.75
    assert min(acc["pos_partial_acc_8_2"], acc["pos_partial_acc_4_2"]) > acc["pos_partial_acc_16_2"]


def test_the_thresholds_the_page_gives_for_llama3_and_yarn_at_L_16():
    """L/h = 4 < 2 pi < L/l = 16: pair 0 in Llama 3's ramp; YaRN's runs from pair 0 to 1."""
    L, d_h = 16, 16
    theta = rope_frequencies(d_h, dtype=torch.float64)
    assert L / 4 < 2 * math.pi / theta[0] < L / 1
    llama3 = {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": L}
    assert 0.5 < rope_parameters(d_h, 10000.0, llama3)[0][0] < 1
    yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": L}
    scaled, temp = rope_parameters(d_h, 10000.0, yarn)
    assert scaled[0] == theta[0] and torch.allclose(scaled[1:], theta[1:] / 2, rtol=1e-12)
    assert math.isclose(temp, 0.1 * math.log(2) + 1)
    assert 8192 / 4 == 2048  # Llama 3.1: pairs faster than 2048 tokens are kept
