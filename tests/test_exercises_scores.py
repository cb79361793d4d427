"""The checkers of the scores lab accept right answers and name each typical mistake."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook import attention_scores
from attnbook.exercises.scores import check_cosines, check_score_row, check_scores


@pytest.mark.parametrize("shape", [(6, 4), (2, 6, 4), (5, 5)])
def test_scores(shape):
    q, k = torch.randn(shape), torch.randn(shape)
    s = attention_scores(q, k)
    assert check_scores(s, q, k).ok
    kt = k.transpose(-2, -1)
    cases = {
        "transposed": k @ q.transpose(-2, -1),
        "sqrt(d)": s / math.sqrt(shape[-1]),
        "divided by d": s / shape[-1],
        "elementwise product": q * k,
        "diagonal alone": (q * k).sum(-1),
        "(d, d)": q.transpose(-2, -1) @ k,
        "queries against themselves": q @ q.transpose(-2, -1),
        "keys against themselves": k @ kt,
    }
    if shape[-1] == shape[-2]:
        cases["forgot to transpose"] = q @ k
    for phrase, answer in cases.items():
        fb = check_scores(answer, q, k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_score_row():
    q, k = torch.randn(6, 4), torch.randn(6, 4)
    assert check_score_row(attention_scores(q, k)[2], q, k, 2).ok
    cases = {"column i": q @ k[2], "elementwise": q[2] * k, "other queries": q @ q[2],
             "sqrt(d)": k @ q[2] / 2}
    for phrase, answer in cases.items():
        fb = check_score_row(answer, q, k, 2)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_cosines():
    q, k = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 4, dtype=torch.float64)
    cos = torch.nn.functional.cosine_similarity(q[:, None, :], k[None, :, :], dim=-1)
    assert check_cosines(cos, q, k).ok
    s = q @ k.T
    nq, nk = q.norm(dim=-1), k.norm(dim=-1)
    cases = {
        "raw scores": s,
        "|q_i| only": s / nq[:, None],
        "|k_j| only": s / nk[None, :],
        "along columns": s / (nk[:, None] * nq[None, :]),
        "whole matrices": s / (q.norm() * k.norm()),
        "cosines transposed": cos.T,
    }
    for phrase, answer in cases.items():
        fb = check_cosines(answer, q, k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_dot_T_on_a_3d_tensor_is_deprecated_not_an_error():
    """Chapter 2's transpose exercise: `.T` on a batch warns (deprecated) and reverses all dims."""
    x = torch.randn(2, 5, 3)
    with pytest.warns(UserWarning, match="deprecated"):
        y = x.T
    assert y.shape == (3, 5, 2)


def test_the_wrong_transposes_fail_on_a_2_5_3_batch():
    """Chapter 2's transpose exercise: with (B, T, d) = (2, 5, 3) only the last two dims work."""
    q, k = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    assert (q @ k.transpose(-2, -1)).shape == (2, 5, 5) == (q @ k.mT).shape
    for wrong in (k.transpose(0, 1), k.permute(2, 1, 0)):  # (5, 2, 3); k.T's (3, 5, 2)
        with pytest.raises(RuntimeError):
            q @ wrong
