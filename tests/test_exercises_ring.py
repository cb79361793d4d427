"""Checkers of the lab "Ring attention"."""

import torch

from attnbook.exercises.ring import (
    check_contiguous_work,
    check_ring_output,
    check_source_rank,
    merge_steps,
)
from attnbook.online import tiled_attention_forward
from attnbook.ring import visible_scores


def test_source_rank():
    assert check_source_rank(3, rank=1, step=2, world=4).ok
    for answer, phrase in [(-1, "wrapping"), (2, "off-by-one")]:
        fb = check_source_rank(answer, rank=1, step=2, world=4)
        assert not fb.ok and phrase in fb.message, fb.message
    fb = check_source_rank(2, rank=1, step=1, world=4)
    assert not fb.ok and "wrong way" in fb.message, fb.message
    assert check_source_rank(0, rank=1, step=1, world=4).ok


def _steps():
    """Three key shards of 4 keys seen by 4 queries (square, as ring chunks are); query 0 sees
    no key at all (an empty row)."""
    torch.manual_seed(2)
    q = torch.randn(4, 3, dtype=torch.float64)
    ks = [torch.randn(4, 3, dtype=torch.float64) for _ in range(3)]
    vs = [torch.randn(4, 2, dtype=torch.float64) for _ in range(3)]
    pad = torch.ones(1, 4, dtype=torch.bool)
    outs, lses = [], []
    for k, v in zip(ks, vs):
        out, lse = tiled_attention_forward(q[None], k[None], v[None], pad, False, 2)
        out, lse = out[0].clone(), lse[0].clone()
        out[0], lse[0] = 0.0, float("-inf")  # query 0: every key masked
        outs.append(out)
        lses.append(lse)
    s = torch.cat([q @ k.T / 3**0.5 for k in ks], -1)
    s[0] = float("-inf")
    return torch.stack(outs), torch.stack(lses), s, torch.cat(vs)


def test_merge_steps_is_attention_over_every_shard():
    outs, lses, s, v = _steps()
    right = torch.softmax(s[1:], -1) @ v
    merged = merge_steps(outs, lses)
    torch.testing.assert_close(merged[1:], right)
    assert (merged[0] == 0).all()
    assert check_ring_output(merged, outs, lses).ok


def test_ring_output_mistakes():
    outs, lses, _, _ = _steps()
    for answer, phrase in [(outs.mean(0), "plain average"), (outs.sum(0), "sum of the steps"),
                           (outs[-1], "last step"), (outs[0], "own shard")]:
        fb = check_ring_output(answer, outs, lses)
        assert not fb.ok and phrase in fb.message, fb.message
    w = lses.exp()
    fb = check_ring_output((w * outs).sum(0) / w.sum(0), outs, lses)
    assert not fb.ok and "NaN" in fb.message, fb.message
    assert "empty" in check_ring_output(..., outs, lses).message


def test_contiguous_work():
    T, P = 32, 4
    right = visible_scores(T, P, "contiguous")
    assert check_contiguous_work(right, T, P).ok
    c = T // (2 * P)
    for answer, phrase in [(visible_scores(T, P, "zigzag"), "zigzag"),
                           ([r - 2 * c for r in right], "without its diagonal"),
                           ([r + c * (c - 1) for r in right], "counted whole"),
                           ([T * T / (2 * P)] * P, "average")]:
        fb = check_contiguous_work(answer, T, P)
        assert not fb.ok and phrase in fb.message, fb.message
