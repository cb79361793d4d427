"""Flash-Decoding's partials: the PyTorch split (Lab 19's widget) against the kernel's own.

The split kernel's partial outputs and log-sum-exps, returned by ``flash_decoding(...,
return_partials=True)``, must merge to the kernel's output, equal what
:func:`attnbook.gpu.decoding.split_partials` computes without Triton, and merge to the explicit
module's output. Sizes are tiny: Triton's interpreter runs each program in NumPy.
"""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from attnbook import AttentionLayer
from attnbook.gpu.decoding import merge_partials, split_partials

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="Triton is not installed")


def inputs(three_d: bool = False):
    """One query per (sequence, head), g = 2, left padding that empties the first splits."""
    B, h, h_kv, T, d = 2, 4, 2, 37, 16
    q, k, v = torch.randn(B, h, 1, d), torch.randn(B, h_kv, T, d), torch.randn(B, h_kv, T, d)
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, :20] = False
    pad[1] = False  # no real key at all: every split empty, the output zero
    if three_d:
        q, k, v = q[:, 0], k[:, 0], v[:, 0]
    return q, k, v, pad


def reference(q, k, v, pad):
    return AttentionLayer(q.size(-1), k.size(-2)).attend(q, k, v, pad)[0]


def same_lse(a: torch.Tensor, b: torch.Tensor, atol: float) -> bool:
    """Equal to atol, and -inf (an empty split) in the same places."""
    empty = torch.isinf(a)
    return bool(torch.equal(empty, torch.isinf(b))
                and torch.allclose(a[~empty], b[~empty], atol=atol, rtol=0))


@pytest.mark.parametrize("n_split", [1, 3, 8])
@pytest.mark.parametrize("three_d", [False, True])
def test_split_partials_merge_to_the_reference(n_split, three_d):
    q, k, v, pad = inputs(three_d)
    outs, lses = split_partials(q, k, v, pad, n_split=n_split)
    assert outs.shape == (n_split, *q.shape) and lses.shape == (n_split, *q.shape[:-1], 1)
    torch.testing.assert_close(merge_partials(outs, lses), reference(q, k, v, pad))
    chunk = math.ceil(k.size(-2) / n_split)
    for s in range(n_split):  # each split is attention over its chunk alone
        part = slice(s * chunk, min((s + 1) * chunk, k.size(-2)))
        keys = pad[0, part]
        if three_d and keys.any():
            sc = (q[0] @ k[0, part].T / math.sqrt(q.size(-1)))[:, keys]  # (1, real keys)
            torch.testing.assert_close(lses[s, 0], torch.logsumexp(sc, -1, keepdim=True))
            torch.testing.assert_close(outs[s, 0], torch.softmax(sc, -1) @ v[0, part][keys])
        elif three_d:
            assert lses[s, 0].item() == -math.inf and not outs[s, 0].any()
    assert not outs[:, 1].any() and bool(torch.isinf(lses[:, 1]).all())  # all padding


def test_split_partials_rejects_several_queries():
    q, k, v, _ = inputs()
    with pytest.raises(ValueError, match="one query"):
        split_partials(torch.randn(2, 4, 3, 16), k, v)
    with pytest.raises(ValueError, match="n_split"):
        split_partials(q, k, v, n_split=0)


@needs_triton
@pytest.mark.parametrize("n_split", [1, 3, 5])
@pytest.mark.parametrize("three_d", [False, True])
def test_kernel_partials_merge_to_its_output_and_the_reference(n_split, three_d):
    from attnbook.gpu.decoding import flash_decoding

    q, k, v, pad = inputs(three_d)
    out, outs, lses = flash_decoding(q, k, v, pad, n_split=n_split, block_n=16,
                                     return_partials=True)
    assert torch.equal(out, flash_decoding(q, k, v, pad, n_split=n_split, block_n=16))
    torch.testing.assert_close(merge_partials(outs, lses), out)  # the merge kernel, in PyTorch
    torch.testing.assert_close(out, reference(q, k, v, pad))
    want_outs, want_lses = split_partials(q, k, v, pad, n_split=n_split)
    torch.testing.assert_close(outs, want_outs)  # the kernel's partials are the split's
    assert same_lse(lses, want_lses, atol=1e-5)


def test_wave_efficiency_example_in_chapter_19():
    """Ch. 19 and split_count's docstring: the "waves" rule compares wave efficiency
    w / ceil(w), not the last wave's fill. The numbers they quote are computed here."""
    from pathlib import Path

    from attnbook.gpu.decoding import split_count

    programs, n_sm = 16, 132

    def efficiency(n):
        w = programs * n / n_sm
        return w / math.ceil(w)

    n = 9
    total = programs * n  # 144 programs: two waves, the second 12 programs
    last = total - (math.ceil(total / n_sm) - 1) * n_sm
    chosen = split_count(1, programs, 32768, n_sm, rule="waves")
    page = (Path(__file__).resolve().parents[1] / "book" / "19_flash_decoding.md").read_text()
    said = " ".join(page.split())
    for text in (f"$Bh_{{kv}} = {programs}$ on ${n_sm}$ SMs",
                 f"$n = {n}$ gives $w = {total}/{n_sm}$",
                 f"${total}/{math.ceil(total / n_sm) * n_sm} \\approx {efficiency(n):.2f}$",
                 f"holds ${last}$ programs, ${100 * last / n_sm:.0f}\\%$ of the SMs",
                 f"takes $n = {chosen}$, one wave of ${programs * chosen}$ programs, "
                 f"efficiency $\\approx {efficiency(chosen):.2f}$"):
        assert text in said, text
    assert chosen == 8 and programs * chosen <= n_sm
    assert efficiency(n) < 0.85 * max(efficiency(k) for k in range(1, 129))
    from attnbook.gpu import decoding

    doc = " ".join(decoding.split_count.__doc__.split())
    assert (f"{total}/{2 * n_sm} ({efficiency(n):.2f}) and a last wave {last}/{n_sm} "
            f"({100 * last / n_sm:.0f}%) full; the rule takes {chosen} (one wave, "
            f"{programs * chosen}/{n_sm})") in doc
