"""Chapter 20's training conclusions across seeds, from benchmarks/results_positions_seeds.json.

The benchmark (``benchmarks/train_positions_seeds.py``) reruns Lab 20's harness over several
seeds, with the controls the chapter's explanations need. These tests check that

* its seed 0 is the lab's run (the lab's stored numbers, to their rounding), so the other seeds
  are the same experiment with other draws;
* the results file is what its Markdown holds, with at least 5 seeds ("How we measure");
* the identities behind the controls hold exactly (dynamic scaling is NTK at s = f^2 - f + 1;
  the base-matched partial-rotary controls have the spectra the page says), in seconds;
* every comparison the page draws from the seeds holds in the stored results.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from attnbook.positions import rope_frequencies, rope_parameters

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT / "scripts"))
import train_positions_seeds as seeds_bench  # noqa: E402  (registers its tables)
from bench_results import dump, results_json_from_markdown  # noqa: E402
from nbtools import glued  # noqa: E402

STEM = seeds_bench.STEM


@pytest.fixture(scope="module")
def values() -> dict:
    return json.loads((BENCH / f"{STEM}.json").read_text(encoding="utf-8"))["values"]


def _seeds(values: dict) -> list[int]:
    return sorted(int(k.rsplit(".s", 1)[1]) for k in values
                  if k.startswith("acc.rope.t.s"))


def _per_seed(values: dict, table: str, arm: str, length: str) -> list[float]:
    return [values[f"{table}.{arm}.{length}.s{s}"] for s in _seeds(values)]


def test_the_json_is_the_markdown_read_back(values):
    md = (BENCH / f"{STEM}.md").read_text(encoding="utf-8")
    stored = (BENCH / f"{STEM}.json").read_text(encoding="utf-8")
    assert stored == dump(results_json_from_markdown(md, STEM))
    assert values["seeds.count"] == len(_seeds(values)) >= 5
    assert _seeds(values) == list(range(len(_seeds(values))))  # seeds 0..n-1, none skipped


def test_the_harness_is_the_labs():
    nb = (ROOT / "notebooks" / "20_positions.ipynb").read_text(encoding="utf-8")
    small = '{\\"d_model\\": 32, \\"n_heads\\": 2, \\"n_layers\\": 2, \\"mlp\\": False}'
    assert f"SMALL = {small}" in nb
    assert "T, STEPS, BATCH, LR = 16, 300, 64, 1e-2" in nb
    assert seeds_bench.SMALL == {"d_model": 32, "n_heads": 2, "n_layers": 2, "mlp": False}
    assert (seeds_bench.T, seeds_bench.STEPS, seeds_bench.BATCH, seeds_bench.LR) == (
        16, 300, 64, 1e-2)


def _pct(text: str) -> float:
    return float(text.rstrip("%"))


# Lab 20's glue keys -> (arm, length) in the benchmark.
LAB20 = {f"pos_acc_{s}_{f}": (s, L) for s in ("none", "sinusoidal", "rope", "alibi")
         for f, L in ((1, "t"), (2, "2t"), (4, "4t"))}
LAB20.update({f"pos_acc_alibi_{n}_{f}": (f"alibi_{n}", L) for n in ("mid", "steep")
              for f, L in ((1, "t"), (2, "2t"), (4, "4t"))})
LAB20["pos_acc_learned_1"] = ("learned", "t")
LAB20.update({f"pos_partial_acc_{rd}_{f}": (f"rotary{rd}", L) for rd in (8, 4)
              for f, L in ((1, "t"), (2, "2t"), (4, "4t"))})
LAB20.update({f"pos_rt_acc_{n}_{f}": (f"rope_{n}", L)
              for n in ("linear", "dynamic", "yarn", "yarn_cold", "llama3")
              for f, L in ((2, "2t"), (4, "4t"))})
LAB20.update({"pos_pi_acc": ("rope_linear", "2t"), "pos_ntk_acc": ("rope_ntk2", "2t"),
              "pos_ft_plain_acc": ("ft_plain_50_lr10", "2t"),
              "pos_ft_pi_acc": ("ft_pi_50_lr10", "2t")})


def test_seed_0_is_the_labs_run(values):
    """Every accuracy and loss Lab 20 glued, from the benchmark's seed 0 (to their rounding)."""
    g = glued("20_positions.ipynb")
    for key, (arm, length) in LAB20.items():
        assert abs(values[f"acc.{arm}.{length}.s0"] - _pct(g[key])) <= 0.55, key
        nats = key.replace("_acc", "_nats")
        if nats in g:
            assert abs(values[f"loss.{arm}.{length}.s0"] - float(g[nats])) <= 0.0051, nats


def test_seed_0_is_lab_14s_run_without_positions(values):
    g = glued("14_tiny_model.ipynb")
    assert abs(values["acc.ch14_nopos.t.s0"] - _pct(g["tiny_nopos_acc"])) <= 0.055
    assert abs(values["loss.ch14_nopos.t.s0"] - float(g["tiny_nopos_nats"])) <= 0.0051
    assert abs(values["below.ch14_nopos.gap_pct.s0"] - _pct(g["tiny_nopos_gap_pct"])) <= 0.055
    assert abs(values["below.ch14_nopos.z.s0"] - float(g["tiny_nopos_gap_z"])) <= 0.55
    assert abs(values["acc.ch14_nopos_mlp.t.s0"] - _pct(g["tiny_acc_nopos_mlp"])) <= 0.55
    assert abs(values["loss.ch14_nopos_mlp.t.s0"] - float(g["tiny_nopos_mlp_nats"])) <= 0.0051


# -- the identities behind the controls (seconds) --------------------------------------------

@pytest.mark.parametrize("f", [2, 3, 4, 8])
def test_dynamic_with_factor_f_at_f_times_the_length_is_ntk_at_f2_minus_f_plus_1(f):
    """rope_type dynamic sets the base to base (f n / L - (f - 1)) ** (r / (r - 2)): at n = f L
    that is NTK-aware scaling with s = f^2 - f + 1; with factor 1, NTK with s = f."""
    L, r = 16, 16
    dynamic = {"rope_type": "dynamic", "factor": float(f), "original_max_position_embeddings": L}
    theta = rope_parameters(r, 10000.0, dynamic, seq_len=f * L)[0]
    ntk = rope_parameters(r, 10000.0, ("ntk", f * f - f + 1))[0]
    assert torch.allclose(theta, ntk, rtol=1e-12, atol=0)
    one = {**dynamic, "factor": 1.0}
    assert torch.allclose(rope_parameters(r, 10000.0, one, seq_len=f * L)[0],
                          rope_parameters(r, 10000.0, ("ntk", f))[0], rtol=1e-12, atol=0)
    assert f * f - f + 1 == {2: 3, 3: 7, 4: 13, 8: 57}[f]


def test_linear_is_position_interpolation():
    for f in (2, 4):
        assert torch.equal(rope_parameters(16, 10000.0, {"rope_type": "linear", "factor": f})[0],
                           rope_parameters(16, 10000.0, ("interpolation", f))[0])


def test_the_partial_rotary_controls_have_the_spectra_the_page_says():
    full = rope_frequencies(16, 10000.0, torch.float64)  # 10^(-c/2), c = 0..7
    assert torch.allclose(rope_frequencies(8, 100.0, torch.float64), full[:4], rtol=1e-12)
    assert torch.allclose(rope_frequencies(4, 10.0, torch.float64), full[:2], rtol=1e-12)
    rotary8 = rope_frequencies(8, 10000.0, torch.float64)  # 10^(-c), c = 0..3
    rotary4 = rope_frequencies(4, 10000.0, torch.float64)  # 10^(-2c), c = 0..1
    assert torch.allclose(rope_frequencies(16, 1e8, torch.float64)[:4], rotary8, rtol=1e-12)
    assert torch.allclose(rope_frequencies(16, 1e16, torch.float64)[:2], rotary4, rtol=1e-12)
    # the slower pairs those two add turn by less than a tenth of a radian over 4T = 64 tokens
    assert 64 * rope_frequencies(16, 1e8, torch.float64)[4] < 0.01
    assert 64 * rope_frequencies(16, 1e16, torch.float64)[2] < 0.01
    assert math.isclose(rotary8[1].item(), 0.1) and math.isclose(full[1].item(), 10 ** -0.5)


def test_dynamic_equals_ntk_in_every_seed(values):
    """The same frequencies give the same model, so the stored numbers agree exactly."""
    for table in ("acc", "loss"):
        assert _per_seed(values, table, "rope_dynamic", "2t") == _per_seed(
            values, table, "rope_ntk3", "2t")
        assert _per_seed(values, table, "rope_dynamic", "4t") == _per_seed(
            values, table, "rope_ntk13", "4t")
        assert _per_seed(values, table, "rope_dynamic_f1", "2t") == _per_seed(
            values, table, "rope_ntk2", "2t")
        assert _per_seed(values, table, "rope_dynamic_f1", "4t") == _per_seed(
            values, table, "rope_ntk4", "4t")


# -- the comparisons chapter 20 draws from the seeds -----------------------------------------

def _stat(values: dict, arm: str, length: str, what: str, table: str = "acc") -> float:
    return values[f"{table}.{arm}.{length}.{what}"]


def test_the_schemes_as_the_page_compares_them(values):
    blind = _pct(glued("20_positions.ipynb")["pos_set_acc"])
    for arm in ("learned", "sinusoidal", "rope"):
        assert _stat(values, arm, "t", "min") >= 99  # solve the task at T, every seed
    assert _stat(values, "sinusoidal", "2t", "max") < 50  # fails past T
    # RoPE keeps part of the task past T, a part that varies with the seed
    assert _stat(values, "rope", "2t", "min") > _stat(values, "none", "2t", "max")
    assert _stat(values, "rope", "2t", "max") < 99  # part of it: no seed keeps all
    assert _stat(values, "rope", "2t", "max") - _stat(values, "rope", "2t", "min") > 10
    # the rule's slopes: about no positions, about the best predictor blind to order
    for arm in ("alibi", "none"):
        assert abs(_stat(values, arm, "t", "mean") - blind) < 2
    # 1/2, 1/4: part of the task, about as much at 4T as at T
    assert 40 < _stat(values, "alibi_mid", "t", "mean") < 90
    mid = [_stat(values, "alibi_mid", f, "mean") for f in ("t", "4t")]
    assert abs(mid[1] - mid[0]) < 5
    # 2, 1: keeps at 4T what it learned at T in every seed, and its lowest seed at 4T is above
    # every seed of the other schemes there
    for t, f in zip(_per_seed(values, "acc", "alibi_steep", "t"),
                    _per_seed(values, "acc", "alibi_steep", "4t")):
        assert abs(f - t) <= 2
    others = max(_stat(values, a, "4t", "max")
                 for a in ("none", "sinusoidal", "rope", "alibi", "alibi_mid"))
    assert _stat(values, "alibi_steep", "4t", "min") > others
    # YaRN about as well at 4T: overlapping ranges, means within 5 points
    assert abs(_stat(values, "rope_yarn", "4t", "mean")
               - _stat(values, "alibi_steep", "4t", "mean")) < 5
    assert _stat(values, "rope_yarn", "4t", "min") < _stat(values, "alibi_steep", "4t", "max")
    assert _stat(values, "alibi_steep", "4t", "min") < _stat(values, "rope_yarn", "4t", "max")


def test_stretching_and_fine_tuning_as_the_page_compares_them(values):
    g = glued("20_positions.ipynb")
    for arm in ("rope_linear", "rope_llama3"):  # chance (10 %) in every seed
        assert _stat(values, arm, "2t", "max") <= 11 and _stat(values, arm, "4t", "max") <= 11
    assert abs(_stat(values, "rope_ntk2", "2t", "mean") - _stat(values, "rope", "2t", "mean")) < 5
    # the lab's budget: interpolation stays at chance, its loss above a uniform guess (ln 10)
    assert float(g["pos_ft_pi_nats"]) > math.log(10)
    assert _stat(values, "ft_pi_50_lr10", "2t", "max") <= 11
    # without interpolation every budget run recovers the task
    for key in ("50_lr10", "200_lr10", "50_lr", "200_lr"):
        assert _stat(values, f"ft_plain_{key}", "2t", "min") >= 95, key
    # with it, more is needed: below the plain model at the small budgets, recovered at 200
    # steps of the full rate, or 800 at a tenth, in every seed
    for key in ("50_lr10", "200_lr10", "50_lr"):
        assert _stat(values, f"ft_pi_{key}", "2t", "mean") < _stat(
            values, f"ft_plain_{key}", "2t", "mean") - 30, key
    assert _stat(values, "ft_pi_200_lr", "2t", "min") >= 95
    assert _stat(values, "ft_pi_800_lr10", "2t", "min") >= 95  # or 800 steps at a tenth
    spread = _stat(values, "ft_pi_50_lr", "2t", "max") - _stat(values, "ft_pi_50_lr", "2t", "min")
    assert spread > 30  # "a wide spread over the seeds"


def test_dynamic_as_the_page_explains_it(values):
    for f in ("2t", "4t"):  # above plain RoPE on average, not in every seed
        assert _stat(values, "rope_dynamic", f, "mean") > _stat(values, "rope", f, "mean")
    assert any(d < r for d, r in zip(_per_seed(values, "acc", "rope_dynamic", "2t") +
                                     _per_seed(values, "acc", "rope_dynamic", "4t"),
                                     _per_seed(values, "acc", "rope", "2t") +
                                     _per_seed(values, "acc", "rope", "4t")))
    # factor 1 (s = f): about plain RoPE at 2T
    assert abs(_stat(values, "rope_dynamic_f1", "2t", "mean")
               - _stat(values, "rope", "2t", "mean")) < 5
    # the mean at 2T rises with the NTK scale
    means = [_stat(values, f"rope_ntk{s}", "2t", "mean") for s in seeds_bench.NTK_SCALES]
    assert means == sorted(means) and means[-1] - means[0] > 15


def test_yarn_as_the_page_compares_it(values):
    types = ("rope", "rope_linear", "rope_dynamic", "rope_llama3")
    for f in ("2t", "4t"):  # the best of the types on average
        assert _stat(values, "rope_yarn", f, "mean") > max(_stat(values, a, f, "mean")
                                                           for a in types)
    for i, y in enumerate(_per_seed(values, "acc", "rope_yarn", "2t")):  # at 2T in every seed
        assert y > max(_per_seed(values, "acc", a, "2t")[i] for a in types)
    # the temperature is not what helps: without it, no worse at 4T
    assert _stat(values, "rope_yarn_cold", "4t", "mean") >= _stat(values, "rope_yarn", "4t",
                                                                  "mean") - 1


def test_partial_rotary_as_the_controls_show_it(values):
    rope = _stat(values, "rope", "2t", "mean")
    for rd in ("rotary8", "rotary4"):  # both partial widths above full RoPE at 2T on average
        assert _stat(values, rd, "t", "min") >= 99
        assert _stat(values, rd, "2t", "mean") > rope + 10
    for arm in ("rope", "rotary8", "rotary4"):  # all fall far below T at 4T
        assert _stat(values, arm, "4t", "mean") < 75
    # RoPE's fast frequencies with position-free features: what full RoPE gets
    for arm, partial in (("rotary8_base100", "rotary8"), ("rotary4_base10", "rotary4")):
        assert abs(_stat(values, arm, "2t", "mean") - rope) < 8, arm
        assert _stat(values, arm, "2t", "mean") < _stat(values, partial, "2t", "mean") - 10
    # the partial widths' fast frequencies in a fully rotated head: what the partial width gets
    for arm, partial in (("rotary16_base1e8", "rotary8"), ("rotary16_base1e16", "rotary4")):
        assert abs(_stat(values, arm, "2t", "mean") - _stat(values, partial, "2t", "mean")) < 8
        assert _stat(values, arm, "2t", "mean") > rope + 10
    assert _stat(values, "rotary8", "2t", "min") >= 99 and _stat(
        values, "rotary16_base1e8", "2t", "min") >= 99


def test_chapter_14s_runs_without_positions_across_seeds(values):
    """How we measure's account of Lab 14's two runs: with an MLP, above the blind predictor in
    every seed; without one, the loss below it by more than 3 standard errors in the lab's seed
    but not in every seed (the counts the page pastes are the stored ones)."""
    blind = _pct(glued("14_tiny_model.ipynb")["tiny_set_acc"])
    assert values["acc.ch14_nopos_mlp.t.min"] > blind + 10
    assert abs(values["acc.ch14_nopos.t.mean"] - blind) < 1  # accuracy: the blind predictor's
    z = [values[f"below.ch14_nopos.z.s{s}"] for s in _seeds(values)]
    gap = [values[f"below.ch14_nopos.gap_pct.s{s}"] for s in _seeds(values)]
    assert values["below.ch14_nopos.seeds_below"] == sum(g > 0 for g in gap)
    assert values["below.ch14_nopos.seeds_above_3_se"] == sum(v > 3 for v in z) < len(z)
    assert z[0] > 3
