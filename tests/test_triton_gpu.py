"""The Triton kernels compiled (not interpreted) on a CUDA GPU, against a float64 reference.

Skipped without a GPU; ``make gpu-check`` (scripts/gpu_check.py) runs it wherever one is
present, a Colab runtime included. Unlike the interpreter's tests it covers bfloat16, the
launch configurations of attnbook.gpu.configs for the GPU at hand, and each float32 precision.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") == "1":
    pytest.skip("needs a CUDA GPU and compiled Triton (TRITON_INTERPRET unset)",
                allow_module_level=True)
pytest.importorskip("triton")

from attnbook.gpu import flash_attention, flash_decoding  # noqa: E402

DEVICE = torch.device("cuda")
TOL = {  # (outputs, gradients) against float64, inputs of unit variance
    (torch.float16, None): (3e-3, 2e-2),
    (torch.bfloat16, None): (2e-2, 1e-1),
    (torch.float32, "ieee"): (1e-5, 1e-4),
    (torch.float32, "tf32x3"): (1e-5, 1e-4),
    (torch.float32, "tf32"): (5e-3, 5e-2),
}


def reference(q, k, v, padding_mask=None, causal=True):
    """float64 attention: head a reads key/value head a // G; causal aligned bottom-right."""
    G = q.size(1) // k.size(1)
    k, v = k.double().repeat_interleave(G, 1), v.double().repeat_interleave(G, 1)
    s = q.double() @ k.mT / math.sqrt(q.size(-1))
    T_q, T_k = s.shape[-2:]
    blocked = torch.zeros(T_q, T_k, dtype=torch.bool, device=q.device)
    if causal:
        blocked = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).triu(T_k - T_q + 1)
    if padding_mask is not None:
        blocked = blocked | ~padding_mask[:, None, None, :]
    blocked = blocked.expand_as(s)
    empty = blocked.all(-1, keepdim=True)
    w = torch.softmax(s.masked_fill(blocked, -math.inf).masked_fill(empty, 0.0), -1)
    return w.masked_fill(empty, 0.0) @ v


@pytest.mark.parametrize("dtype,precision", list(TOL))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("h,h_kv,T_q,T_k", [(8, 8, 1000, 1000), (8, 2, 300, 777)])
def test_compiled_kernels_match_float64(dtype, precision, d, h, h_kv, T_q, T_k):
    torch.manual_seed(0)
    q = torch.randn(2, h, T_q, d, device=DEVICE, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(2, h_kv, T_k, d, device=DEVICE, dtype=dtype, requires_grad=True)
            for _ in range(2))
    pad = torch.ones(2, T_k, dtype=torch.bool, device=DEVICE)
    pad[0, :9] = False
    out = flash_attention(q, k, v, pad, precision=precision)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference(q64, k64, v64, pad)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    tol_out, tol_grad = TOL[(dtype, precision)]
    torch.testing.assert_close(out.double(), ref, atol=tol_out, rtol=tol_out)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=tol_grad, rtol=tol_grad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("h_kv", [16, 2])
def test_compiled_decoding_matches_sdpa(dtype, h_kv):
    torch.manual_seed(0)
    q = torch.randn(2, 16, 1, 128, device=DEVICE, dtype=dtype)
    k, v = (torch.randn(2, h_kv, 5000, 128, device=DEVICE, dtype=dtype) for _ in range(2))
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), enable_gqa=h_kv != 16)
    for n_split in (1, 7, 32):
        got = flash_decoding(q, k, v, n_split=n_split)
        tol = 2e-2 if dtype == torch.bfloat16 else 3e-3
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)
