"""The checkers of the lab "The whole module, verified" accept right answers and name mistakes."""

from __future__ import annotations

import pytest
import torch

from attnbook import Attention, blocked_positions, causal_mask, to_additive_mask, to_sdpa_mask
from attnbook.exercises.whole_module import (
    check_in_proj_weight,
    check_key_padding_mask,
    check_sdpa_mask,
)

# One left-padded and one right-padded sequence, so that every mistake changes the mask.
PAD = torch.tensor([[False, False, True, True, True], [True, True, True, True, False]])
T = PAD.shape[1]
CAUSAL = causal_mask(T)
BLOCKED = blocked_positions(CAUSAL, PAD)


def test_sdpa_mask_right_answers():
    assert check_sdpa_mask(to_sdpa_mask(BLOCKED), PAD).ok
    assert check_sdpa_mask(~CAUSAL & PAD[:, None, :], PAD).ok  # broadcast built by hand
    assert "still empty" in check_sdpa_mask(..., PAD).message


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (BLOCKED, "True = may attend"),
        (~CAUSAL, "causal part only"),  # (T, T): broadcast like SDPA would
        (PAD[:, None, :], "causal mask is missing"),  # (B, 1, T)
        (~CAUSAL & PAD[:, :, None], "queries (rows)"),
        (~CAUSAL.T & PAD[:, None, :], "transposed"),
        (~CAUSAL & ~PAD[:, None, :], "padding flipped"),
        (to_additive_mask(BLOCKED), "additive float mask"),
        ((~BLOCKED).long(), "dtype torch.int64"),
        ((~BLOCKED).float(), "add .bool()"),
        (torch.ones(2, 4, 4, dtype=torch.bool), "shape (2, 4, 4)"),
    ],
)
def test_sdpa_mask_mistakes_are_named(answer, phrase):
    fb = check_sdpa_mask(answer, PAD)
    assert not fb.ok and phrase in fb.message, fb.message


def test_key_padding_mask_right_answer():
    assert check_key_padding_mask(~PAD, PAD).ok
    assert check_key_padding_mask(PAD.logical_not(), PAD).ok


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (PAD, "not inverted"),
        (to_additive_mask(~PAD), "additive float mask"),
        (to_additive_mask(PAD), "-inf at the real tokens"),
        ((~PAD).int(), "dtype torch.int32"),
        (BLOCKED, "one entry per key"),
        ([[True, False]], "shape (1, 2)"),
    ],
)
def test_key_padding_mask_mistakes_are_named(answer, phrase):
    fb = check_key_padding_mask(answer, PAD)
    assert not fb.ok and phrase in fb.message, fb.message


def test_in_proj_weight():
    m = Attention(4, 6)
    q, k, v = m.query.weight, m.key.weight, m.value.weight
    assert check_in_proj_weight(torch.cat([q, k, v]), q, k, v).ok
    cases = {
        "transposed": torch.cat([q.T, k.T, v.T]),
        "side by side": torch.cat([q, k, v], dim=1),
        "you have k, q, v": torch.cat([k, q, v]),
        "you have q, v, k": torch.cat([q, v, k]),
        "you have v, k, q": torch.cat([v, k, q]),
        "three times": torch.cat([q, q, q]),
        "shape (8, 4)": torch.cat([q, k]),
    }
    for phrase, answer in cases.items():
        fb = check_in_proj_weight(answer.detach(), q, k, v)
        assert not fb.ok and phrase in fb.message, fb.message
