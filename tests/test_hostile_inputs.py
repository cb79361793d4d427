"""Bad input to the lab helpers gets an error that names what was expected.

Each case is an input a student, an instructor or a Colab user could pass to the traces of
Labs 15, 17 and 18, the roofline counts of Lab 16, Flash-Decoding's partials of Lab 19 or the
timing helpers: wrong dimensions or shapes, sizes that are zero, negative or not whole, other
dtypes, tensors on two devices (``meta`` stands in for a second device), NaN or infinity,
unknown options. Before these checks they ended in an IndexError or a shape error deep in
PyTorch, or in a silently wrong result (zeros, a view of a step that does not exist, NaN in
an alt text); a rejected ``compare`` left PyTorch on one thread. The last tests pin the inputs
that must keep working.
"""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook.gpu.decoding import flash_decoding, merge_partials, split_partials  # noqa: E402
from attnbook.gpu.io_cost import H100, decoding_bytes, flash_flops, flash_io, standard_io  # noqa: E402
from attnbook.gpu.roofline import KernelCount, count_kernel, draw_roofline, png_bytes  # noqa: E402
from attnbook.lab.measure import LiveTensorBytes, Timing, best_time, compare, timings  # noqa: E402
from attnbook.lab.ring_trace import (  # noqa: E402
    describe_step,
    draw_ring_step,
    step_work_figure,
    trace_ring,
)
from attnbook.lab.tile_trace import (  # noqa: E402
    backward_alt,
    draw_tiles,
    forward_alt,
    forward_errors,
    show_backward_step,
    show_forward_step,
    trace_backward,
    trace_forward,
)
from attnbook.ring import ring_attention, simulate_ring, simulate_ring_grads  # noqa: E402

F64 = torch.float64


def rand(*shape, dtype=F64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(len(shape)))


def with_value(t, value):
    t = t.clone()
    t.view(-1)[0] = value
    return t


# Ring (Lab 15): q, k, v, dout of one sequence, (B, T, d) = (2, 8, 3), P = 2.
RQ = rand(2, 8, 3)
RING = dict(world=2, block_size=2)


def ring(q=RQ, k=RQ, v=RQ, dout=RQ, pad=None, **kw):
    return lambda: trace_ring(q, k, v, dout, pad, **{**RING, **kw})


RING_CASES = {
    "q 2-D": (ring(RQ[0], RQ[0], RQ[0], RQ[0]), ValueError, r"all be \(B, T, d\)"),
    "k shorter than q": (ring(k=RQ[:, :5]), ValueError, "k must have q's shape"),  # was silent
    "dout shorter": (ring(dout=RQ[:, :5]), ValueError, "dout the output's shape"),  # was silent
    "k wider than q": (ring(k=rand(2, 8, 4)), ValueError, "k must have q's shape"),
    "grouped heads": (ring(rand(1, 4, 8, 3), rand(1, 2, 8, 3), rand(1, 2, 8, 3),
                           rand(1, 4, 8, 3)), ValueError, "as many key/value heads"),
    "world 0": (ring(world=0), ValueError, "world >= 1"),
    "world 2.0": (ring(world=2.0), TypeError, "world must be a whole number"),
    "block_size -1": (ring(block_size=-1), ValueError, "block_size >= 1"),  # was zeros
    "block_size 2.5": (ring(block_size=2.5), TypeError, "block_size must be a whole"),
    "causal 'no'": (ring(causal="no"), TypeError, "causal must be True or False"),
    "kernel foo": (ring(kernel="foo"), ValueError, "kernel must be one of"),
    "layout foo": (ring(layout="foo"), ValueError, "layout must be one of"),
    "int64": (ring(*(t.long() for t in (RQ,) * 4)), TypeError, "one floating dtype"),
    "dout float32": (ring(dout=RQ.float()), TypeError, "one floating dtype"),
    "fused float16": (ring(*(t.half() for t in (RQ,) * 4), kernel="fused"), ValueError,
                      "kernel='tiled'"),
    "k on meta": (ring(k=RQ.to("meta")), ValueError, "on one device"),
    "NaN in q": (ring(with_value(RQ, math.nan)), ValueError, "q contains NaN"),
    "inf in v": (ring(v=with_value(RQ, math.inf)), ValueError, "v contains an infinity"),
    "T = 0": (ring(*(RQ[:, :0],) * 4), ValueError, r"at least one token"),
    "mask (T,)": (ring(pad=torch.ones(8, dtype=torch.bool)), ValueError, r"\(B, T\) = \(2, 8\)"),
    "mask int": (ring(pad=torch.ones(2, 8, dtype=torch.long)), TypeError, "torch.bool"),
    "mask shorter": (ring(pad=torch.ones(2, 5, dtype=torch.bool)), ValueError, "shape"),
}

# Tiles (Labs 17, 18): one sequence, one head, (T, d) = (6, 3).
TQ = rand(6, 3)


def fwd(q=TQ, k=TQ, v=TQ, pad=None, **kw):
    return lambda: trace_forward(q, k, v, pad, **{"block_size": 2, **kw})


def bwd(q=TQ, k=TQ, v=TQ, dout=TQ, pad=None, **kw):
    return lambda: trace_backward(q, k, v, dout, pad, **{"block_size": 2, **kw})


TILE_CASES = {
    "causal T_k < T_q": (fwd(k=TQ[:4], v=TQ[:4]), ValueError, "the same length"),
    "v shorter than k": (fwd(v=TQ[:4]), ValueError, r"v \(T_k, d_v\) with k's T_k = 6"),
    "k wider than q": (bwd(k=rand(6, 4)), ValueError, "q's head width d = 3"),
    "block_size 2.5": (fwd(block_size=2.5), TypeError, "block_size must be a whole"),
    "block_size True": (bwd(block_size=True), TypeError, "block_size must be a whole"),
    "causal 'x'": (fwd(causal="x"), TypeError, "causal must be True or False"),
    "int64": (fwd(*(TQ.long(),) * 3), TypeError, "one floating dtype"),  # was an int output
    "float32 with float64": (fwd(TQ.float()), TypeError, "one floating dtype"),
    "dout float32": (bwd(dout=TQ.float()), TypeError, "one floating dtype"),
    "k on meta": (bwd(k=TQ.to("meta")), ValueError, "one device"),
    "all on meta": (bwd(*(TQ.to("meta"),) * 4), ValueError, "not meta"),
    "NaN in k": (fwd(k=with_value(TQ, math.nan)), ValueError, "k contains NaN"),
    "inf in dout": (bwd(dout=with_value(TQ, -math.inf)), ValueError, "dout contains an inf"),
    "T = 0": (fwd(*(TQ[:0],) * 3), ValueError, "at least one query"),
    "d = 0": (bwd(*(TQ[:, :0],) * 4), ValueError, "head width d >= 1"),
    "mask float": (fwd(pad=torch.ones(6)), TypeError, "torch.bool"),
    "mask list": (bwd(pad=[True] * 6), TypeError, r"bool tensor \(T_k,\)"),
    "q a list": (fwd([[1.0]]), TypeError, "q must be a torch.Tensor"),
}

FT = trace_forward(TQ, TQ, TQ, block_size=2)  # 3 x 3 blocks
BT = trace_backward(TQ, TQ, TQ, TQ, block_size=2)  # 6 tiles
GRADS = (BT.dq, BT.dk, BT.dv)

VIEW_CASES = {
    "forward_alt i = -1": (lambda: forward_alt(FT, FT.out, -1, 0), ValueError, "i >= 0"),
    "forward_alt i = 3": (lambda: forward_alt(FT, FT.out, 3, 0), ValueError, "between 0 and 2"),
    "forward_alt j = -1": (lambda: forward_alt(FT, FT.out, 1, -1), ValueError,
                           "j >= 0"),  # was a view of "tile 0"
    "forward_alt j = 9": (lambda: forward_alt(FT, FT.out, 0, 9), ValueError, "between 0 and 2"),
    "forward_alt exact batched": (lambda: forward_alt(FT, FT.out[None], 1, 0), ValueError,
                                  r"exact must be the exact output \(T_q, d_v\) = \(6, 3\)"),
    "forward_errors i = 9": (lambda: forward_errors(FT, FT.out, 9), ValueError, "between"),
    "show_forward_step i = 1.0": (lambda: show_forward_step(FT, FT.out, 1.0, 0), TypeError,
                                  "query block i must be a whole"),
    "show_forward_step rows = 0": (lambda: show_forward_step(FT, FT.out, 0, 0, rows=0),
                                   ValueError, "rows >= 1"),
    "backward_alt n = 7": (lambda: backward_alt(BT, GRADS, 7), ValueError, "between 0 and 6"),
    "backward_alt two grads": (lambda: backward_alt(BT, GRADS[:2], 2), ValueError,
                               r"three gradients \(dQ, dK, dV\)"),
    "show_backward_step n = -1": (lambda: show_backward_step(BT, GRADS, -1), ValueError,
                                  "n >= 0"),  # was a figure of the wrong step
    "accumulated 1.5": (lambda: BT.accumulated(1.5), TypeError, "step n must be a whole"),
    "draw_tiles block 0": (lambda: draw_tiles(plt.figure().add_subplot(), 4, 4, 0), ValueError,
                           "block >= 1"),
}

RT = trace_ring(rand(1, 8, 2), rand(1, 8, 2), rand(1, 8, 2), rand(1, 8, 2), world=2,
                block_size=4)

RING_VIEW_CASES = {
    "describe pass 'Forward'": (lambda: describe_step(RT, 0, "Forward"), ValueError,
                                "pass_ must be one of"),  # was a text of no pass
    "describe step -1": (lambda: describe_step(RT, -1), ValueError, "step >= 0"),
    "draw step 1.5": (lambda: draw_ring_step(RT, 1.5), TypeError, "step must be a whole"),
    "draw with ax": (lambda: draw_ring_step(RT, 0, ax=object()), ValueError, "without ax"),
    "work pass foo": (lambda: RT.work("foo"), ValueError, "pass_ must be one of"),
    "step_work_figure {}": (lambda: step_work_figure({}), TypeError, "non-empty dict"),
    "step_work_figure list": (lambda: step_work_figure([RT]), TypeError, "non-empty dict"),
    "step_work_figure pass": (lambda: step_work_figure({"z": RT}, "x"), ValueError, "pass_"),
}

COUNT = count_kernel("fused", 64, 8)

ROOFLINE_CASES = {
    "T 64.0": (lambda: count_kernel("fused", 64.0, 8), TypeError, "T must be a whole number"),
    "g 2.5": (lambda: count_kernel("fused", 64, 8, g=2.5), TypeError, "g must be a whole"),
    "d '8'": (lambda: count_kernel("decode", 64, "8"), TypeError, "d must be a whole"),
    "block 0": (lambda: count_kernel("fused", 64, 8, block=0), ValueError, "block >= 1"),
    "kernel foo": (lambda: count_kernel("foo", 64, 8), ValueError, "kernel must be one of"),
    "dtype int8": (lambda: count_kernel("fused", 64, 8, dtype=torch.int8), TypeError,
                   "floating torch.dtype"),
    "dtype 'float16'": (lambda: count_kernel("fused", 64, 8, dtype="float16"), TypeError,
                        "floating torch.dtype"),
    "KernelCount 0 bytes": (lambda: KernelCount("fused", 1, 1, 1, 10, 0), ValueError,
                            "bytes >= 1"),
    "KernelCount kernel foo": (lambda: KernelCount("foo", 1, 1, 1, 10, 10), ValueError,
                               "kernel must be one of"),
    "draw one count": (lambda: draw_roofline(COUNT, H100), TypeError, r"\[count\]"),
    "draw a dict": (lambda: draw_roofline({"fused": COUNT}, H100), TypeError, "values"),
    "draw a list of names": (lambda: draw_roofline(["fused"], H100), TypeError, "got str"),
    "draw gpu 'H100'": (lambda: draw_roofline([COUNT], "H100"), TypeError, "gpu must be a GPU"),
    "describe on 'T4'": (lambda: COUNT.describe("T4"), TypeError, "gpu must be a GPU"),
    "draw highlight foo": (lambda: draw_roofline([COUNT], H100, highlight="foo"), ValueError,
                           "highlight must be None or"),  # was nothing highlighted
    "png colors 300": (lambda: png_bytes(plt.figure(), 20, colors=300), ValueError, "256"),
    "png not a figure": (lambda: png_bytes(None, 20), TypeError, "matplotlib Figure"),
}

# Flash-Decoding (Lab 19): one query per (sequence, head), g = 2.
DQ, DK = rand(2, 4, 1, 4, dtype=torch.float32), rand(2, 2, 9, 4, dtype=torch.float32)
OUTS, LSES = split_partials(DQ, DK, DK, n_split=3)


def split(q=DQ, k=DK, v=DK, pad=None, **kw):
    return lambda: split_partials(q, k, v, pad, **kw)


DECODING_CASES = {
    "n_split 2.5": (split(n_split=2.5), TypeError, "n_split must be a whole"),
    "n_split True": (split(n_split=True), TypeError, "n_split must be a whole"),
    "NaN in q": (split(with_value(DQ, math.nan)), ValueError, "q contains NaN"),
    "inf in k": (split(k=with_value(DK, math.inf)), ValueError, "k contains an infinity"),
    "d = 0": (split(DQ[..., :0], DK[..., :0], DK[..., :0]), ValueError, "head width d"),
    "mask int": (split(pad=torch.ones(2, 9, dtype=torch.long)), TypeError, "torch.bool"),
    "q a list": (split([1.0]), TypeError, "q must be a torch.Tensor"),
    "merge lses without its 1": (lambda: merge_partials(OUTS, LSES[..., 0]), ValueError,
                                 r"lses \(S, ..., 1\)"),
    "merge swapped": (lambda: merge_partials(LSES, OUTS), ValueError, "lses"),  # was silent
    "merge NaN lse": (lambda: merge_partials(OUTS, with_value(LSES, math.nan)), ValueError,
                      "NaN or \\+inf"),
    # Rejected before Triton is loaded: no interpreter run.
    "flash_decoding block_n 0": (lambda: flash_decoding(DQ, DK, DK, block_n=0), ValueError,
                                 "block_n >= 1"),  # was the default, silently
    "flash_decoding block_n 24": (lambda: flash_decoding(DQ, DK, DK, block_n=24), ValueError,
                                  "power of 2"),
    "flash_decoding n_split 1.5": (lambda: flash_decoding(DQ, DK, DK, n_split=1.5), TypeError,
                                   "n_split must be a whole"),
    "flash_decoding mask float": (lambda: flash_decoding(DQ, DK, DK, torch.ones(2, 9)),
                                  TypeError, "torch.bool"),
    "flash_decoding partials 'yes'": (lambda: flash_decoding(DQ, DK, DK, return_partials="yes"),
                                      TypeError, "return_partials must be True or False"),
}


def nothing():
    return None


MEASURE_CASES = {
    "repeats 2.5": (lambda: compare({"a": nothing}, repeats=2.5), TypeError, "repeats must be"),
    "repeats True": (lambda: compare({"a": nothing}, repeats=True), TypeError, "repeats must"),
    "warmup -1": (lambda: compare({"a": nothing}, warmup=-1), ValueError, "warmup >= 0"),
    "threads 0": (lambda: compare({"a": nothing}, threads=0), ValueError, "threads >= 1"),
    "budget nan": (lambda: compare({"a": nothing}, budget_s=math.nan), ValueError, "budget_s"),
    "budget -1": (lambda: compare({"a": nothing}, budget_s=-1), ValueError, "budget_s"),
    "no calls": (lambda: compare({}), ValueError, "at least one call"),
    "a list of calls": (lambda: compare([nothing]), TypeError, "fns must be a dict"),
    "a result, not a call": (lambda: compare({"a": 3.0}), TypeError, "wrap the call in a lambda"),
    "timings of a value": (lambda: timings(torch.ones(2)), TypeError, "lambda"),
    "best_time repeats 0": (lambda: best_time(nothing, repeats=0), ValueError, "repeats >= 1"),
    "LiveTensorBytes of a tensor": (lambda: LiveTensorBytes.of(torch.ones(2)), TypeError,
                                    "lambda: f"),
    "Timing of no times": (lambda: Timing([]), ValueError, "at least one timed repeat"),
}

CASES = {f"{group}: {name}": case for group, cases in [
    ("trace_ring", RING_CASES), ("tile traces", TILE_CASES), ("tile views", VIEW_CASES),
    ("ring views", RING_VIEW_CASES), ("roofline", ROOFLINE_CASES),
    ("decoding", DECODING_CASES), ("measure", MEASURE_CASES)] for name, case in cases.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_named(name):
    call, error, message = CASES[name]
    try:
        with pytest.raises(error, match=message):
            call()
    finally:
        plt.close("all")


def test_a_rejected_compare_leaves_the_threads_as_they_were():
    before = torch.get_num_threads()
    with pytest.raises(TypeError):
        compare(nothing, threads=before + 1)  # a function, not a dict: used to keep 1 thread
    assert torch.get_num_threads() == before


def test_pytorchs_cpu_flash_backward_takes_no_half_precision():
    """What pick_kernel's "fused float16" message says of PyTorch (if this fails, PyTorch
    changed: the refusal in attnbook.ring.pick_kernel can go, and "auto" can pick "fused")."""
    from attnbook.ring import attend_pair, pair_grads

    q = rand(1, 8, 2).half()
    out, lse = attend_pair(q, q, q, None, True, 4, "fused")  # the forward runs
    with pytest.raises(RuntimeError, match="expected scalar type Float"):
        pair_grads(q, q, q, q, out, lse, None, True, 4, "fused")
    with pytest.raises(ValueError, match="kernel='tiled' or 'auto'"):
        simulate_ring_grads(q, q, q, q, world=2, kernel="fused")
    out, *grads = simulate_ring_grads(q, q, q, q, world=2)  # "auto": the tiled loop
    assert all(torch.isfinite(t).all() for t in (out, *grads))


def test_inputs_that_must_keep_working():
    # Ring: T not a multiple of 2P, more ranks than tokens, a block larger than T, an empty
    # batch, a value width other than d, float16 through the tiled kernel.
    for q, k, v, world, block in [(RQ[:, :7], RQ[:, :7], RQ[:, :7], 2, 2),
                                  (RQ, RQ, RQ, 5, 100), (RQ[:0], RQ[:0], RQ[:0], 2, 2),
                                  (RQ, RQ, rand(2, 8, 5), 2, 2)]:
        trace = trace_ring(q, k, v, torch.ones_like(v), world=world, block_size=block)
        assert trace.out.shape == v.shape
    half = RQ.half()
    assert torch.isfinite(trace_ring(half, half, half, half, world=2).out).all()
    assert "does not occur" in describe_step(RT, 5)  # a step past the ring's last: a view
    # Tiles: non-causal with fewer keys, float16, a block larger than T, an empty mask row.
    assert trace_forward(TQ, TQ[:4], TQ[:4], causal=False).out.shape == (6, 3)
    assert trace_forward(TQ.half(), TQ.half(), TQ.half()).out.dtype == torch.float16
    assert len(trace_forward(TQ, TQ, TQ, block_size=100).steps) == 1
    pad = torch.zeros(6, dtype=torch.bool)
    empty = trace_backward(TQ, TQ, TQ, TQ, pad, block_size=2)  # all gradients zero
    text = backward_alt(empty, (empty.dq, empty.dk, empty.dv), 3)
    assert "nan" not in text and "dQ 0.00" in text  # was 0 / 0 = nan
    assert "skipped" in forward_alt(FT, FT.out, 0, 2)  # a future key block: a view
    # Decoding: more splits than keys, no keys, no real key.
    assert split_partials(DQ, DK, DK, n_split=20)[0].shape == (20, *DQ.shape)
    for outs, lses in (split_partials(DQ, DK[:, :, :0], DK[:, :, :0]),
                       split_partials(DQ, DK, DK, torch.zeros(2, 9, dtype=torch.bool))):
        assert not merge_partials(outs, lses).any()
    # Roofline: the counts may come from a generator (it was read once, by the check).
    ax = draw_roofline((c for c in [COUNT]), H100)
    assert [line.get_label() for line in ax.lines].count("point:fused") == 1
    # Timing: repeats below the clock's resolution.
    assert Timing([0.0, 0.0]).spread == 0 and "±0%" in str(Timing([0.0, 0.0]))
    assert Timing([0.0, 0.0, 1e-7]).spread == math.inf
    plt.close("all")


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: simulate_ring(RQ, RQ[:, :5], RQ, world=2), ValueError, "k must have q's shape"),
    (lambda: simulate_ring(RQ, RQ, RQ, world=0), ValueError, "world >= 1"),
    (lambda: simulate_ring(RQ.long(), RQ.long(), RQ.long(), world=2), TypeError, "floating"),
    (lambda: simulate_ring(RQ, RQ * math.nan, RQ, world=2), ValueError, "k contains NaN"),
    (lambda: simulate_ring_grads(RQ, RQ, RQ, RQ[:, :4], world=2), ValueError, "dout"),
    # The distributed ring checks shapes, dtypes and options before any communication (no
    # process group is needed to raise), but makes no pass over the values.
    (lambda: ring_attention(RQ, RQ[:, :5], RQ), ValueError, "k must have q's shape"),
    (lambda: ring_attention(RQ, RQ, RQ, block_size=0), ValueError, "block_size >= 1"),
    (lambda: ring_attention(RQ, RQ, RQ, kernel="cuda"), ValueError, "kernel must be one of"),
    (lambda: ring_attention(*(RQ.half(),) * 3, kernel="fused"), ValueError, "kernel='tiled'"),
])
def test_the_ring_names_what_it_expected(call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call()


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: flash_flops(64, 16, 0, 16), ValueError, "block_m >= 1"),
    (lambda: flash_io(-1, 16, 16, 16), ValueError, "N >= 1"),
    (lambda: flash_io(64.0, 16, 16, 16), TypeError, "N must be a whole number"),
    (lambda: standard_io(64, 0), ValueError, "d >= 1"),
    (lambda: decoding_bytes(1.5, 16), TypeError, "T must be a whole number"),
    (lambda: decoding_bytes(8, 16, g=True), TypeError, "g must be a whole number"),
    (lambda: flash_io(64, 16, 16, 16, causal="yes"), TypeError, "causal must be True or False"),
])
def test_io_counts_name_what_they_expected(call, error, words):
    with pytest.raises(error, match=re.escape(words)):
        call()
