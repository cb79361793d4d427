"""RoPE across devices: ring attention, each rank rotating by its shards' global positions."""

from __future__ import annotations

import pytest
import torch

from attnbook import AttentionLayer
from attnbook.positions import apply_rope
from attnbook.ring import rotate_shard, shard, shard_inputs, shard_positions, simulate_ring

F64 = torch.float64


def explicit_rope(q, k, v, padding_mask=None):
    T = q.size(-2)
    pos = torch.arange(T)
    attn = AttentionLayer(q.size(-1), T).to(F64)
    return attn.attend(apply_rope(q, pos), apply_rope(k, pos), v, padding_mask)[0]


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_shard_positions_are_the_global_ones(layout):
    T, world = 13, 3  # 2P = 6 chunks of 3: two padded positions at the end
    pos = torch.arange(T)
    for r in range(world):
        got = shard_positions(T, r, world, layout)
        assert got.shape == (6,)
        real = shard(torch.ones(T, dtype=torch.bool), r, world, layout, dim=-1)
        assert torch.equal(got[real], shard(pos, r, world, layout, dim=-1)[real])
    if layout == "zigzag":
        assert shard_positions(12, 0, 3, "zigzag").tolist() == [0, 1, 10, 11]


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("padded", [False, True])
def test_ring_equals_explicit_with_rope(layout, padded):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 13, 8, dtype=F64) for _ in range(3))
    pm = None
    if padded:
        pm = torch.ones(2, 13, dtype=torch.bool)
        pm[0, :4] = False
        pm[1, -3:] = False
    expected = explicit_rope(q, k, v, pm)
    got = simulate_ring(q, k, v, pm, world=3, layout=layout, block_size=2, rope_base=10000.0)
    real = torch.ones(2, 13, dtype=torch.bool) if pm is None else pm
    real = real & (pm.long().cumsum(-1) > 0 if pm is not None else real)  # rows that see a key
    torch.testing.assert_close(got.transpose(1, 2)[real], expected.transpose(1, 2)[real],
                               rtol=1e-10, atol=1e-10)
    # Rotating every shard by its local positions 0 .. 2c - 1 would be wrong:
    wrong = [shard_inputs(q, k, v, pm, r, 3, layout) for r in range(3)]
    local = torch.arange(wrong[0][0].size(-2))
    assert any(not torch.equal(apply_rope(w[0], local),
                               rotate_shard(w[0], w[1], 13, r, 3, layout)[0])
               for r, w in enumerate(wrong))
