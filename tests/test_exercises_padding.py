"""The padding lab's checkers accept the right answer and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook import blocked_positions, causal_mask
from attnbook.exercises.padding import check_blocked, check_empty_rows, empty_rows
from attnbook.seed import Attention as Seed

# one right-padded, one left-padded, one full sequence: (B, T) = (3, 5), True = real
PAD = torch.tensor([[True, True, True, False, False],
                    [False, False, True, True, True],
                    [True, True, True, True, True]])
T = PAD.size(1)
CAUSAL = causal_mask(T)


def test_blocked_right_answer_passes():
    assert check_blocked(blocked_positions(CAUSAL, PAD), PAD).ok
    assert check_blocked(CAUSAL | ~PAD[:, None, :], PAD).ok
    assert "still empty" in check_blocked(..., PAD).message


@pytest.mark.parametrize("answer, phrase", [
    (CAUSAL | ~PAD[:, :, None], "masked queries (rows) instead of keys (columns)"),
    (CAUSAL | PAD[:, None, :], "without inverting it"),
    (CAUSAL | ~PAD[:, None, :] | ~PAD[:, :, None], "both rows and columns"),
    (~PAD[:, None, :].expand(3, T, T), "causal mask is missing"),
    (CAUSAL.expand(3, T, T), "padding keys are missing"),
    (CAUSAL & ~PAD[:, None, :], "instead of |"),
    (~(CAUSAL | ~PAD[:, None, :]), "allowed positions"),
    ((CAUSAL | ~PAD[:, None, :]).int(), "bool"),
    (CAUSAL, "shape (5, 5)"),
])
def test_blocked_mistakes_are_named(answer, phrase):
    fb = check_blocked(answer, PAD)
    assert not fb.ok and phrase in fb.message, fb.message


def test_empty_rows_are_where_the_seed_gives_nan():
    original = Seed(4, T)
    out = original(torch.randn(3, T, 4), PAD)
    assert torch.equal(torch.isnan(out).any(dim=-1), empty_rows(PAD))
    assert empty_rows(PAD).tolist() == [[False] * 5, [True, True, False, False, False],
                                        [False] * 5]


def test_empty_rows_right_answer_passes():
    expected = torch.zeros(3, T, dtype=torch.bool)
    expected[1, :2] = True
    assert check_empty_rows(expected, PAD).ok
    assert check_empty_rows(expected.tolist(), PAD).ok


@pytest.mark.parametrize("answer, phrase", [
    (~PAD, "right-padded query still sees"),
    (PAD, "the real tokens"),
    (torch.zeros(3, T, dtype=torch.bool), "no empty row"),
    ((~PAD).any(-1, keepdim=True).expand(3, T), "always sees itself"),
])
def test_empty_rows_mistakes_are_named(answer, phrase):
    fb = check_empty_rows(answer, PAD)
    assert not fb.ok and phrase in fb.message, fb.message
