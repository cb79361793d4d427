"""Checkers of the lab "The fused kernel"."""

import torch

from attnbook.exercises.fused import check_empty_rows, check_sdpa_mask
from attnbook.fused import empty_rows, sdpa_mask
from attnbook.masks import causal_mask

PAD = torch.tensor([[False, False, True, True, True], [True, True, True, False, False]])


def test_sdpa_mask_checker():
    right = sdpa_mask(PAD, 5)
    assert check_sdpa_mask(right, PAD).ok
    assert check_sdpa_mask(right[:, 0], PAD).ok
    causal = causal_mask(5)
    cases = {
        "True = blocked": ~right[:, 0],
        "queries (rows)": ~causal & PAD[:, :, None],
        "causal part only": (~causal).expand(2, 5, 5),
        "padding part only": PAD[:, None, :].expand(2, 5, 5),
    }
    for phrase, answer in cases.items():
        fb = check_sdpa_mask(answer, PAD)
        assert not fb.ok and phrase in fb.message, fb.message


def test_empty_rows_checker():
    assert check_empty_rows(empty_rows(PAD), PAD).ok
    for phrase, answer in {"padded queries": ~PAD, "real tokens": PAD,
                           "opposite": ~empty_rows(PAD)}.items():
        fb = check_empty_rows(answer, PAD)
        assert not fb.ok and phrase in fb.message, fb.message
