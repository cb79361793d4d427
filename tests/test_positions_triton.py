"""RoPE on the Triton path (interpreter on the CPU): the kernel on pre-rotated q and k equals
the explicit module with RoPE. ALiBi has no Triton path: nothing routes Attention there, and the
kernel takes no bias (pinned below, so adding one without a test is noticed)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest
import torch

_FRESH = "triton" not in sys.modules
if _FRESH:
    os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")

from attnbook import MultiHeadAttention  # noqa: E402
from attnbook.gpu.flash import flash_attention  # noqa: E402
from attnbook.gpu.triton_env import interpreting  # noqa: E402
from attnbook.positions import apply_rope  # noqa: E402

IN_PROCESS = interpreting()


@pytest.mark.skipif(not IN_PROCESS, reason="Triton was imported without the interpreter; "
                    "test_in_subprocess runs this check")
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_kernel_on_prerotated_q_k_equals_explicit_rope(layout):
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 24, 2, position="rope", rope_layout=layout)
    x = torch.randn(2, 24, 32)
    pm = torch.ones(2, 24, dtype=torch.bool)
    pm[1, -5:] = False  # right padding: positions 0 .. T - 1 are the default ones
    expected = m(x, pm)
    q, k, v = m.project_heads(x)  # (B, h, T, d_h)
    pos = torch.arange(24)
    q, k = apply_rope(q, pos, layout=layout), apply_rope(k, pos, layout=layout)
    heads = flash_attention(q, k, v, pm, block_m=16, block_n=16)
    torch.testing.assert_close(m.merge(heads)[pm], expected[pm], rtol=2e-4, atol=2e-5)


def test_the_kernel_takes_no_bias():
    params = inspect.signature(flash_attention).parameters
    assert not {"bias", "attn_bias", "score_mod", "alibi"} & set(params)


def test_in_subprocess():
    """When this process imported Triton without the interpreter, run the file afresh."""
    if IN_PROCESS:
        pytest.skip("the check ran in this process")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             __file__], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
