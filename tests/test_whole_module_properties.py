"""Chapter 8's properties that tests/test_attention.py does not pin: equivariance, the formula."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from conftest import random_padding

from attnbook import Attention


def unmasked(m: Attention) -> Attention:
    """A copy of ``m`` whose causal buffer blocks nothing: attention over the whole sequence."""
    free = Attention(m.d_model, m.context_length).to(m.query.weight.dtype)
    free.load_state_dict(m.state_dict())
    free.mask.fill_(False)
    return free


@pytest.mark.parametrize("seed", range(3))
def test_permutation_equivariance_without_mask(seed):
    torch.manual_seed(seed)
    m = unmasked(Attention(6, 8).double())
    x = torch.randn(2, 8, 6, dtype=torch.float64)
    perm = torch.randperm(8)
    torch.testing.assert_close(m(x[:, perm]), m(x)[:, perm], rtol=1e-12, atol=1e-12)
    pad = random_padding(2, 8, "right")  # padding is a property of a token: it moves with it
    torch.testing.assert_close(m(x[:, perm], pad[:, perm]), m(x, pad)[:, perm],
                               rtol=1e-12, atol=1e-12)


def test_causal_mask_breaks_equivariance():
    m = Attention(6, 8).double()
    x = torch.randn(1, 8, 6, dtype=torch.float64)
    swap = torch.tensor([1, 0, 2, 3, 4, 5, 6, 7])  # swap the first two tokens
    assert not torch.allclose(m(x[:, swap]), m(x)[:, swap])
    # ... but only the two swapped queries notice: from token 2 on, both are in view.
    torch.testing.assert_close(m(x[:, swap])[:, 2:], m(x)[:, 2:], rtol=1e-12, atol=1e-12)


def one_line_formula(m: Attention, x: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Y = softmax(Q K^T / sqrt(d) + M) V by hand: no attnbook step, no SDPA, no MHA.

    M is written out from its definition (-inf where key j > query i or key j is padding), and
    a row with no visible key, where the formula is 0/0, gets the library's stated policy, 0.
    """
    B, T, d = x.shape
    Q, K, V = x @ m.query.weight.T, x @ m.key.weight.T, x @ m.value.weight.T  # (B, T, d)
    future = torch.arange(T)[None, :] > torch.arange(T)[:, None]  # (T, T): j > i
    M = torch.zeros(B, T, T, dtype=x.dtype)  # additive: 0 = keep, -inf = blocked
    M = M.masked_fill(future | ~padding_mask[:, None, :], -math.inf)
    Y = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(d) + M, dim=-1) @ V  # NaN if empty
    empty = (M == -math.inf).all(dim=-1)  # (B, T): rows with no visible key
    return Y.masked_fill(empty[..., None], 0.0)


def test_module_is_the_one_line_formula():
    """The module against the formula in float64, on every row: real, padded and empty.

    SDPA and nn.MultiheadAttention(need_weights=False) share a kernel, so agreeing with both is
    one check, not two; this formula shares no code with either (the spy proves SDPA is unused)
    nor with attnbook's masks. The batch has right padding, left padding (whose first rows see
    no key), no padding, and a sequence with no real token at all (every row empty).
    """
    B, T, d = 4, 7, 5
    m = Attention(d, T).double()
    x = torch.randn(B, T, d, dtype=torch.float64)
    pad = torch.tensor([[1, 1, 1, 1, 1, 0, 0],  # right padding
                        [0, 0, 0, 1, 1, 1, 1],  # left padding: rows 0-2 are empty
                        [1, 1, 1, 1, 1, 1, 1],  # no padding
                        [0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)  # no real token
    with mock.patch("torch.nn.functional.scaled_dot_product_attention") as sdpa:
        Y = one_line_formula(m, x, pad)
    assert sdpa.call_count == 0
    assert Y[1, :3].eq(0).all() and Y[3].eq(0).all() and Y[pad].ne(0).all()
    torch.testing.assert_close(m(x, pad), Y, rtol=1e-12, atol=1e-12)
