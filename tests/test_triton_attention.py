"""The Triton kernels of Part VI, run through Triton's interpreter on the CPU.

The interpreter must be switched on before Triton is first imported (Triton compiles or
interprets its own library functions from then on), so this module sets TRITON_INTERPRET=1 at
import, before anything imports Triton. If Triton was already imported without it in this
process (by another test, say), the checks run once more in a fresh subprocess instead.
Sizes are small: the interpreter runs each program in NumPy, one after another.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

_FRESH = "triton" not in sys.modules
if _FRESH:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

from attnbook import Attention  # noqa: E402
from attnbook.gpu.decoding import flash_decoding, merge_partials  # noqa: E402
from attnbook.gpu.flash import FlashAttention, flash_attention, flash_forward  # noqa: E402
from attnbook.gpu.triton_env import interpreting  # noqa: E402

IN_PROCESS = interpreting()
in_process = pytest.mark.skipif(not IN_PROCESS, reason="Triton was imported without the "
                                "interpreter; test_in_subprocess runs these checks")


def explicit(q, k, v, padding_mask=None, causal=True):
    """The reference: steps 2 to 6 of attnbook.Attention, explicit."""
    attn = Attention(q.size(-1), q.size(-2)).to(q.dtype)
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


def test_in_subprocess():
    """When this process imported Triton without the interpreter, run the file afresh."""
    if IN_PROCESS:
        pytest.skip("the checks ran in this process")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             __file__], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
