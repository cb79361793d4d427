"""The traces behind Labs 17 and 18's steppers add up to what the tiled functions compute."""

import math

import matplotlib
import pytest
import torch

from attnbook import Attention
from attnbook.lab.tile_trace import (
    backward_alt,
    forward_alt,
    forward_errors,
    show_backward_step,
    show_forward_step,
    tile_kind,
    trace_backward,
    trace_forward,
)
from attnbook.online import tiled_attention, tiled_attention_backward, tiled_attention_forward

matplotlib.use("Agg")

T, d, BLOCK = 14, 6, 4  # T not a multiple of the block: a ragged last tile


@pytest.fixture
def qkv():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(T, d, dtype=torch.float64, generator=g) for _ in range(3))


@pytest.fixture
def pad():
    mask = torch.ones(T, dtype=torch.bool)
    mask[:2] = False  # queries 0 and 1 see no real key: empty rows
    mask[9] = False
    return mask


def explicit(q, k, v, pad=None, causal=True):
    attn = Attention(d, T).double()
    if not causal:
        attn.mask.zero_()
    return attn.attend(q[None], k[None], v[None], None if pad is None else pad[None])[0][0]


@pytest.mark.parametrize("causal", [True, False])
def test_last_partial_output_is_the_output(qkv, pad, causal):
    q, k, v = qkv
    trace = trace_forward(q, k, v, pad, causal=causal, block_size=BLOCK)
    out = tiled_attention(q[None], k[None], v[None], pad[None], causal=causal,
                          block_size=BLOCK)[0]
    ref = explicit(q, k, v, pad, causal)
    assert torch.equal(trace.out, out)
    for i in range(math.ceil(T / BLOCK)):
        last = trace.program(i)[-1]
        assert torch.equal(trace.partial(last), out[last["i0"]:last["i1"]])
        assert forward_errors(trace, ref, i)[-1] < 1e-12
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)


def test_running_max_and_sum_end_at_the_log_sum_exp(qkv):
    q, k, v = qkv
    trace = trace_forward(q, k, v, block_size=BLOCK)
    scores = (q @ k.T) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    m = torch.cat([trace.program(i)[-1]["m"] for i in range(math.ceil(T / BLOCK))])
    l = torch.cat([trace.program(i)[-1]["l"] for i in range(math.ceil(T / BLOCK))])
    torch.testing.assert_close(m, scores.amax(-1), atol=1e-12, rtol=0)
    torch.testing.assert_close(l, torch.exp(scores - m[:, None]).sum(-1), atol=1e-12, rtol=0)
    torch.testing.assert_close(m + torch.log(l), trace.lse, atol=1e-12, rtol=0)
    torch.testing.assert_close(trace.lse, torch.logsumexp(scores, -1), atol=1e-12, rtol=0)


def test_the_loop_visits_the_causal_tiles_in_order(qkv):
    q, k, v = qkv
    trace = trace_forward(q, k, v, block_size=BLOCK)
    n = math.ceil(T / BLOCK)
    visited = [(s["i0"] // BLOCK, s["j0"] // BLOCK) for s in trace.steps]
    assert visited == [(I, J) for I in range(n) for J in range(I + 1)]
    for s in trace.steps:  # the diagonal tiles are the masked ones, nothing is skipped
        kind = tile_kind(s["i0"], s["i1"], s["j0"], s["j1"], True)
        assert kind != "skipped" and s["masked"] == (kind == "diagonal")
    assert tile_kind(0, 4, 4, 8, True) == "skipped" and tile_kind(0, 4, 4, 8, False) == "full"


@pytest.mark.parametrize("causal", [True, False])
def test_recorded_contributions_sum_to_autograds_gradients(qkv, pad, causal):
    q, k, v = qkv
    dout = torch.randn(T, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    trace = trace_backward(q, k, v, dout, pad, causal=causal, block_size=BLOCK)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = torch.autograd.grad(explicit(*leaves, pad, causal), leaves, dout)
    summed = trace.accumulated(len(trace.steps))
    for got, function, want in zip(summed, (trace.dq, trace.dk, trace.dv), ref):
        torch.testing.assert_close(got, function, atol=1e-13, rtol=0)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    out = explicit(q, k, v, pad, causal)
    torch.testing.assert_close(trace.D, (dout * out).sum(-1), atol=1e-12, rtol=0)
    assert all(torch.equal(g, torch.zeros_like(g)) for g in trace.accumulated(0))
    # The kernel's order: key block outside, query blocks inside.
    order = [(s["j0"], s["i0"]) for s in trace.steps]
    assert order == sorted(order)


def test_record_changes_nothing(qkv):
    q, k, v = (t[None] for t in qkv)
    record: list = []
    plain = tiled_attention_forward(q, k, v, None, True, BLOCK)
    recorded = tiled_attention_forward(q, k, v, None, True, BLOCK, record=record)
    assert all(torch.equal(a, b) for a, b in zip(plain, recorded))
    dout = torch.ones_like(plain[0])
    grads = tiled_attention_backward(dout, q, k, v, *plain, None, True, BLOCK)
    record = []
    again = tiled_attention_backward(dout, q, k, v, *plain, None, True, BLOCK, record=record)
    assert all(torch.equal(a, b) for a, b in zip(grads, again))
    assert record[0]["step"] == "D" and all(r["step"] == "tile" for r in record[1:])


def test_bad_shapes_are_named(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"\(T, d\)"):
        trace_forward(q[None], k[None], v[None])
    with pytest.raises(ValueError, match=r"padding_mask must be \(T_k,\)"):
        trace_forward(q, k, v, torch.ones(1, T, dtype=torch.bool))
    with pytest.raises(ValueError, match="dout must be"):
        trace_backward(q, k, v, torch.zeros(T, d + 1, dtype=torch.float64))


def test_views_draw_and_say_what_they_show(qkv):
    import matplotlib.pyplot as plt

    q, k, v = qkv
    trace = trace_forward(q, k, v, block_size=BLOCK)
    ref = explicit(q, k, v)
    assert "skipped" in forward_alt(trace, ref, 0, 2)
    assert "running maximum m" in forward_alt(trace, ref, 2, 1).lower()
    show_forward_step(trace, ref, 2, 1)
    dout = torch.ones(T, d, dtype=torch.float64)
    btrace = trace_backward(q, k, v, dout, block_size=BLOCK)
    grads = (btrace.dq, btrace.dk, btrace.dv)
    assert "D = rowsum" in backward_alt(btrace, grads, 0)
    assert "atomic add" in backward_alt(btrace, grads, 3)
    show_backward_step(btrace, grads, 3)
    with pytest.raises(ValueError, match="between 0 and"):
        btrace.accumulated(len(btrace.steps) + 1)
    plt.close("all")
