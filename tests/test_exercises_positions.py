"""The positions lab's checkers accept right answers and name each typical mistake; the
exercises graded as functions pass the book's solutions on every hidden input."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.exercises import hidden_cases
from attnbook.exercises.positions import (
    GRADED,
    check_alibi_slopes,
    check_relative_scores,
    check_rotate_pair,
    check_to_half,
)
from attnbook.positions import apply_rope


def _turn(pair, angle):
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])


PAIR = torch.tensor([1.0, 0.5], dtype=torch.float64)
M, THETA = 3, 10000.0 ** (-2 / 8)
_C, _S = math.cos(M * THETA), math.sin(M * THETA)
_SWAPPED = torch.stack([_S * PAIR[0] - _C * PAIR[1], _C * PAIR[0] + _S * PAIR[1]])


def test_right_rotation_passes_in_float32_and_float64():
    assert check_rotate_pair(_turn(PAIR, M * THETA), PAIR, M, THETA).ok
    assert check_rotate_pair(_turn(PAIR, M * THETA).float(), PAIR, M, THETA).ok
    assert "still empty" in check_rotate_pair(..., PAIR, M, THETA).message


@pytest.mark.parametrize("phrase, answer", [
    ("the other way", _turn(PAIR, -M * THETA)),
    ("by θ alone", _turn(PAIR, THETA)),
    ("cos and sin swapped", _SWAPPED),
    ("unrotated", PAIR.clone()),
    ("(m + 1)·θ", _turn(PAIR, (M + 1) * THETA)),
])
def test_rotation_mistakes_are_named(phrase, answer):
    fb = check_rotate_pair(answer, PAIR, M, THETA)
    assert not fb.ok and phrase in fb.message, fb.message


def _scores(q, k, T, layout="half"):
    pos = torch.arange(T)
    return apply_rope(q.expand(T, -1), pos, layout=layout) @ apply_rope(k.expand(T, -1), pos,
                                                                       layout=layout).T


Q, K = torch.randn(2, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def test_right_score_matrix_passes_and_depends_on_the_distance_only():
    S = _scores(Q, K, 6)
    assert check_relative_scores(S, Q, K, 6).ok
    for r in range(-5, 6):
        d = S.diagonal(offset=r)
        torch.testing.assert_close(d, d[0].expand_as(d))


def test_score_matrix_mistakes_are_named():
    pos = torch.arange(6)
    cases = {
        "no rotation": Q.expand(6, -1) @ K.expand(6, -1).T,
        "only the query rotated": apply_rope(Q.expand(6, -1), pos) @ K.expand(6, -1).T,
        "only the key rotated": Q.expand(6, -1) @ apply_rope(K.expand(6, -1), pos).T,
        "transpose": _scores(Q, K, 6).T,
        "interleaved layout": _scores(Q, K, 6, layout="interleaved"),
        "sqrt(d_h)": _scores(Q, K, 6) / math.sqrt(8),
    }
    for phrase, answer in cases.items():
        fb = check_relative_scores(answer, Q, K, 6)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def _to_half(w, n_heads):
    rows, d_in = w.shape
    d_h = rows // n_heads
    order = list(range(0, d_h, 2)) + list(range(1, d_h, 2))
    return w.reshape(n_heads, d_h, d_in)[:, order].reshape(rows, d_in)


W = torch.randn(16, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def test_right_conversion_passes():
    assert check_to_half(_to_half(W, 2), W, 2).ok


def test_conversion_mistakes_are_named():
    inverse = torch.argsort(torch.tensor(list(range(0, 8, 2)) + list(range(1, 8, 2))))
    cases = {
        "all the rows at once": _to_half(W, 1),
        "the inverse permutation": W.reshape(2, 8, 12)[:, inverse].reshape(16, 12),
        "unchanged": W.clone(),
        "the columns": _to_half(W.T.contiguous(), 1).T,
    }
    for phrase, answer in cases.items():
        fb = check_to_half(answer, W, 2)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_conversion_refuses_a_weight_that_does_not_split_into_heads():
    with pytest.raises(ValueError, match="n_heads"):
        check_to_half(W[:15], W[:15], 2)


def test_alibi_slopes_checker():
    i = torch.arange(1, 5, dtype=torch.float64)
    assert check_alibi_slopes(2.0 ** (-8 * i / 4), 4).ok
    cases = {"counted from 0": 2.0 ** (-8 * (i - 1) / 4), "without the 8": 2.0 ** (-i / 4),
             "reverse order": (2.0 ** (-8 * i / 4)).flip(0), "linear in i": 2.0 ** (-8 / i)}
    for phrase, answer in cases.items():
        fb = check_alibi_slopes(answer, 4)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def _solutions():
    def rotate_pair(pair, m, theta):
        return _turn(pair, m * theta)

    return {"rotate_pair": rotate_pair, "interleaved_to_half": _to_half}


def test_graded_functions_pass_every_hidden_input_and_mistakes_fail_on_them():
    right = _solutions()
    wrong = {"rotate_pair": lambda pair, m, theta: _turn(pair, -m * theta),
             "interleaved_to_half": lambda w, n_heads: _to_half(w, 1)}
    for spec in GRADED.values():
        for seed in (1, 2, 3):
            cases = hidden_cases(spec, seed)
            assert cases
            for case in cases:
                fb = spec.check(right[spec.function](*case.call), *case.check_args)
                assert fb.ok, (spec.function, case.label, fb.message)
        verdicts = [spec.check(wrong[spec.function](*c.call), *c.check_args)
                    for c in hidden_cases(spec, 1)]
        assert not all(v.ok for v in verdicts), spec.function
        assert any("looks like" in v.message for v in verdicts), spec.function
    a, b = hidden_cases(GRADED["check_to_half"], 1), hidden_cases(GRADED["check_to_half"], 2)
    assert not torch.equal(a[0].call[0], b[0].call[0])  # the seed changes the inputs
