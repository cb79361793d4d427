"""The exercise checkers accept right answers and name known mistakes."""

from __future__ import annotations

import torch

from attnbook import Attention
from attnbook.exercises import check_tensor
from attnbook.exercises.glance import check_output_row


def test_check_tensor_verdicts():
    expected = torch.tensor([1.0, 2.0])
    assert check_tensor(expected.clone(), expected).ok
    assert "still empty" in check_tensor(..., expected).message
    wrong = check_tensor(torch.tensor([2.0, 4.0]), expected, {"doubled": expected * 2})
    assert not wrong.ok and "doubled" in wrong.message
    assert "shape (3,)" in check_tensor(torch.zeros(3), expected).message
    assert "NaN" in check_tensor(torch.tensor([float("nan"), 1.0]), expected).message
    assert "differs by up to 0.5" in check_tensor(torch.tensor([1.5, 2.0]), expected).message
    assert "should be a tensor" in check_tensor("abc", expected).message


def test_glance_checker_names_each_mistake():
    m = Attention(4, 6)
    x = torch.randn(1, 6, 4)
    y, w = m(x, return_weights=True)
    v = m.value(x)
    w, v, x = w[0].detach(), v[0].detach(), x[0]
    assert check_output_row(y[0, 3].detach(), w, v, x, 3).ok
    cases = {
        "column i": w[:, 3] @ v,
        "inputs x": w[3] @ x,
        "alone": v[3],
        "unweighted average": v.mean(0),
    }
    for phrase, answer in cases.items():
        fb = check_output_row(answer, w, v, x, 3)
        assert not fb.ok and phrase in fb.message, fb.message


def test_check_number_is_exact_and_names_mistakes():
    from attnbook.exercises import check_number

    assert check_number(4096, 4096).ok
    assert not check_number(4097, 4096).ok
    fb = check_number(2048, 4096, {"the keys only": 2048})
    assert not fb.ok and "the keys only" in fb.message
