"""Ring attention equals the explicit module: real gloo processes on 127.0.0.1, and simulated.

Each world size starts its processes once and runs every case inside (a start costs seconds).
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

from attnbook import AttentionLayer
from attnbook.ring import (
    chunk_ids,
    ring_attention,
    shard,
    shard_inputs,
    simulate_ring,
    spawn_ring,
    unshard,
    visible_scores,
)

ATOL = 1e-10


def _explicit(q, k, v, pad, causal, dout):
    """Outputs and gradients of ``Attention.attend`` on the whole sequence (float64)."""
    attn = AttentionLayer(q.size(-1), q.size(-2)).double()
    if not causal:
        attn.mask.zero_()  # nothing in the future is blocked
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = attn.attend(q, k, v, pad)[0]
    out.backward(dout)
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def _padding(kind: str, B: int, T: int, P: int) -> torch.Tensor | None:
    """None, left or right padding, or left padding that empties the whole first chunk."""
    if kind == "none":
        return None
    pad = torch.ones(B, T, dtype=torch.bool)
    if kind == "left":
        pad[0, : T // 3] = False
    elif kind == "right":
        pad[-1, T - T // 3 :] = False
    elif kind == "first_block":
        pad[:, : -(-T // (2 * P)) + 1] = False  # chunk 0 (rank 0's) and a bit more: empty rows
    return pad


def _cases(P: int) -> list[dict]:
    g = torch.Generator().manual_seed(P)
    cases = []
    for layout, kernel in [("contiguous", "tiled"), ("zigzag", "tiled"),
                           ("contiguous", "fused"), ("zigzag", "fused")]:
        for T, pad_kind, causal, heads in [
            (4 * P, "none", True, 0),  # a multiple of 2P: no end padding
            (4 * P + 3, "none", True, 0),  # T not divisible by P: masked keys at the end
            (4 * P + 1, "left", True, 0),
            (4 * P, "right", True, 0),
            (4 * P + 2, "first_block", True, 0),
            (3 * P + 1, "right", False, 0),  # no causal mask: every pair of chunks works
            (4 * P - 1, "left", True, 2),  # many heads: (B, h, T, d_h)
        ]:
            B, d = 2, 3
            shape = (B, heads, T, d) if heads else (B, T, d)
            q, k, v, dout = (torch.randn(shape, dtype=torch.float64, generator=g)
                             for _ in range(4))
            cases.append(dict(q=q, k=k, v=v, dout=dout, padding_mask=_padding(pad_kind, B, T, P),
                              causal=causal, layout=layout, block_size=2, kernel=kernel,
                              name=f"{layout}, {kernel}, T={T}, {pad_kind}, causal={causal}, "
                                   f"h={heads}"))
    return cases


@pytest.mark.parametrize("P", [2, 4])
def test_gloo_ring_equals_explicit(P):
    cases = _cases(P)
    results = spawn_ring(cases, world=P)
    for case, got in zip(cases, results):
        want = _explicit(case["q"], case["k"], case["v"], case["padding_mask"], case["causal"],
                         case["dout"])
        for name in ("out", "dq", "dk", "dv"):
            assert torch.isfinite(got[name]).all(), (case["name"], name)
            torch.testing.assert_close(got[name], want[name], atol=ATOL, rtol=0,
                                       msg=f"{name} differs: {case['name']}")
        pad = case["padding_mask"]
        if pad is not None and case["causal"]:  # queries with no real key at or before them
            empty = ~pad.cumsum(-1).bool()  # (B, T)
            for name in ("out", "dq"):
                rows = got[name] if got[name].dim() == 3 else got[name].transpose(1, 2)
                assert (rows[empty] == 0).all(), (case["name"], name)


def test_one_rank_in_process():
    """P = 1 in this very process: a world group of one, no messages, the same answer."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    try:
        case = _cases(1)[2]
        q, k, v, pad = shard_inputs(case["q"], case["k"], case["v"], case["padding_mask"], 0, 1)
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        out = ring_attention(q, k, v, pad, block_size=2)
        out.backward(shard(case["dout"], 0, 1))
        want = _explicit(case["q"], case["k"], case["v"], case["padding_mask"], True,
                         case["dout"])
        T = case["q"].size(-2)
        for name, got in [("out", out.detach()), ("dq", q.grad), ("dk", k.grad),
                          ("dv", v.grad)]:
            torch.testing.assert_close(unshard([got], T), want[name], atol=ATOL, rtol=0)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("P", [1, 2, 3, 5])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_simulated_ring_equals_explicit(P, layout):
    g = torch.Generator().manual_seed(P)
    for T in (1, 2 * P, 2 * P + 1, 5 * P + 3):
        q, k, v = (torch.randn(2, T, 4, dtype=torch.float64, generator=g) for _ in range(3))
        pad = torch.ones(2, T, dtype=torch.bool)
        pad[0, : T // 2] = False  # left padding: empty rows
        for causal in (True, False):
            got = simulate_ring(q, k, v, pad, world=P, layout=layout, causal=causal,
                                block_size=3)
            attn = AttentionLayer(4, T).double()
            if not causal:
                attn.mask.zero_()
            torch.testing.assert_close(got, attn.attend(q, k, v, pad)[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_shard_then_unshard_is_the_identity(layout):
    x = torch.arange(2 * 11 * 3).view(2, 11, 3)
    for P in (1, 2, 3, 4):
        parts = [shard(x, r, P, layout) for r in range(P)]
        assert len({p.shape for p in parts}) == 1  # every rank holds the same length
        assert torch.equal(unshard(parts, 11, layout), x)


def test_layouts_hold_every_chunk_once():
    for P in (1, 2, 3, 4):
        for layout in ("contiguous", "zigzag"):
            held = sorted(c for r in range(P) for c in chunk_ids(r, P, layout))
            assert held == list(range(2 * P))
    assert chunk_ids(0, 4, "zigzag") == (0, 7)
    with pytest.raises(ValueError, match="layout"):
        chunk_ids(0, 2, "striped")


def test_work_per_rank():
    T = 64
    for P in (1, 2, 4):
        for layout in ("contiguous", "zigzag"):
            assert sum(visible_scores(T, P, layout)) == T * (T + 1) // 2
        assert len(set(visible_scores(T, P, "zigzag"))) == 1  # zigzag: exactly balanced
    contiguous = visible_scores(T, 4, "contiguous")
    assert contiguous == sorted(contiguous) and contiguous[-1] > 6 * contiguous[0]
    assert visible_scores(T, 4, causal=False) == [T * T // 4] * 4


def test_pytorch_context_parallel_uses_the_zigzag_layout_and_all_gather():
    """What the chapter says of PyTorch's context-parallel API (torch.distributed.tensor)."""
    from torch.distributed.tensor.experimental import _attention as cp  # private: pinned here

    assert callable(cp.context_parallel)
    T, P = 16, 4
    order = cp._HeadTailLoadBalancer(T, P, "cpu")._generate_indices()[0]  # load-balanced order
    ours = torch.cat([shard(torch.arange(T)[:, None], r, P, "zigzag")[:, 0] for r in range(P)])
    assert torch.equal(order.long(), ours)
    assert cp._cp_options.enable_load_balance  # on by default
    assert cp._cp_options.rotate_method == cp._RotateMethod.ALL_GATHER  # "alltoall": a ring


def test_every_transfer_is_waited_on_after_the_next_compute(monkeypatch):
    """One rank of a faked ring of four: keys/values and dK/dV are posted before a step's
    compute and waited on after it, so no transfer sits between two computes."""
    import attnbook.ring as ring

    P, log, kv_buffers = 4, [], set()
    monkeypatch.setattr(ring.dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(ring.dist, "get_world_size", lambda group=None: P)

    class Work:
        def __init__(self, n):
            self.n = n

        def wait(self):
            log.append(("wait", self.n))

    def fake_pass_on(tensors, group):
        kind = "kv" if tensors[0].data_ptr() in kv_buffers else "grads"
        arriving = [t.clone() for t in tensors]
        if kind == "kv":
            kv_buffers.update(t.data_ptr() for t in arriving)
        n = sum(1 for e in log if e[0] == "post")
        log.append(("post", n, kind))
        return arriving, [Work(n)]

    def logged(fn, name):
        def wrapper(*args, **kwargs):
            log.append((name,))
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(ring, "pass_on", fake_pass_on)
    monkeypatch.setattr(ring, "shard_grads", logged(ring.shard_grads, "compute"))
    q, k, v, dout = (torch.randn(1, 8, 3, dtype=torch.float64) for _ in range(4))
    kv_buffers.update((k.data_ptr(), v.data_ptr()))
    out, lse = ring.tiled_attention_forward(q, k, v, None, False, 4)
    ring.ring_attention_backward(dout, q, k, v, out, lse, None, False, "zigzag", None, 4,
                                 "tiled")
    computes = [i for i, e in enumerate(log) if e == ("compute",)]
    posts = [e for e in log if e[0] == "post"]
    assert len(computes) == P
    assert [e[2] for e in posts].count("grads") == P  # P passes: the last one goes home
    assert [e[2] for e in posts].count("kv") == P - 1
    for i, e in enumerate(log):
        if e[0] == "post":
            waited = log.index(("wait", e[1]))
            later = [c for c in computes if c > i]
            if later:  # the next step's compute runs between posting and waiting
                assert later[0] < waited, (e, log)


def test_a_rank_holds_at_most_three_key_value_shards(monkeypatch):
    """On a faked ring of four: while a step computes, the rank holds its own K, V (the caller
    keeps them), the shard in hand and the one arriving; no older shard stays alive."""
    import weakref

    import attnbook.ring as ring

    P, alive, held_counts = 4, [], []
    monkeypatch.setattr(ring.dist, "get_rank", lambda group=None: 2)
    monkeypatch.setattr(ring.dist, "get_world_size", lambda group=None: P)

    def fake_pass_on(tensors, group):
        arriving = [t.clone() for t in tensors]
        alive.append(weakref.ref(arriving[0]))  # one key shard per pair
        return arriving, []

    def counting_fold(*args, **kwargs):
        held_counts.append(1 + sum(r() is not None for r in alive))  # + the caller's own
        return fold(*args, **kwargs)

    fold = ring.fold_shard
    monkeypatch.setattr(ring, "pass_on", fake_pass_on)
    monkeypatch.setattr(ring, "fold_shard", counting_fold)
    q, k, v = (torch.randn(1, 8, 3, dtype=torch.float64) for _ in range(3))
    ring.ring_attention_forward(q, k, v, None, True, "zigzag", None, 4, "tiled")
    assert held_counts == [2, 3, 3, 2]  # three at steps 1 .. P - 2
