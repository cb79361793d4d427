"""The RoPE layouts cheat sheet, tested: every line of book/rope_layouts.md is one test here.

The appendix shows several of these tests as its snippets.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.positions import apply_rope, layout_permutation, rope_frequencies

D_H, T = 8, 6
TOL = {"rtol": 1e-12, "atol": 1e-12}


def _unit(i: int, d_h: int = D_H) -> torch.Tensor:
    x = torch.zeros(d_h, dtype=torch.float64)
    x[i] = 1.0
    return x


def test_frequencies_are_base_to_the_minus_2c_over_d_h():
    theta = rope_frequencies(D_H, base=10000.0, dtype=torch.float64)
    expected = torch.tensor([10000.0 ** (-2 * c / D_H) for c in range(D_H // 2)],
                            dtype=torch.float64)
    torch.testing.assert_close(theta, expected, **TOL)


@pytest.mark.parametrize("layout, partner", [("interleaved", lambda c: (2 * c, 2 * c + 1)),
                                             ("half", lambda c: (c, c + D_H // 2))])
def test_which_features_form_a_pair(layout, partner):
    """Interleaved: (2c, 2c + 1). Half: (c, c + d_h/2). Each pair turns by m·θ_c."""
    theta = rope_frequencies(D_H, dtype=torch.float64)
    m = 5
    for c in range(D_H // 2):
        a, b = partner(c)
        out = apply_rope(_unit(a)[None], torch.tensor([m]), layout=layout)[0]  # (d_h,)
        expected = torch.zeros(D_H, dtype=torch.float64)
        expected[a], expected[b] = math.cos(m * theta[c]), math.sin(m * theta[c])
        torch.testing.assert_close(out, expected, **TOL)


def test_interleaved_is_the_complex_form():
    """RoFormer's (and Meta's reference Llama code's) view_as_complex times e^{i m θ_c}."""
    x = torch.randn(T, D_H, dtype=torch.float64)
    pos = torch.arange(T)
    theta = rope_frequencies(D_H, dtype=torch.float64)
    z = torch.view_as_complex(x.reshape(T, D_H // 2, 2).contiguous())  # (T, d_h/2)
    turned = z * torch.polar(torch.ones(T, D_H // 2, dtype=torch.float64),
                             pos[:, None] * theta)  # (T, d_h/2)
    expected = torch.view_as_real(turned).reshape(T, D_H)
    torch.testing.assert_close(apply_rope(x, pos, layout="interleaved"), expected, **TOL)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def test_half_is_the_rotate_half_formula():
    """GPT-NeoX / Hugging Face Llama: x * cos + rotate_half(x) * sin, the angles repeated."""
    x = torch.randn(T, D_H, dtype=torch.float64)
    pos = torch.arange(T)
    angles = pos[:, None] * rope_frequencies(D_H, dtype=torch.float64)  # (T, d_h/2)
    emb = torch.cat((angles, angles), dim=-1)  # (T, d_h)
    expected = x * emb.cos() + _rotate_half(x) * emb.sin()
    torch.testing.assert_close(apply_rope(x, pos, layout="half"), expected, **TOL)


def test_permutation_takes_interleaved_to_half():
    """perm = [0, 2, 4, ..., 1, 3, 5, ...]: x_half = x_interleaved[..., perm]."""
    assert layout_permutation(D_H).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    x = torch.randn(2, T, D_H, dtype=torch.float64)
    pos = torch.arange(T)
    perm = layout_permutation(D_H)
    torch.testing.assert_close(apply_rope(x[..., perm], pos, layout="half"),
                               apply_rope(x, pos, layout="interleaved")[..., perm], **TOL)
    inverse = torch.argsort(perm)
    torch.testing.assert_close(apply_rope(x, pos, layout="half")[..., inverse],
                               apply_rope(x[..., inverse], pos, layout="interleaved"), **TOL)


def _scores(wq, wk, x, n_heads, layout):
    """Per-head rotated scores of x (T, d_in) under the projections wq, wk (h·d_h, d_in)."""
    pos = torch.arange(x.shape[0])
    q = (x @ wq.T).reshape(x.shape[0], n_heads, -1).transpose(0, 1)  # (h, T, d_h)
    k = (x @ wk.T).reshape(x.shape[0], n_heads, -1).transpose(0, 1)
    q, k = apply_rope(q, pos, layout=layout), apply_rope(k, pos, layout=layout)
    return q @ k.transpose(-2, -1)  # (h, T, T)


def _to_half(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    rows, d_in = w.shape
    d_h = rows // n_heads
    return w.reshape(n_heads, d_h, d_in)[:, layout_permutation(d_h)].reshape(rows, d_in)


def test_converting_weights_permutes_the_rows_of_each_head():
    """Trained interleaved, run half: permute the rows of W_q and W_k per head; W_v, W_o stay."""
    h, d_in = 3, 10
    wq, wk = torch.randn(2, h * D_H, d_in, dtype=torch.float64)
    x = torch.randn(T, d_in, dtype=torch.float64)
    torch.testing.assert_close(_scores(_to_half(wq, h), _to_half(wk, h), x, h, "half"),
                               _scores(wq, wk, x, h, "interleaved"), **TOL)


def test_hugging_face_style_permute_is_the_same_conversion():
    """The permute of Llama-to-Hugging-Face conversions, view(h, d_h/2, 2, d_in).transpose(1, 2),
    is the per-head layout permutation."""
    h, d_in = 4, 12
    w = torch.randn(h * D_H, d_in, dtype=torch.float64)
    hf = w.view(h, D_H // 2, 2, d_in).transpose(1, 2).reshape(h * D_H, d_in)
    torch.testing.assert_close(hf, _to_half(w, h), **TOL)


def test_the_wrong_layout_runs_silently_with_other_scores():
    """Weights trained in one layout, run in the other, unconverted: no error, wrong scores."""
    h, d_in = 2, 10
    wq, wk = torch.randn(2, h * D_H, d_in, dtype=torch.float64)
    x = torch.randn(T, d_in, dtype=torch.float64)
    right = _scores(wq, wk, x, h, "interleaved")
    wrong = _scores(wq, wk, x, h, "half")  # no exception
    assert wrong.shape == right.shape
    assert (wrong - right).abs().max() > 1e-2


def test_position_zero_is_the_identity_in_both_layouts():
    x = torch.randn(1, D_H, dtype=torch.float64)
    for layout in ("interleaved", "half"):
        torch.testing.assert_close(apply_rope(x, torch.tensor([0]), layout=layout), x, **TOL)
