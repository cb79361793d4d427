"""The Triton kernels of Part VI, run through Triton's interpreter on the CPU.

The interpreter must be switched on before Triton is first imported (Triton compiles or
interprets its own library functions from then on), so this module sets TRITON_INTERPRET=1 at
import, before anything imports Triton. If Triton was already imported without it in this
process (by another test, say), the checks run once more in a fresh subprocess instead.
Sizes are small: the interpreter runs each program in NumPy, one after another.
"""

from __future__ import annotations

import inspect
import math
import os
import subprocess
import sys

import pytest
import torch

_FRESH = "triton" not in sys.modules
if _FRESH:
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from attnbook import AttentionLayer  # noqa: E402
from attnbook.gpu.decoding import flash_decoding, merge_partials  # noqa: E402
from attnbook.gpu.flash import FlashAttention, flash_attention, flash_forward  # noqa: E402
from attnbook.gpu.kernels import head_offset  # noqa: E402
from attnbook.gpu.triton_env import interpreting  # noqa: E402

IN_PROCESS = interpreting()
in_process = pytest.mark.skipif(not IN_PROCESS, reason="Triton was imported without the "
                                "interpreter; test_in_subprocess runs these checks")


def explicit(q, k, v, padding_mask=None, causal=True):
    """The reference: steps 2 to 6 of attnbook.Attention, explicit."""
    attn = AttentionLayer(q.size(-1), q.size(-2)).to(q.dtype)
    if not causal:
        attn.mask.zero_()
    return attn.attend(q, k, v, padding_mask)[0]


def padding(B, T, kind):
    """None, or a (B, T) mask (True = real) with right padding, left padding and empty rows."""
    if kind == "none":
        return None
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, :5] = False  # left padding: queries 0..4 of sequence 0 see no key (empty rows)
    pad[-1, T - 7:] = False  # right padding
    return pad


def check_against_explicit(shape, dtype, causal, pad_kind, block_m, block_n, tol):
    q, k, v = (torch.randn(*shape, dtype=dtype, requires_grad=True) for _ in range(3))
    pad = padding(shape[0], shape[-2], pad_kind)
    out = flash_attention(q, k, v, pad, causal=causal, block_m=block_m, block_n=block_n)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref = explicit(q, k, v, pad, causal)
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout)
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads)):
        assert got.dtype == dtype and got.shape == want.shape, name
        torch.testing.assert_close(got, want, atol=tol, rtol=tol, msg=name)
    return out, grads, pad


CASES = [  # (shape, causal, padding, block_m, block_n): T never a multiple of every block
    ((2, 37, 8), True, "none", 16, 16),
    ((2, 37, 8), True, "mixed", 16, 32),
    ((2, 2, 50, 16), True, "mixed", 32, 16),
    ((2, 2, 50, 16), False, "mixed", 16, 16),
    ((1, 3, 70, 20), True, "none", 64, 32),
    ((2, 40, 16), False, "none", 32, 32),
]


@in_process
@pytest.mark.parametrize("shape,causal,pad_kind,block_m,block_n", CASES)
def test_float32_matches_explicit(shape, causal, pad_kind, block_m, block_n):
    check_against_explicit(shape, torch.float32, causal, pad_kind, block_m, block_n, 1e-5)


@in_process
@pytest.mark.parametrize("shape,causal,pad_kind,block_m,block_n", CASES[1:4])
def test_float64_matches_explicit(shape, causal, pad_kind, block_m, block_n):
    check_against_explicit(shape, torch.float64, causal, pad_kind, block_m, block_n, 1e-12)


@in_process
def test_empty_rows_give_zeros_and_zero_gradients():
    out, grads, pad = check_against_explicit((2, 2, 30, 16), torch.float64, True, "mixed",
                                             16, 16, 1e-12)
    assert (out[0, :, :5] == 0).all()  # queries 0..4 of sequence 0 see only padding
    dq = grads[0]
    assert (dq[0, :, :5] == 0).all()
    assert all(torch.isfinite(g).all() for g in (out, *grads))


@in_process
def test_padded_keys_get_no_gradient():
    _, (dq, dk, dv), pad = check_against_explicit((2, 33, 16), torch.float64, True, "mixed",
                                                  16, 16, 1e-12)
    assert (dk[~pad] == 0).all() and (dv[~pad] == 0).all()


@in_process
def test_log_sum_exp_and_causality():
    q, k, v = (torch.randn(1, 1, 40, 16, dtype=torch.float64) for _ in range(3))
    out, lse = flash_forward(q, k, v, None, True, 16, 16, "ieee")
    s = (q @ k.transpose(-2, -1)) / 4.0
    s = s.masked_fill(torch.ones(40, 40, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1))
    k2, v2 = k.clone(), v.clone()
    k2[..., 20:, :], v2[..., 20:, :] = 9.0, -9.0  # change the future of query 19
    out2, _ = flash_forward(q, k2, v2, None, True, 16, 16, "ieee")
    assert torch.equal(out[..., :20, :], out2[..., :20, :])


@in_process
def test_saves_no_t_by_t_tensor():
    q, k, v = (torch.randn(1, 64, 16, requires_grad=True) for _ in range(3))
    out = FlashAttention.apply(q, k, v, None, True, 16, 16, "ieee")
    saved = sum(t.numel() for t in out.grad_fn.saved_tensors if t is not None)
    assert saved == 4 * 64 * 16 + 64  # q, k, v, out and one log-sum-exp per query


@in_process
def test_interpreter_ignores_tf32():
    q, k, v = (torch.randn(1, 50, 16) for _ in range(3))
    ieee = flash_attention(q, k, v, block_m=16, block_n=16, precision="ieee")
    tf32 = flash_attention(q, k, v, block_m=16, block_n=16, precision="tf32")
    assert torch.equal(ieee, tf32)


@in_process
@pytest.mark.parametrize("n_split", [1, 3, 8])
def test_flash_decoding_matches_explicit(n_split):
    B, h, T, d = 3, 2, 45, 16
    q = torch.randn(B, h, 1, d, dtype=torch.float64)
    k, v = (torch.randn(B, h, T, d, dtype=torch.float64) for _ in range(2))
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, :30] = False  # the first splits of sequence 0 see only padding
    pad[1] = False  # sequence 1: no real key at all
    out = flash_decoding(q, k, v, pad, n_split=n_split, block_n=16)
    want = explicit(q, k, v, pad, causal=False)  # one query that sees the whole cache
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-12)
    assert (out[1] == 0).all()
    three_d = flash_decoding(q[:, 0], k[:, 0], v[:, 0], pad, n_split=n_split, block_n=16)
    torch.testing.assert_close(three_d, want[:, 0], atol=1e-12, rtol=1e-12)


def test_merge_partials_is_attention_over_the_union():
    s = torch.randn(4, 12, dtype=torch.float64)
    s[0] = float("-inf")  # an empty row
    s[1, :6] = float("-inf")  # the first part of row 1 is empty
    v = torch.randn(12, 3, dtype=torch.float64)
    parts = [slice(0, 6), slice(6, 12)]
    outs = torch.stack([torch.nan_to_num(torch.softmax(s[:, p], -1)) @ v[p] for p in parts])
    lses = torch.stack([torch.logsumexp(s[:, p], -1, keepdim=True) for p in parts])
    merged = merge_partials(outs, lses)
    torch.testing.assert_close(merged[1:], torch.softmax(s[1:], -1) @ v)
    assert (merged[0] == 0).all()


def reference(q, k, v, padding_mask=None, causal=True):
    """Attention in float64 for any head grouping and T_q <= or > T_k, empty rows zero.

    Query head a reads key/value head a // G; causal blocks key j > i + T_k - T_q (the
    triangle aligned bottom-right, as a KV cache needs).
    """
    q, k, v = (t if t.dim() == 4 else t[:, None] for t in (q, k, v))
    G = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)  # (B, h, T_k, d)
    s = (q.double() @ k.double().mT) / math.sqrt(q.size(-1))  # (B, h, T_q, T_k)
    T_q, T_k = s.shape[-2:]
    blocked = torch.zeros(T_q, T_k, dtype=torch.bool)
    if causal:
        blocked = torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q + 1)
    if padding_mask is not None:
        blocked = blocked | ~padding_mask[:, None, None, :]
    blocked = blocked.expand_as(s)
    empty = blocked.all(-1, keepdim=True)  # rows that see no key: zeros, zero gradients
    w = torch.softmax(s.masked_fill(blocked, -math.inf).masked_fill(empty, 0.0), -1)
    return w.masked_fill(empty, 0.0) @ v.double()


def check_against_reference(q, k, v, pad, causal, tol, **blocks):
    """Outputs and all three gradients of flash_attention against :func:`reference`."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = flash_attention(q, k, v, pad, causal=causal, **blocks)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference(q64, k64, v64, pad, causal)
    ref = ref[:, 0] if q.dim() == 3 else ref
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads)):
        assert got.dtype == q.dtype and got.shape == want.shape, name
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol, msg=name)
    return out, grads


GQA_CASES = [  # (h, h_kv, T_q, T_k, causal, padded): GQA, MQA and fewer or more queries
    (4, 2, 37, 37, True, True),
    (6, 1, 29, 29, True, False),  # multi-query: every query head reads one key/value head
    (4, 2, 13, 45, True, True),  # chunked prefill: 13 new queries after 32 cached keys
    (2, 2, 1, 40, True, False),  # one query: it sees every key
    (4, 2, 40, 23, True, True),  # more queries than keys: the first 17 rows see nothing
    (4, 4, 21, 50, False, True),
    (3, 1, 50, 21, False, False),
]


@in_process
@pytest.mark.parametrize("h,h_kv,T_q,T_k,causal,padded", GQA_CASES)
def test_grouped_queries_and_other_lengths(h, h_kv, T_q, T_k, causal, padded):
    B, d = 2, 16
    q = torch.randn(B, h, T_q, d, dtype=torch.float64)
    k, v = (torch.randn(B, h_kv, T_k, d, dtype=torch.float64) for _ in range(2))
    pad = padding(B, T_k, "mixed") if padded else None
    out, (dq, dk, dv) = check_against_reference(q, k, v, pad, causal, 1e-12,
                                                block_m=16, block_n=16)
    assert dk.shape == k.shape and dv.shape == v.shape  # summed over the G query heads
    if causal and T_q > T_k:  # no key at or before query i when i + T_k - T_q < 0
        assert (out[:, :, : T_q - T_k] == 0).all() and (dq[:, :, : T_q - T_k] == 0).all()


@in_process
def test_bottom_right_matches_the_full_sequence():
    """The last T_q queries attending to all T_k keys equal rows T_k - T_q .. T_k - 1 of full
    causal attention: what a KV cache relies on."""
    q, k, v = (torch.randn(1, 2, 40, 16, dtype=torch.float64) for _ in range(3))
    full = flash_attention(q, k, v, block_m=16, block_n=16)
    tail = flash_attention(q[:, :, 29:], k, v, block_m=16, block_n=16)
    torch.testing.assert_close(tail, full[:, :, 29:], atol=1e-13, rtol=1e-13)


@in_process
@pytest.mark.parametrize("shape,causal,pad_kind,block_m,block_n", CASES[:4])
def test_float16_matches_float64(shape, causal, pad_kind, block_m, block_n):
    """float16 inputs, float32 accumulation: within float16's rounding of a float64 result."""
    q, k, v = (torch.randn(*shape).half() for _ in range(3))
    pad = padding(shape[0], shape[-2], pad_kind)
    check_against_reference(q, k, v, pad, causal, 4e-3, block_m=block_m, block_n=block_n)


@in_process
def test_float16_decoding_with_groups():
    q = torch.randn(2, 8, 1, 32).half()
    k, v = (torch.randn(2, 2, 70, 32).half() for _ in range(2))
    out = flash_decoding(q, k, v, n_split=3, block_n=16)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), reference(q, k, v, causal=False),
                               atol=2e-3, rtol=2e-3)


@in_process
def test_many_query_heads_per_key_head_and_empty_inputs():
    """G = 20 query heads per key/value head (a tile of 32 rows); no keys; no queries."""
    q = torch.randn(1, 20, 1, 16, dtype=torch.float64)
    k, v = (torch.randn(1, 1, 33, 16, dtype=torch.float64) for _ in range(2))
    got = flash_decoding(q, k, v, n_split=2, block_n=16)
    torch.testing.assert_close(got, reference(q, k, v, causal=False), atol=1e-12, rtol=1e-12)
    no_keys = flash_attention(q, k[:, :, :0], v[:, :, :0], block_m=16, block_n=16)
    assert no_keys.shape == q.shape and (no_keys == 0).all()  # every row is empty
    assert (flash_decoding(q, k[:, :, :0], v[:, :, :0]) == 0).all()
    none = flash_attention(q[:, :, :0], k, v, block_m=16, block_n=16)
    assert none.shape == (1, 20, 0, 16)


@in_process
def test_bfloat16_is_refused_in_the_interpreter():
    q = torch.randn(1, 20, 16, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="bfloat16 cannot run in Triton's interpreter"):
        flash_attention(q, q, q)
    with pytest.raises(NotImplementedError, match="bfloat16"):
        flash_decoding(q[:, :1], q, q)


@in_process
def test_interpreter_still_gets_bfloat16_dot_wrong():
    """Pins why bfloat16 is refused: Triton 3.9's interpreter computes tl.dot on bfloat16
    wrongly. If this fails, Triton fixed it: lift the refusal in triton_env and test bfloat16
    here like float16."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 32, 16, dtype=torch.bfloat16) for _ in range(3))
    out, _ = flash_forward(q, k, v, None, True, 16, 16, "ieee")
    err = (out.double() - reference(q, k, v)).abs().max().item()
    assert not err < 1.0, f"bfloat16 now agrees to {err:.1e}: Triton's interpreter is fixed"
    # Chapter 17 quotes errors "around 10^9": within two orders of magnitude of that.
    assert 1e7 <= err <= 1e11, f"the interpreter's bfloat16 error is now {err:.1e}"


@in_process
def test_strided_inputs_are_read_in_place(monkeypatch):
    """A (B, T, h, d) tensor seen as (B, h, T, d), and a slice of a KV cache, reach the kernels
    as they are (same memory, their own strides), and the results are right."""
    from attnbook.kv_cache import KVCache

    q = torch.randn(2, 30, 4, 16, dtype=torch.float64).transpose(1, 2)  # (B, h, T, d) view
    k, v = (torch.randn(2, 30, 2, 16, dtype=torch.float64).transpose(1, 2) for _ in range(2))
    pad = padding(2, 30, "mixed")
    cache = KVCache.empty(2, 64, 16, n_kv_heads=2, dtype=torch.float64)
    cache.append(k, v, pad)
    L = cache.length
    k_cached, v_cached = cache.k[:, :, :L], cache.v[:, :, :L]  # (B, h_kv, L, d), not contiguous
    q1 = torch.randn(2, 4, 1, 16, dtype=torch.float64)
    assert not k.is_contiguous() and not k_cached.is_contiguous()

    out = flash_attention(q, k, v, pad, block_m=16, block_n=16)
    torch.testing.assert_close(out, reference(q, k, v, pad).to(out.dtype), atol=1e-12,
                               rtol=1e-12)
    got = flash_decoding(q1, k_cached, v_cached, cache.real[:, :L], n_split=3, block_n=16)
    torch.testing.assert_close(got, reference(q1, k, v, pad, causal=False), atol=1e-12,
                               rtol=1e-12)

    kernels = kernels_module()
    launched = {}

    class Record:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kw: launched.setdefault(self.name, args)

    for name in ("flash_forward_kernel", "flash_decoding_split_kernel",
                 "flash_decoding_merge_kernel"):
        monkeypatch.setattr(kernels, name, Record(name))
    flash_attention(q, k, v, pad, block_m=16, block_n=16)
    flash_decoding(q1, k_cached, v_cached, cache.real[:, :L], n_split=3, block_n=16)
    fwd, dec = launched["flash_forward_kernel"], launched["flash_decoding_split_kernel"]
    assert [t.data_ptr() for t in fwd[:3]] == [t.data_ptr() for t in (q, k, v)]
    assert fwd[1].stride() == k.stride()  # (B, h_kv, T, d) view of a (B, T, h_kv, d) tensor
    assert dec[1].data_ptr() == cache.k.data_ptr() and dec[2].data_ptr() == cache.v.data_ptr()
    assert dec[1].stride() == cache.k.stride()  # the cache's capacity, not L, between heads


@in_process
@pytest.mark.parametrize("call", ["flash_attention", "flash_decoding"])
def test_shapes_that_do_not_fit_raise(call):
    fn = flash_attention if call == "flash_attention" else flash_decoding
    q = torch.randn(2, 4, 1, 16)
    kv = torch.randn(2, 3, 9, 16)
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        fn(q, kv, kv)
    with pytest.raises(ValueError, match="same shape"):
        fn(q, kv[:, :2], kv[:, :1])
    with pytest.raises(ValueError, match="batch and head width"):
        fn(q, kv[:1, :2], kv[:1, :2])
    with pytest.raises(ValueError, match="all be"):
        fn(q[:, 0], kv[:, :2], kv[:, :2])
    with pytest.raises(ValueError, match=r"padding_mask must be \(B, T_k\) = \(2, 9\)"):
        fn(q, kv[:, :2], kv[:, :2], torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="one floating dtype"):
        fn(q, kv[:, :2].double(), kv[:, :2].double())


@in_process
def test_decoding_takes_one_query_and_blocks_are_powers_of_two():
    kv = torch.randn(1, 2, 9, 16)
    with pytest.raises(ValueError, match="one query per sequence"):
        flash_decoding(torch.randn(1, 2, 3, 16), kv, kv)
    with pytest.raises(ValueError, match="block_m must be a power of 2, got 24"):
        flash_attention(kv, kv, kv, block_m=24)
    with pytest.raises(ValueError, match="precision must be one of"):
        flash_attention(kv, kv, kv, precision="fp32")


@triton.jit
def offset_probe(OUT, stride_b, stride_h):
    """Stores head_offset(b, a) and the same product in int32, for every (b, a) of the grid."""
    b, a = tl.program_id(0), tl.program_id(1)
    tl.store(OUT + 2 * (b * 4 + a), head_offset(b, a, stride_b, stride_h))
    tl.store(OUT + 2 * (b * 4 + a) + 1, (b * stride_b + a * stride_h).to(tl.int64))


@in_process
def test_offsets_are_64_bit():
    """head_offset multiplies in int64; the same product in int32 wraps (and the interpreter
    shows it), so a tensor of more than 2**31 elements would be read at the wrong place."""
    stride_b, stride_h = 2**30 + 5, 2**28 + 3
    out = torch.zeros(3 * 4 * 2, dtype=torch.int64)
    offset_probe[(3, 4)](out, stride_b, stride_h)
    wide, narrow = out.view(3, 4, 2).unbind(-1)
    b, a = torch.meshgrid(torch.arange(3), torch.arange(4), indexing="ij")
    exact = b * stride_b + a * stride_h
    assert torch.equal(wide, exact)
    assert not torch.equal(narrow, exact)  # int32 wraps past 2**31: the test can fail


@in_process
def test_causal_loop_is_split_at_the_diagonal():
    """Off-diagonal tiles skip the mask: results are bit-identical whether a tile is taken
    by the masked or the unmasked loop, so moving the split changes nothing."""
    q, k, v = (torch.randn(1, 1, 64, 16, dtype=torch.float64) for _ in range(3))
    # Blocks of 16 queries and 16 keys: 3 unmasked tiles in the last program; 64 x 64 blocks:
    # one masked tile that holds everything.
    small, _ = flash_forward(q, k, v, None, True, 16, 16, "ieee")
    whole, _ = flash_forward(q, k, v, None, True, 64, 64, "ieee")
    torch.testing.assert_close(small, whole, atol=1e-14, rtol=1e-14)
    kernel = inspect.getsource(kernels_module().flash_forward_kernel.fn)
    assert kernel.count("forward_tile(") == 2 and "False, CAUSAL" in kernel


CUDA_GRID = (2**31 - 1, 65_535, 65_535)  # programs per grid axis on every GPU since sm30


def sampled_grid(monkeypatch, keep):
    """The interpreter with CUDA's grid limits, running only the programs ``keep`` selects.

    A launch whose grid passes a limit raises, as on a GPU. Every other program of the grid is
    visited but skipped (``keep(kernel name, program id on axis 0)`` is False), so a grid of
    65,538 programs takes a second, not the interpreter's several minutes. Returns the list of
    grids launched.
    """
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    grids = []
    set_grid_dim = builder.set_grid_dim

    def checked(nx, ny, nz):
        for axis, (n, cap) in enumerate(zip((nx, ny, nz), CUDA_GRID)):
            if n > cap:
                raise ValueError(f"grid axis {axis} has {n} programs; CUDA allows {cap}")
        grids.append((nx, ny, nz))
        set_grid_dim(nx, ny, nz)

    monkeypatch.setattr(builder, "set_grid_dim", checked)
    init = interpreter.GridExecutor.__init__

    def sampling_init(self, fn, *args, **kwargs):
        init(self, fn, *args, **kwargs)
        run = self.fn

        def sampled(**kw):  # this module's globals hold tl, as the interpreter requires
            if keep(run.__name__, builder.grid_idx[0]):
                run(**kw)

        sampled.__signature__ = inspect.signature(run)
        self.fn = sampled

    monkeypatch.setattr(interpreter.GridExecutor, "__init__", sampling_init)
    return grids


@in_process
def test_batch_times_heads_past_the_grid_limit(monkeypatch):
    """B·h = 65,538 (B = 32,769, h = 2): past CUDA's 65,535 on grid axes 1 and 2, so every
    kernel folds (batch, head) into axis 0. Forward, backward and Flash-Decoding launch within
    the limits, and the programs of heads 0, 65,535 and 65,537 compute what the reference
    does."""
    B, h, d = 32_769, 2, 16
    heads = (0, 65_535, 65_537)  # (batch, head) pairs b·h + a, the last two past the limit
    pick = (torch.tensor(heads) // h, torch.tensor(heads) % h)

    def keep(name, pid):  # every kernel's programs: blocks (here 1, or n_split) per head
        per_head = 2 if name == "flash_decoding_split_kernel" else 1
        return pid // per_head in heads

    grids = sampled_grid(monkeypatch, keep)
    q, k, v = (torch.randn(B, h, 1, d, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    out = flash_attention(q, k, v)
    dout = torch.randn_like(out)
    out.backward(dout)
    sub = [t.detach()[pick][:, None].requires_grad_() for t in (q, k, v)]  # (3, 1, 1, d)
    want = explicit(*sub)
    want.backward(dout[pick][:, None])
    torch.testing.assert_close(out.detach()[pick][:, None], want)
    for t, s in zip((q, k, v), sub):
        torch.testing.assert_close(t.grad[pick][:, None], s.grad)
    kd, vd = (torch.randn(B, h, 5, d, dtype=torch.float64) for _ in range(2))
    dec = flash_decoding(q.detach(), kd, vd, n_split=2)
    ref = explicit(q.detach()[pick][:, None], kd[pick][:, None], vd[pick][:, None],
                   causal=False)
    torch.testing.assert_close(dec[pick][:, None], ref)
    assert len(grids) == 4 and all(g[1:] == (1, 1) for g in grids)
    assert [g[0] for g in grids] == [B * h, B * h, 2 * B * h, B * h]


def test_grid_past_axis_0_is_refused():
    from attnbook.gpu.flash import MAX_GRID, launch_grid

    assert launch_grid(4, 65_537) == 4 * 65_537
    with pytest.raises(ValueError, match="axis 0"):
        launch_grid(MAX_GRID // 2 + 1, 2)


def kernels_module():
    from attnbook.gpu import load_kernels

    return load_kernels()


def test_in_subprocess():
    """When this process imported Triton without the interpreter, run the file afresh."""
    if IN_PROCESS:
        pytest.skip("the checks ran in this process")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             __file__], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
