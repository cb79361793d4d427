"""Checkers of the labs of Part VI (Labs 16 to 19): exercises as functions graded on hidden inputs.

Each right answer passes on every hidden case, each named mistake is recognised on the lab's
input, the practice check refuses the library function that would do the exercise, and an
answer fixed to the lab's input fails the second input.
"""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnbook.exercises import hidden_cases
from attnbook.exercises.gpu import (
    GRADED,
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
from attnbook.gpu.decoding import merge_partials, split_count
from attnbook.gpu.io_cost import standard_io

SEEDS = (0, 1, 20240601)


# The book's answers, written as a learner would (the notebooks' solution cells say the same).


def decode_intensity(T, d, g, bytes_per):
    return 4 * g * T * d / ((2 * T * d + 2 * g * d) * bytes_per)


def standard_accesses(N, d, n_extra):
    return 4 * N * d + (4 + 2 * n_extra) * N * N


def n_programs(B, h, h_kv, T_q, T_k, block_m):
    return -(-T_q // block_m) * B * h


def tiles_visited(T_q, T_k, block_m, block_n):
    """Brute force: every (query block, key block) whose first key some query of the block
    sees (query i at position i + T_k - T_q)."""
    return sum(1 for i0 in range(0, T_q, block_m) for j0 in range(0, T_k, block_n)
               if j0 <= min(i0 + block_m, T_q) - 1 + T_k - T_q)


def delta(dout, out, h):
    B, T, hd = out.shape
    d = hd // h
    return torch.stack([(dout[..., a * d:(a + 1) * d] * out[..., a * d:(a + 1) * d]).sum(-1)
                        for a in range(h)], dim=1)


def backward_ratio(d_qk, d_v):
    return (3 * d_qk + 2 * d_v) / (d_qk + d_v)


def merge_with_new(outs, lses, s_new, v_new):
    m = torch.maximum(lses.amax(0), s_new)
    w, w_new = (lses - m).exp(), (s_new - m).exp()
    return ((w * outs).sum(0) + w_new * v_new) / (w.sum(0) + w_new)


def n_splits(B, h, h_kv, T, n_sm, block_n):
    return max(1, min(-(-n_sm // (B * h_kv)), -(-T // block_n)))


ANSWERS = {"check_decode_intensity": decode_intensity, "check_standard_io": standard_accesses,
           "check_programs": n_programs, "check_tiles": tiles_visited, "check_delta": delta,
           "check_backward_ratio": backward_ratio, "check_merge": merge_with_new,
           "check_splits": n_splits}


@pytest.mark.parametrize("name", sorted(GRADED))
@pytest.mark.parametrize("seed", SEEDS)
def test_right_answers_pass_every_hidden_case(name, seed):
    spec = GRADED[name]
    assert spec.function == ANSWERS[name].__name__
    for case in hidden_cases(spec, seed):
        fb = spec.check(ANSWERS[name](*case.call), *case.check_args)
        assert fb.ok, (case.label, fb.message)


@pytest.mark.parametrize("name", sorted(GRADED))
def test_hidden_cases_are_saved_as_the_grader_loads_them(name, tmp_path):
    """torch.save, then torch.load(weights_only=True): tensors and plain numbers only."""
    cases = [c.call for c in hidden_cases(GRADED[name], 3)]
    torch.save(cases, tmp_path / "cases.pt")
    assert len(torch.load(tmp_path / "cases.pt", weights_only=True)) == len(cases)


# The right answers agree with the library and with brute force.


def test_counts_agree_with_the_library():
    for N, d in ((1, 1), (2048, 64), (300, 24)):
        assert standard_accesses(N, d, 0) == standard_io(N, d)
    for T, bm, bn in ((300, 64, 32), (4096, 128, 128), (100, 16, 48), (1, 16, 16)):
        assert tiles_visited(T, T, bm, bn) == causal_tiles(T, bm, bn)
    for case in hidden_cases(GRADED["check_splits"], 0):
        B, h, h_kv, T, n_sm, bn = case.call
        assert n_splits(*case.call) == split_count(B, h_kv, T, n_sm, block_n=bn)


def test_chunk_tiles_follow_the_kernels_loop():
    """flash_forward_kernel: key blocks 0 .. hi, hi = min(i0 + block_m + T_k - T_q, T_k)."""
    for case in hidden_cases(GRADED["check_tiles"], 0):
        T_q, T_k, bm, bn = case.call
        loop = sum(len(range(0, min(i0 + bm + T_k - T_q, T_k), bn)) for i0 in range(0, T_q, bm))
        assert loop == tiles_visited(*case.call)


def test_the_backward_ratio_counts_the_products_it_runs():
    """The recomputing backward of one tile with d_qk != d_v, counted by FlopCounterMode."""
    bm, bn, d_qk, d_v = 8, 4, 12, 5
    q, k = torch.randn(bm, d_qk), torch.randn(bn, d_qk)
    v, do = torch.randn(bn, d_v), torch.randn(bm, d_v)
    with FlopCounterMode(display=False) as fwd:
        p = torch.softmax(q @ k.T, -1)
        p @ v
    with FlopCounterMode(display=False) as bwd:
        p = torch.softmax(q @ k.T, -1)  # recomputed
        p.T @ do, do @ v.T
        ds = p * (do @ v.T)
        ds @ k, ds.T @ q
    # One more dP than the kernel (written twice above for brevity): subtract it.
    extra = 2 * bm * bn * d_v
    ratio = (bwd.get_total_flops() - extra) / fwd.get_total_flops()
    assert ratio == pytest.approx(backward_ratio(d_qk, d_v))


def test_delta_is_each_heads_rowsum():
    dout, out = torch.randn(2, 5, 12, dtype=torch.float64), torch.randn(2, 5, 12,
                                                                         dtype=torch.float64)
    right = (dout * out).reshape(2, 5, 3, 4).sum(-1).transpose(1, 2)
    assert torch.allclose(delta(dout, out, 3), right)


def test_merge_with_the_new_key_is_attention_over_every_key():
    torch.manual_seed(3)
    n, d, T = 2, 4, 12
    s, v = torch.randn(n, T + 1, dtype=torch.float64) * 3, torch.randn(T + 1, d,
                                                                        dtype=torch.float64)
    s[1, :T] = float("-inf")  # query 1 sees only the new key
    parts = [slice(0, 4), slice(4, 9), slice(9, 12)]
    outs = torch.stack([torch.nan_to_num(torch.softmax(s[:, p], -1)) @ v[p] for p in parts])
    lses = torch.stack([torch.logsumexp(s[:, p], -1, keepdim=True) for p in parts])
    whole = torch.softmax(s, -1) @ v
    s_new, v_new = s[:, T:], v[T:].expand(n, d)
    assert check_merge(whole, outs, lses, s_new, v_new).ok
    assert torch.allclose(merge_with_new(outs, lses, s_new, v_new), whole)


# Each named mistake, on the lab's input.

LAB_MERGE = (torch.tensor([[[0.5], [-math.inf]], [[2.0], [-math.inf]], [[-1.0], [-math.inf]]],
                          dtype=torch.float64), 1)


def test_decode_intensity_mistakes():
    T, d, g, b = 100, 64, 8, 4
    flops, moved = 4 * g * T * d, 2 * T * d + 2 * g * d
    assert check_decode_intensity(flops / (moved * b), T, d, g, b).ok
    for answer, phrase in [(flops / ((2 * g * T * d + 2 * g * d) * b), "once per query head"),
                           (4 * T * d / (moved * b), "FLOPs of one query"),
                           (flops / ((2 * T * d + 2 * d) * b), "one query and one output"),
                           (flops / ((T * d + 2 * g * d) * b), "without the values"),
                           (flops / moved, "per element"),
                           (flops / 2 / (moved * b), "multiply-add")]:
        fb = check_decode_intensity(answer, T, d, g, b)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_standard_io_mistakes():
    N, d, k = 2048, 64, 3
    right = standard_accesses(N, d, k)
    assert check_standard_io(right, N, d, k).ok
    for answer, phrase in [(standard_io(N, d), "Algorithm 0 alone"),
                           (standard_io(N, d) + k * N * N, "one access per extra step"),
                           (right - 2 * N * N, "without P"), (right - 4 * N * d, "Q, K, V"),
                           (4 * N * d, "inputs and output only")]:
        fb = check_standard_io(answer, N, d, k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_programs_mistakes():
    args = (3, 32, 8, 100, 1124, 64)
    assert check_programs(192, *args).ok
    for answer, phrase in [(18 * 3 * 32, "over the keys"), (2 * 3 * 8, "key/value head"),
                           (1 * 3 * 32, "partial query block"), (2 * 3, "without the heads"),
                           (2 * 32, "without the batch"), (100 * 3 * 32, "one program per query")]:
        fb = check_programs(answer, *args)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_tiles_mistakes():
    args = (100, 1124, 64, 32)
    right = tiles_visited(*args)
    assert right == 70 and check_tiles(right, *args).ok
    for answer, phrase in [(causal_tiles(100, 64, 32), "without a cache"),
                           (causal_tiles(1124, 64, 32), "whole causal square"),
                           (2 * 36, "every tile"), (69, "rounded down")]:
        fb = check_tiles(answer, *args)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_delta_mistakes():
    torch.manual_seed(0)
    dout, out = torch.randn(2, 5, 12, dtype=torch.float64), torch.randn(2, 5, 12,
                                                                         dtype=torch.float64)
    prod = dout * out
    apart = prod.reshape(2, 5, 3, 4).transpose(1, 2)
    assert check_delta(apart.sum(-1), dout, out, 3).ok
    for answer, phrase in [(prod.sum(-1), "all h·d features"),
                           (prod.reshape(2, 5, 3, 4).sum(-1), "layout (B, T, h)"),
                           (prod.reshape(2, 3, 5, 4).sum(-1), "plain reshape"),
                           (apart, "without the row sum"),
                           (dout.reshape(2, 5, 3, 4).transpose(1, 2).sum(-1), "dO alone"),
                           (apart.sum(-2), "sum over queries")]:
        fb = check_delta(answer, dout, out, 3)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_backward_ratio_mistakes():
    assert check_backward_ratio(2.6, 192, 128).ok
    for answer, phrase in [(2.5, "products counted"), (2.4, "widths swapped"),
                           (2.0, "without recomputing"), (1.5, "three matmuls"),
                           (3.6, "forward included")]:
        fb = check_backward_ratio(answer, 192, 128)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def _lab_merge():
    torch.manual_seed(0)
    lses = LAB_MERGE[0]
    outs = torch.randn(3, 2, 4, dtype=torch.float64)
    outs[:, 1] = 0.0
    return outs, lses, torch.randn(2, 1, dtype=torch.float64), torch.randn(2, 4,
                                                                           dtype=torch.float64)


def test_merge_mistakes():
    outs, lses, s_new, v_new = args = _lab_merge()
    assert check_merge(merge_with_new(*args), *args).ok
    old = merge_partials(outs, lses)
    parts = torch.cat([outs, v_new[None]])
    one = merge_with_new(outs, lses, torch.zeros_like(s_new), v_new)  # exp(0) for the new key
    for answer, phrase in [(old, "without the new key"), (one, "exp(0) = 1"),
                           ((old + v_new) / 2, "weight 1/2"), (parts.mean(0), "plain average")]:
        fb = check_merge(answer, *args)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_merge_overflow_and_empty_splits_are_named():
    torch.manual_seed(1)
    outs, lses = torch.randn(3, 2, 4, dtype=torch.float64), 800 + torch.randn(
        3, 2, 1, dtype=torch.float64)
    s_new, v_new = 800 + torch.randn(2, 1, dtype=torch.float64), torch.randn(2, 4,
                                                                              dtype=torch.float64)
    w, w_new = lses.exp(), s_new.exp()  # inf: exp(800) overflows
    naive = ((w * outs).sum(0) + w_new * v_new) / (w.sum(0) + w_new)
    fb = check_merge(naive, outs, lses, s_new, v_new)
    assert not fb.ok and "overflows" in fb.message, fb.message
    outs, lses, s_new, v_new = _lab_merge()
    nan = merge_with_new(outs, lses, s_new, v_new)
    nan[1] = float("nan")
    fb = check_merge(nan, outs, lses, s_new, v_new)
    assert not fb.ok and "exp(-inf) = 0" in fb.message, fb.message


def test_splits_mistakes():
    args = (1, 32, 8, 100, 108, 16)
    assert n_splits(*args) == 7 and check_splits(7, *args).ok
    for answer, phrase in [(14, "no cap"), (4, "count B h_kv"), (6, "the last, partial block"),
                           (108, "divide by them")]:
        fb = check_splits(answer, *args)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)
    fb = check_splits(6, 2, 8, 8, 32768, 108, 64)  # no cap binds: 108 // 16 = 6
    assert not fb.ok and "rounded down" in fb.message, fb.message


@pytest.mark.parametrize("bad", [None, ..., [1.0, 2.0], "seven", (torch.zeros(2), torch.ones(2))])
def test_bad_input_says_not_yet(bad):
    outs, lses, s_new, v_new = _lab_merge()
    dout = torch.randn(2, 5, 12, dtype=torch.float64)
    for fb in (check_decode_intensity(bad, 100, 64, 8, 4), check_standard_io(bad, 2048, 64, 3),
               check_programs(bad, 3, 32, 8, 100, 1124, 64), check_tiles(bad, 100, 1124, 64, 32),
               check_delta(bad, dout, dout, 3), check_backward_ratio(bad, 192, 128),
               check_merge(bad, outs, lses, s_new, v_new),
               check_splits(bad, 1, 32, 8, 100, 108, 16)):
        assert not fb.ok and fb.message.startswith("Not yet"), fb.message
    assert check_merge(outs, outs, lses, s_new, v_new).message.startswith("Not yet")


# The practice checks apply the grade's rules.


def _practise(source: str) -> str:
    ns = {"__name__": "__main__"}
    exec(source, ns)  # noqa: S102 (the test's own code)
    return ns["result"].message


@pytest.mark.parametrize("source, function, forbidden", [
    ("from attnbook.gpu.io_cost import standard_io\n"
     "def standard_accesses(N, d, n_extra):\n"
     "    return standard_io(N, d) + 2 * n_extra * N * N\n"
     "result = check_standard_io(standard_accesses(2048, 64, 3), 2048, 64, 3)\n",
     "standard_accesses", "standard_io"),
    ("from attnbook.gpu.roofline import count_kernel\n"
     "def per_byte(T, d, g):\n"  # a helper of the notebook's own is followed
     "    return count_kernel('decode', T, d, g=g).intensity\n"
     "def decode_intensity(T, d, g, bytes_per):\n"
     "    per_byte(1, 1, 1)\n"
     "    return 4 * g * T * d / ((2 * T * d + 2 * g * d) * bytes_per)\n"
     "result = check_decode_intensity(decode_intensity(100, 64, 8, 4), 100, 64, 8, 4)\n",
     "decode_intensity", "count_kernel"),
    ("from attnbook.exercises.gpu import causal_tiles\n"
     "def tiles_visited(T_q, T_k, block_m, block_n):\n"
     "    return causal_tiles(T_k, block_m, block_n) - causal_tiles(T_k - T_q, block_m, block_n)\n"
     "result = check_tiles(tiles_visited(100, 1124, 64, 32), 100, 1124, 64, 32)\n",
     "tiles_visited", "causal_tiles"),
    ("from attnbook.gpu.decoding import merge_partials\n"
     "def merge_with_new(outs, lses, s_new, v_new):\n"
     "    return merge_partials(torch.cat([outs, v_new[None]]), torch.cat([lses, s_new[None]]))\n"
     "result = check_merge(merge_with_new(*args), *args)\n",
     "merge_with_new", "merge_partials"),
    ("from attnbook.gpu.decoding import split_count\n"
     "def n_splits(B, h, h_kv, T, n_sm, block_n):\n"
     "    return split_count(B, h_kv, T, n_sm, block_n=block_n)\n"
     "result = check_splits(n_splits(1, 32, 8, 100, 108, 16), 1, 32, 8, 100, 108, 16)\n",
     "n_splits", "split_count"),
])
def test_practice_check_refuses_the_librarys_count(source, function, forbidden):
    head = ("import torch\nfrom attnbook.exercises.gpu import check_standard_io, "
            "check_decode_intensity, check_tiles, check_merge, check_splits\n")
    ns = {"__name__": "__main__", "args": _lab_merge()}
    exec(head + source, ns)  # noqa: S102 (the test's own code)
    message = ns["result"].message
    assert message.startswith(f"Right values, but {function} uses {forbidden}"), message


@pytest.mark.parametrize("source, function", [
    ("def decode_intensity(T, d, g, bytes_per):\n    return 204800 / 55296\n"
     "result = check_decode_intensity(decode_intensity(100, 64, 8, 4), 100, 64, 8, 4)\n",
     "decode_intensity"),
    ("def standard_accesses(N, d, n_extra):\n    return 4 * 2048 * 64 + 10 * 2048 * 2048\n"
     "result = check_standard_io(standard_accesses(2048, 64, 3), 2048, 64, 3)\n",
     "standard_accesses"),
    ("def n_programs(B, h, h_kv, T_q, T_k, block_m):\n    return 192\n"
     "result = check_programs(n_programs(3, 32, 8, 100, 1124, 64), 3, 32, 8, 100, 1124, 64)\n",
     "n_programs"),
    ("def tiles_visited(T_q, T_k, block_m, block_n):\n    return 70\n"
     "result = check_tiles(tiles_visited(100, 1124, 64, 32), 100, 1124, 64, 32)\n",
     "tiles_visited"),
    ("def delta(dout, out, h):\n"
     "    return (dout * out).reshape(2, 5, 3, 4).sum(-1).transpose(1, 2)\n"
     "x, y = (torch.randn(2, 5, 12, dtype=torch.float64) for _ in range(2))\n"
     "result = check_delta(delta(x, y, 3), x, y, 3)\n", "delta"),
    ("def backward_ratio(d_qk, d_v):\n    return 2.6\n"
     "result = check_backward_ratio(backward_ratio(192, 128), 192, 128)\n", "backward_ratio"),
    ("def n_splits(B, h, h_kv, T, n_sm, block_n):\n    return 7\n"
     "result = check_splits(n_splits(1, 32, 8, 100, 108, 16), 1, 32, 8, 100, 108, 16)\n",
     "n_splits"),
])
def test_an_answer_fixed_to_the_labs_input_fails_the_second_input(source, function):
    head = ("import torch\nfrom attnbook.exercises.gpu import check_standard_io, "
            "check_decode_intensity, check_programs, check_tiles, check_delta, "
            "check_backward_ratio, check_splits\n")
    message = _practise(head + source)
    assert message.startswith("Right values on the lab's input, but not on a second input"), \
        message
    assert function in message


def test_merge_fixed_to_the_labs_shapes_fails_the_second_input():
    ns = {"__name__": "__main__", "args": _lab_merge()}
    exec("import torch\nfrom attnbook.exercises.gpu import check_merge\n"  # noqa: S102
         "def merge_with_new(outs, lses, s_new, v_new):\n"
         "    m = torch.maximum(lses.amax(0), s_new)\n"
         "    w, w_new = (lses[:3] - m).exp(), (s_new - m).exp()\n"
         "    return ((w * outs[:3]).sum(0) + w_new * v_new) / (w.sum(0) + w_new)\n"
         "result = check_merge(merge_with_new(*args), *args)\n", ns)
    # three splits, as in the lab: right there; the second input has other numbers of splits
    assert ns["result"].message.startswith("Right values on the lab's input, but not"), \
        ns["result"].message
