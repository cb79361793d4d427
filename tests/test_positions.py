"""attnbook.positions: RoPE, ALiBi and the sinusoidal table, against their definitions."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.positions import (
    POSITION_SCHEMES,
    alibi_bias,
    alibi_score_mod,
    alibi_slopes,
    apply_rope,
    default_positions,
    layout_permutation,
    rope_frequencies,
    sinusoidal_table,
)

F64 = {"dtype": torch.float64}


def rope_complex(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0):
    """RoFormer's complex form, written independently: feature pairs (2c, 2c + 1) are one
    complex number z_c, and position m multiplies it by exp(i m θ_c)."""
    d_h = x.size(-1)
    theta = 1.0 / base ** (torch.arange(0, d_h, 2, **F64) / d_h)  # (d_h/2,)
    z = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d_h // 2, 2).contiguous())
    turn = torch.polar(torch.ones_like(theta), positions.to(torch.float64)[:, None] * theta)
    return torch.view_as_real(z * turn).flatten(-2)  # (..., T, d_h)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_shifting_every_position_leaves_the_scores_unchanged(layout):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 7, 16, generator=g, **F64)
    k = torch.randn(2, 3, 7, 16, generator=g, **F64)
    pos = torch.tensor([0, 1, 2, 3, 5, 8, 13])
    scores = apply_rope(q, pos, layout=layout) @ apply_rope(k, pos, layout=layout).transpose(-1, -2)
    for shift in (1, 37, 1000):
        moved = (apply_rope(q, pos + shift, layout=layout)
                 @ apply_rope(k, pos + shift, layout=layout).transpose(-1, -2))
        torch.testing.assert_close(moved, scores, rtol=1e-10, atol=1e-10)
    # ... and the scores do depend on the positions: without this the test above proves nothing.
    assert not torch.allclose(apply_rope(q, pos * 2, layout=layout)
                              @ apply_rope(k, pos * 2, layout=layout).transpose(-1, -2), scores)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_a_rotation_keeps_every_norm(layout):
    x = torch.randn(4, 9, 32, **F64)
    out = apply_rope(x, torch.arange(9) * 11, layout=layout)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=1e-12)
    # every pair keeps its own length too
    if layout == "half":
        pair = lambda t: t[..., :16] ** 2 + t[..., 16:] ** 2  # noqa: E731
    else:
        pair = lambda t: t[..., 0::2] ** 2 + t[..., 1::2] ** 2  # noqa: E731
    torch.testing.assert_close(pair(out), pair(x), rtol=1e-12, atol=1e-12)


def test_the_layouts_agree_under_the_permutation():
    d_h = 12
    perm = layout_permutation(d_h)
    x = torch.randn(2, 5, d_h, **F64)
    pos = torch.tensor([3, 1, 4, 1, 5])
    torch.testing.assert_close(apply_rope(x[..., perm], pos, layout="half"),
                               apply_rope(x, pos, layout="interleaved")[..., perm])
    inv = torch.argsort(perm)
    torch.testing.assert_close(apply_rope(x[..., perm], pos, layout="half")[..., inv],
                               apply_rope(x, pos, layout="interleaved"))
    # Without the permutation the two layouts give different rotations.
    assert not torch.allclose(apply_rope(x, pos, layout="half"),
                              apply_rope(x, pos, layout="interleaved"))


def test_the_complex_reference_agrees_with_apply_rope():
    x = torch.randn(3, 6, 10, **F64)
    pos = torch.tensor([0, 2, 7, 11, 100, 4096])
    torch.testing.assert_close(apply_rope(x, pos, layout="interleaved"), rope_complex(x, pos),
                               rtol=1e-12, atol=1e-12)
    perm = layout_permutation(10)
    torch.testing.assert_close(apply_rope(x[..., perm], pos, layout="half"),
                               rope_complex(x, pos)[..., perm], rtol=1e-12, atol=1e-12)
    # base matters
    torch.testing.assert_close(apply_rope(x, pos, base=500.0, layout="interleaved"),
                               rope_complex(x, pos, base=500.0), rtol=1e-12, atol=1e-12)


def test_batched_positions_rotate_each_sequence_by_its_own():
    x = torch.randn(2, 3, 5, 8, **F64)  # (B, h, T, d_h)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 7, 8, 9, 20]])  # (B, T)
    out = apply_rope(x, pos)
    for b in range(2):
        torch.testing.assert_close(out[b], apply_rope(x[b], pos[b]))
    x3 = x[:, 0]  # (B, T, d_h)
    torch.testing.assert_close(apply_rope(x3, pos), out[:, 0])


def test_dtypes_angles_in_float32_or_float64():
    pos = torch.arange(300) * 97
    x64 = torch.randn(300, 8, **F64)
    ref = rope_complex(x64, pos)
    perm = layout_permutation(8)
    out32 = apply_rope(x64.float(), pos, layout="interleaved")
    assert out32.dtype == torch.float32
    # large angles: float32 angles lose about 1e-7 relative of 3e4 radians, not more
    torch.testing.assert_close(out32.double(), ref, rtol=0, atol=2e-2)
    out16 = apply_rope(x64[..., perm].to(torch.bfloat16), pos)
    assert out16.dtype == torch.bfloat16
    assert apply_rope(x64, pos).dtype == torch.float64


def test_frequencies_and_position_zero():
    torch.testing.assert_close(rope_frequencies(8, dtype=torch.float64),
                               torch.tensor([1.0, 0.1, 0.01, 0.001], **F64))
    x = torch.randn(3, 8)
    assert torch.equal(apply_rope(x, torch.zeros(3, dtype=torch.long)), x)


def test_scaling():
    x = torch.randn(6, 8, **F64)
    pos = torch.arange(6) * 4
    torch.testing.assert_close(apply_rope(x, pos, scaling=("interpolation", 4)),
                               apply_rope(x, torch.arange(6)))
    base_ntk = 10000.0 * 2.0 ** (8 / 6)
    torch.testing.assert_close(apply_rope(x, pos, scaling=("ntk", 2)),
                               apply_rope(x, pos, base=base_ntk))
    # NTK scaling leaves the fastest pair (c = 0, θ = 1) alone and slows the slowest by s.
    torch.testing.assert_close(rope_frequencies(8, base_ntk, torch.float64)[[0, 3]],
                               torch.tensor([1.0, 1e-3 / 2], **F64))


@pytest.mark.parametrize("x_shape, pos, match", [
    ((4, 7), torch.arange(4), "even"),
    ((4, 8), torch.arange(5), r"T = 4"),
    ((4, 8), torch.arange(4)[None, None], r"\(T,\) or \(B, T\)"),
    ((2, 4, 8), torch.zeros(3, 4, dtype=torch.long), "same B and T"),
    ((4, 8), torch.zeros(1, 4, dtype=torch.long), "same B and T"),
])
def test_bad_shapes_are_refused_by_name(x_shape, pos, match):
    with pytest.raises(ValueError, match=match):
        apply_rope(torch.randn(*x_shape), pos)


def test_bad_dtypes_layouts_scalings_are_refused_by_name():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="must be integers.*positions.long"):
        apply_rope(x, torch.arange(4.0))
    with pytest.raises(TypeError, match="must be integers"):
        apply_rope(x, torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="integer torch.Tensor"):
        apply_rope(x, [0, 1, 2, 3])
    with pytest.raises(TypeError, match="floating-point"):
        apply_rope(torch.ones(4, 8, dtype=torch.long), torch.arange(4))
    with pytest.raises(ValueError, match="layout must be one of.*'half'.*'interleaved'"):
        apply_rope(x, torch.arange(4), layout="neox")
    for bad in (("linear", 2), ("ntk", 0), ("ntk",), 2.0):
        with pytest.raises(ValueError, match="scaling must be None"):
            apply_rope(x, torch.arange(4), scaling=bad)
    with pytest.raises(ValueError, match="even"):
        rope_frequencies(5)
    with pytest.raises(ValueError, match="base must be a positive"):
        rope_frequencies(4, base=0.0)
    with pytest.raises(ValueError, match="even"):
        layout_permutation(3)


def test_alibi_slopes_follow_the_paper():
    torch.testing.assert_close(alibi_slopes(8, torch.float64),
                               torch.tensor([1 / 2 ** i for i in range(1, 9)], **F64), rtol=0,
                               atol=0)
    # h = 6: the 4 slopes of h = 4 (2^-2, 2^-4, 2^-6, 2^-8), then the odd-numbered slopes of
    # h = 8 (2^-1, 2^-3) until 6 are taken (Press et al.'s get_slopes).
    torch.testing.assert_close(alibi_slopes(6, torch.float64),
                               torch.tensor([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3],
                                            **F64), rtol=0, atol=0)
    assert alibi_slopes(1).tolist() == [2 ** -8]
    s16 = alibi_slopes(16, torch.float64)
    torch.testing.assert_close(s16, torch.tensor([2 ** (-i / 2) for i in range(1, 17)], **F64))
    assert len(alibi_slopes(12)) == 12 and len(set(alibi_slopes(12).tolist())) == 12
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="h \\(number of heads\\) must be an integer >= 1"):
            alibi_slopes(bad)


def test_alibi_bias_and_score_mod():
    b = alibi_bias(2, 3, 5, offset=2)  # (h, T_q, T_k)
    m = alibi_slopes(2)
    i = torch.arange(3)[:, None] + 2
    j = torch.arange(5)[None, :]
    expected = -m[:, None, None] * (i - j).float()
    torch.testing.assert_close(b, expected)
    assert b.shape == (2, 3, 5) and (b[:, torch.arange(3), torch.arange(3) + 2] == 0).all()
    mod = alibi_score_mod(m)
    score = torch.randn(1, 2, 3, 5)
    out = mod(score, torch.zeros(1, 1, 1, 1, dtype=torch.long),
              torch.arange(2)[None, :, None, None], i[None, None], j[None, None])
    torch.testing.assert_close(out, score + expected)
    with pytest.raises(ValueError, match="1-D tensor"):
        alibi_score_mod(torch.ones(2, 2))


def test_sinusoidal_table_is_vaswanis():
    t = sinusoidal_table(50, 6, dtype=torch.float64)
    p = 17
    for i in range(3):
        assert math.isclose(t[p, 2 * i], math.sin(p / 10000 ** (2 * i / 6)), abs_tol=1e-14)
        assert math.isclose(t[p, 2 * i + 1], math.cos(p / 10000 ** (2 * i / 6)), abs_tol=1e-14)
    assert sinusoidal_table(4, 5).shape == (4, 5)
    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        sinusoidal_table(4, 0)


def test_schemes_and_default_positions():
    assert POSITION_SCHEMES == ("none", "learned", "sinusoidal", "rope", "alibi")
    assert default_positions(4).tolist() == [0, 1, 2, 3]
    pm = torch.tensor([[False, False, True, True], [True, False, True, True]])
    assert default_positions(4, pm).tolist() == [[0, 0, 0, 1], [0, 0, 1, 2]]


def test_exported_from_attnbook():
    import attnbook
    for name in ("apply_rope", "alibi_slopes", "alibi_bias", "sinusoidal_table"):
        assert getattr(attnbook, name) is globals()[name]
        assert name in attnbook.__all__
