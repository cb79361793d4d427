"""Checkers of the labs of Part VI (Labs 16 to 19)."""

import math

import torch

from attnbook.exercises.gpu import (
    causal_tiles,
    check_backward_ratio,
    check_decode_intensity,
    check_delta,
    check_merge,
    check_programs,
    check_splits,
    check_standard_io,
    check_tiles,
)
from attnbook.gpu.decoding import merge_partials


def test_decode_intensity():
    right = 4 * 8192 * 128 / (2 * (2 * 8192 * 128 + 2 * 128))
    assert check_decode_intensity(right, 8192, 128, 2).ok
    assert not check_decode_intensity(right * 2, 8192, 128, 2).ok
    fb = check_decode_intensity(right / 2, 8192, 128, 2)
    assert not fb.ok and "multiply-add" in fb.message, fb.message
    assert "empty" in check_decode_intensity(..., 8192, 128, 2).message


def test_standard_io():
    assert check_standard_io(4 * 2048 * 64 + 4 * 2048**2, 2048, 64).ok
    fb = check_standard_io(4 * 2048**2, 2048, 64)
    assert not fb.ok and "Q, K, V" in fb.message, fb.message


def test_programs_and_tiles():
    assert check_programs(8 * 8 * 12, 8, 12, 1000, 128).ok
    fb = check_programs(7 * 8 * 12, 8, 12, 1000, 128)
    assert not fb.ok and "partial" in fb.message, fb.message
    right = causal_tiles(300, 64, 32)
    brute = sum(1 for i0 in range(0, 300, 64) for j0 in range(0, 300, 32)
                if j0 < min(i0 + 64, 300))
    assert right == brute
    assert check_tiles(right, 300, 64, 32).ok
    fb = check_tiles(math.ceil(300 / 64) * math.ceil(300 / 32), 300, 64, 32)
    assert not fb.ok and "every tile" in fb.message, fb.message


def test_delta_and_ratio():
    o, do = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    assert check_delta((do * o).sum(-1), do, o).ok
    fb = check_delta(do.sum(-1), do, o)
    assert not fb.ok and "dO alone" in fb.message, fb.message
    assert check_backward_ratio(2.5).ok
    fb = check_backward_ratio(2.0)
    assert not fb.ok and "recomputing" in fb.message, fb.message


def test_merge_and_splits():
    lses = torch.tensor([[[0.5], [-math.inf]], [[2.0], [-math.inf]], [[-1.0], [-math.inf]]],
                        dtype=torch.float64)
    outs = torch.randn(3, 2, 4, dtype=torch.float64)
    outs[:, 1] = 0.0
    assert check_merge(merge_partials(outs, lses), outs, lses).ok
    fb = check_merge(outs.mean(0), outs, lses)
    assert not fb.ok and "plain average" in fb.message, fb.message
    w = lses.exp()
    fb = check_merge((w * outs).sum(0) / w.sum(0), outs, lses)
    assert not fb.ok and "NaN" in fb.message, fb.message
    assert check_splits(7, 2, 8, 108).ok
    fb = check_splits(6, 2, 8, 108)
    assert not fb.ok and "rounded down" in fb.message, fb.message
    # Grouped-query attention: 32 query heads on 8 key/value heads, one program per kv head.
    assert check_splits(7, 2, 32, 108, h_kv=8).ok
    fb = check_splits(2, 2, 32, 108, h_kv=8)
    assert not fb.ok and "count B h_kv" in fb.message, fb.message
