"""The checkers of the lab "From one head to many" accept right answers and name mistakes."""

from __future__ import annotations

import math

import torch

from attnbook.exercises.multihead import (
    check_head_scores,
    check_parameter_count,
    check_split_heads,
)
from attnbook.multihead import MultiHeadAttention


def test_split_heads_checker():
    m = MultiHeadAttention(8, 6, n_heads=2)
    x = torch.randn(2, 6, 8)
    assert check_split_heads(m.split_heads(x), x, 2).ok
    assert "still empty" in check_split_heads(..., x, 2).message
    cases = {
        "direct .view(B, h, T, d_h)": x.view(2, 2, 6, 4),
        "must come before the tokens": x.view(2, 6, 2, 4),
        "every h-th feature": x.view(2, 6, 4, 2).permute(0, 3, 1, 2),
    }
    for phrase, answer in cases.items():
        fb = check_split_heads(answer, x, 2)
        assert not fb.ok and phrase in fb.message, fb.message


def test_head_scores_checker():
    B, T, d, h = 2, 5, 8, 2
    m = MultiHeadAttention(d, T, h)
    x = torch.randn(B, T, d)
    q, k = m.query(x).detach(), m.key(x).detach()
    qh, kh = m.split_heads(q), m.split_heads(k)
    raw = qh @ kh.transpose(-2, -1)
    assert check_head_scores(raw / math.sqrt(d // h), q, k, h).ok
    cases = {
        "sqrt(d_model)": raw / math.sqrt(d),
        "unscaled": raw,
        "divided by d_h": raw / (d // h),
        "transposed": raw.transpose(-2, -1) / math.sqrt(d // h),
    }
    for phrase, answer in cases.items():
        fb = check_head_scores(answer, q, k, h)
        assert not fb.ok and phrase in fb.message, fb.message


def test_parameter_count_checker():
    d, h = 64, 4
    right = sum(p.numel() for p in MultiHeadAttention(d, 8, h).parameters())
    assert check_parameter_count(right, d, h).ok
    cases = {"output projection": 3 * d * d, "4 h d^2": 4 * h * d * d,
             "one head's share": 4 * d * (d // h), "not d_h x d_h": 3 * h * 16 * 16 + d * d}
    for phrase, answer in cases.items():
        fb = check_parameter_count(answer, d, h)
        assert not fb.ok and phrase in fb.message, fb.message
    assert "differs" in check_parameter_count(right + 1, d, h).message
