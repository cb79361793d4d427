"""The checkers of the projections lab accept right answers and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook import Attention
from attnbook.exercises.projections import (
    check_parameter_count,
    check_queries,
    check_query_matrix,
)


@pytest.fixture
def attn():
    return Attention(d_model=4, context_length=8)


def test_query_matrix(attn):
    w = attn.query.weight.detach()
    assert check_query_matrix(w.T, attn).ok
    assert check_query_matrix(w.T.clone().numpy(), attn).ok  # NumPy arrays are accepted
    cases = {"weight as stored": w, "key's matrix": attn.key.weight.T,
             "key's weight as stored": attn.key.weight}
    for phrase, answer in cases.items():
        fb = check_query_matrix(answer.detach(), attn)
        assert not fb.ok and phrase in fb.message, fb.message
    assert "still empty" in check_query_matrix(..., attn).message


@pytest.mark.parametrize("shape", [(6, 4), (2, 6, 4)])
def test_queries(attn, shape):
    x = torch.randn(shape)
    w = attn.query.weight.detach()
    assert check_queries(attn.query(x).detach(), x, attn).ok
    cases = {
        "weight as stored": x @ w,
        "key matrix": attn.key(x),
        "value matrix": attn.value(x),
        "stored weight": x @ attn.key.weight,
        "token vectors themselves": x,
        "transposed": (x @ w.T).transpose(-2, -1),
    }
    for phrase, answer in cases.items():
        fb = check_queries(answer.detach(), x, attn)
        assert not fb.ok and phrase in fb.message, fb.message


def test_queries_reports_shape_for_unknown_mistakes(attn):
    x = torch.randn(6, 4)
    fb = check_queries(torch.zeros(6, 3), x, attn)
    assert not fb.ok and "shape (6, 3)" in fb.message


def test_parameter_count_matches_the_module():
    d, L = 12, 20
    m = Attention(d, L)
    counted = sum(p.numel() for p in m.parameters())
    assert counted == 3 * d * d
    assert m.mask.numel() == L * L and "mask" not in dict(m.named_parameters())
    assert check_parameter_count(counted, d, L).ok


@pytest.mark.parametrize(
    ("answer", "phrase"),
    [(3 * 64 * 64 + 3 * 64, "bias=False"), (3 * 64 * 64 + 128 * 128, "buffer"),
     (64 * 64, "one matrix"), (4 * 64 * 64, "no output projection"), (3 * 64, "three times d")],
)
def test_parameter_count_mistakes(answer, phrase):
    fb = check_parameter_count(answer, 64, 128)
    assert not fb.ok and phrase in fb.message, fb.message
    assert "differs" in check_parameter_count(12345, 64, 128).message
