"""Masks as functions (chapter 21): every mask_mod and score_mod gives the same attention on the
tiled path, the explicit module and PyTorch's FlexAttention; block_mask counts the tiles as
torch's create_block_mask does; the tiled backward matches autograd; packing needs the document
mask."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from attnbook import AttentionLayer
from attnbook.masks import (
    BLOCK_EMPTY,
    BLOCK_FULL,
    BLOCK_PARTIAL,
    and_mods,
    block_mask,
    causal_mask,
    causal_mod,
    document_mod,
    materialize,
    mod_indices,
    not_mod,
    or_mods,
    padding_mod,
    prefix_mod,
    relative_bias_mod,
    sink_mod,
    sliding_window_mod,
    softcap_mod,
)
from attnbook.online import tiled_attention, tiled_work
from attnbook.packing import pack
from attnbook.softmax import masked_softmax

try:
    from attnbook.positions import alibi_score_mod, alibi_slopes, apply_rope, sinusoidal_table
except ImportError:  # chapter 20's module is written in parallel; its tests skip until it lands
    alibi_score_mod = None

B, H, T, D = 2, 2, 24, 8
DOC_IDS = torch.tensor([0] * 5 + [1] * 9 + [2] * 3 + [3] * 7)  # (T,) a packed row of 4 documents
DOC_IDS_B = torch.stack([DOC_IDS, torch.tensor([0] * 12 + [1] * 12)])  # (B, T) one row each
PAD = torch.arange(T)[None, :] < torch.tensor([[T], [17]])  # (B, T) right padding, True = real

# name -> (mask_mod, causal): prefix-LM is not causal (its prefix is read both ways), so the
# tiled path takes causal=False for it; every other mask_mod is causal by itself.
MASKS = {
    "causal": (causal_mod, True),
    "sliding_window": (sliding_window_mod(5), True),
    "prefix": (prefix_mod(7), False),
    "document": (document_mod(DOC_IDS), True),
    "document_per_row": (document_mod(DOC_IDS_B), True),
    "sink": (sink_mod(2, 4), True),
    "padding": (and_mods(causal_mod, padding_mod(PAD)), True),
    "document_or_sink": (or_mods(document_mod(DOC_IDS), sink_mod(1, 3)), True),
    "window_not_diagonal": (and_mods(sliding_window_mod(6),
                                     not_mod(lambda b, h, q, k: q == k)), True),
}


def _qkv(seed=0, shape=(B, H, T, D), grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, dtype=torch.float64, generator=g).requires_grad_(grad)
            for _ in range(3)]


def _explicit(q, k, v, mask_mod, score_mod=None):
    """The explicit steps with the materialised mask (a reference for non-causal masks too)."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, T)
    if score_mod is not None:
        s = score_mod(s, *mod_indices(q.size(0), q.size(1), 0, q.size(-2), 0, k.size(-2)))
    allowed = materialize(mask_mod, q.size(-2), k.size(-2), q.size(0), q.size(1))
    return masked_softmax(s, ~allowed) @ v


def _flex(q, k, v, mask_mod, score_mod=None, block=8):
    bm = create_block_mask(mask_mod, q.size(0), q.size(1), q.size(-2), k.size(-2),
                           device="cpu", BLOCK_SIZE=block)
    with warnings.catch_warnings():
        # Eager flex_attention warns that it is meant for debugging: that is what it does here.
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=bm)


@pytest.mark.parametrize("name", list(MASKS))
def test_mask_mod_agrees_on_tiled_explicit_module_and_flex(name):
    mod, causal = MASKS[name]
    q, k, v = _qkv()
    flex = _flex(q, k, v, mod)
    tiled = tiled_attention(q, k, v, mask_mod=mod, causal=causal, block_size=5)
    torch.testing.assert_close(tiled, flex, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(_explicit(q, k, v, mod), flex, rtol=1e-10, atol=1e-10)
    module = AttentionLayer(D, T).double()
    if causal:  # the module materialises the mask_mod and ANDs it with its causal buffer
        torch.testing.assert_close(module.attend(q, k, v, mask_mod=mod)[0], flex,
                                   rtol=1e-10, atol=1e-10)
    else:  # ... which would cut prefix-LM's bidirectional prefix back to causal: refused
        with pytest.raises(ValueError, match="plain causal attention"):
            module.attend(q, k, v, mask_mod=mod)


def _score_mods():
    g = torch.Generator().manual_seed(1)
    mods = {"softcap": softcap_mod(0.8),
            "relative_bias": relative_bias_mod(torch.randn(H, 2 * T - 1, dtype=torch.float64,
                                                           generator=g)),
            "relative_bias_shared": relative_bias_mod(torch.randn(2 * T - 1, dtype=torch.float64,
                                                                  generator=g)),
            "no_derivative": lambda s, b, h, q, k: s * torch.sigmoid(s) + 0.1 * h}
    if alibi_score_mod is not None:
        mods["alibi"] = alibi_score_mod(alibi_slopes(H, dtype=torch.float64))
    return mods


SCORE_MODS = ["softcap", "relative_bias", "relative_bias_shared", "no_derivative", "alibi"]


@pytest.mark.parametrize("name", SCORE_MODS)
def test_score_mod_agrees_on_tiled_explicit_and_flex(name):
    mods = _score_mods()
    if name not in mods:
        pytest.skip("attnbook.positions.alibi_score_mod does not exist yet (chapter 20)")
    score_mod, mask_mod = mods[name], MASKS["sliding_window"][0]
    q, k, v = (3 * t for t in _qkv(2))  # larger scores: the softcap bites
    flex = _flex(q, k, v, mask_mod, score_mod)
    tiled = tiled_attention(q, k, v, mask_mod=mask_mod, score_mod=score_mod, block_size=7)
    torch.testing.assert_close(tiled, flex, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(_explicit(q, k, v, mask_mod, score_mod), flex,
                               rtol=1e-10, atol=1e-10)
    if name == "softcap":  # it did change something: every |score| < cap afterwards
        assert not torch.allclose(tiled, tiled_attention(q, k, v, mask_mod=mask_mod,
                                                         block_size=7))


def test_score_mod_alone_keeps_the_causal_padding_rule():
    q, k, v = _qkv(3)
    cap = softcap_mod(2.0)
    ref = _explicit(q, k, v, and_mods(causal_mod, padding_mod(PAD)), cap)
    torch.testing.assert_close(tiled_attention(q, k, v, PAD, score_mod=cap, block_size=4), ref)


@pytest.mark.parametrize("name", ["causal", "sliding_window", "prefix", "document",
                                  "document_per_row", "sink", "padding"])
@pytest.mark.parametrize("block", [(8, 8), (4, 12), (24, 6)])
def test_block_mask_counts_equal_create_block_mask(name, block):
    mod = MASKS[name][0]
    ours = block_mask(mod, T, T, *block, B=B, h=H)  # T = 24 is a multiple of every block size
    theirs = create_block_mask(mod, B, H, T, T, device="cpu", BLOCK_SIZE=block)
    partial, full = ours.kinds == BLOCK_PARTIAL, ours.kinds == BLOCK_FULL
    assert torch.equal(partial.sum(-1).int(), theirs.kv_num_blocks)
    assert torch.equal(full.sum(-1).int(), theirs.full_kv_num_blocks)
    # the same tiles, not only as many: torch lists their column indices first in each row
    for kinds_row, n, idx in ((partial, theirs.kv_num_blocks, theirs.kv_indices),
                              (full, theirs.full_kv_num_blocks, theirs.full_kv_indices)):
        for b in range(B):
            for hh in range(H):
                for r in range(kinds_row.size(2)):
                    listed = set(idx[b, hh, r, : n[b, hh, r]].tolist())
                    assert listed == set(kinds_row[b, hh, r].nonzero().flatten().tolist())
    n_tiles = ours.kinds.numel()
    assert sum(ours.counts.values()) == n_tiles
    assert ours.counts["empty"] == int((ours.kinds == BLOCK_EMPTY).sum())


def test_short_last_tiles_full_here_partial_in_torch():
    # T = 10 with tiles of 4: torch pads the mask with False, so a last, shorter tile that may
    # attend everywhere is "partial" there and "full" here (only entries that exist count).
    ours = block_mask(causal_mod, 10, 10, 4, 4)
    theirs = create_block_mask(causal_mod, 1, 1, 10, 10, device="cpu", BLOCK_SIZE=4)
    assert ours.kinds[0, 0].tolist() == [[1, 0, 0], [2, 1, 0], [2, 2, 1]]
    assert theirs.kv_num_blocks.flatten().tolist() == [1, 1, 3]  # row 2: tiles 0, 1 partial
    assert theirs.full_kv_num_blocks.flatten().tolist() == [0, 1, 0]
    assert ours.counts == {"empty": 3, "partial": 3, "full": 3}
    # share of the 100 entries in non-empty tiles: all but 3 tiles of 4x4, 4x4 and 4x2
    assert ours.computed_fraction == pytest.approx(1 - (16 + 8 + 8) / 100)


@pytest.mark.parametrize("name, score", [("document", "softcap"), ("sink", "no_derivative"),
                                         ("prefix", "relative_bias"), ("padding", None),
                                         ("document_per_row", "no_derivative")])
def test_tiled_gradients_match_autograd_through_the_explicit_path(name, score):
    mod, causal = MASKS[name]
    score_mod = None if score is None else _score_mods()[score]
    q, k, v = (t.detach().mul(2).requires_grad_() for t in _qkv(4))
    dout = torch.randn(B, H, T, D, dtype=torch.float64)
    tiled = tiled_attention(q, k, v, mask_mod=mod, causal=causal, score_mod=score_mod,
                            block_size=5)
    grads = torch.autograd.grad(tiled, (q, k, v), dout)
    ref = _explicit(q, k, v, mod, score_mod)
    expected = torch.autograd.grad(ref, (q, k, v), dout)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    assert all(torch.isfinite(g).all() for g in grads)


def test_softcap_derivative_is_one_minus_tanh_squared():
    cap = softcap_mod(3.0)
    s = torch.linspace(-20, 20, 101, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(cap(s, 0, 0, 0, 0).sum(), s)
    torch.testing.assert_close(cap.derivative(s, 0, 0, 0, 0), auto)
    torch.testing.assert_close(auto, 1 - torch.tanh(s / 3) ** 2)
    assert cap(s, 0, 0, 0, 0).abs().max() < 3


def test_module_forward_with_mask_mod_equals_tiled_and_fused_falls_back():
    x = torch.randn(B, T, D, dtype=torch.float64)
    m = AttentionLayer(D, T).double()
    mod = document_mod(DOC_IDS_B)
    out = m(x, mask_mod=mod)
    q, k, v = m.query(x), m.key(x), m.value(x)
    torch.testing.assert_close(out, tiled_attention(q, k, v, mask_mod=mod, block_size=6))
    m.fused = True  # SDPA's path takes no mask function: the explicit steps run instead
    torch.testing.assert_close(m(x, mask_mod=mod), out)
    _, w = m(x, PAD, mask_mod=sliding_window_mod(3), return_weights=True)  # (B, T, T)
    allowed = materialize(sliding_window_mod(3), T, T)[0, 0] & PAD[:, None, :]
    assert (w[~allowed] == 0).all()
    # a padded query whose whole window is padding (query 19 of row 1) gets an all-zero row
    torch.testing.assert_close(w.sum(-1), allowed.any(-1).double())
    torch.testing.assert_close(m(x, mask_mod=causal_mod), m(x))


def test_tiles_are_skipped_and_counted():
    q, k, v = _qkv(5, shape=(1, 1, 64, D))
    mod = sliding_window_mod(8)
    stats, dense = {}, {}
    out = tiled_attention(q, k, v, mask_mod=mod, block_size=8, stats=stats)
    same = tiled_attention(q, k, v, mask_mod=mod, block_size=8, stats=dense, skip_empty=False)
    torch.testing.assert_close(out, same)
    bm = block_mask(mod, 64, 64, 8, 8)
    # 8 x 8 tiles; a window of 8 touches the diagonal tile and the one before it
    assert stats == {"tiles": 64, "computed": 15, "skipped": 49, "masked": 15, "full": 0}
    assert stats["skipped"] == bm.counts["empty"]
    assert dense["computed"] == 64 and dense["skipped"] == 0
    assert stats == tiled_work(64, 64, 8, mask_mod=mod)
    # without a mask_mod the original loop's counts: the causal loop never visits the future
    plain = {}
    tiled_attention(q, k, v, block_size=8, stats=plain)
    assert plain == {"tiles": 64, "computed": 36, "skipped": 28, "masked": 8, "full": 28}
    assert plain == tiled_work(64, 64, 8)
    # the backward visits the forward's tiles and gives the explicit path's gradients
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    tiled_attention(qg, kg, vg, mask_mod=mod, block_size=8).sum().backward()
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    _explicit(*ref, mod).sum().backward()
    torch.testing.assert_close(kg.grad, ref[1].grad)


def test_three_d_inputs_and_grouped_heads():
    q3, k3, v3 = _qkv(6, shape=(B, T, D))
    mod = document_mod(DOC_IDS_B)
    ref = AttentionLayer(D, T).double().attend(q3, k3, v3, mask_mod=mod)[0]
    torch.testing.assert_close(tiled_attention(q3, k3, v3, mask_mod=mod, block_size=5), ref)
    q, _, _ = _qkv(7, shape=(B, 4, T, D))
    _, k, v = _qkv(8, shape=(B, 2, T, D))
    got = tiled_attention(q, k, v, mask_mod=mod, score_mod=softcap_mod(1.0), block_size=6)
    want = _explicit(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), mod,
                     softcap_mod(1.0))
    torch.testing.assert_close(got, want)


def test_learned_bias_table_needs_recompute_false():
    table = torch.randn(H, 2 * T - 1, dtype=torch.float64, requires_grad=True)
    q, k, v = _qkv(9, grad=True)
    rel = relative_bias_mod(table)
    with pytest.raises(ValueError, match="recompute=False"):
        tiled_attention(q, k, v, score_mod=rel, block_size=8)
    out = tiled_attention(q, k, v, score_mod=rel, block_size=8, recompute=False)
    (g_tiled,) = torch.autograd.grad(out.sum(), table)
    (g_ref,) = torch.autograd.grad(_explicit(q, k, v, causal_mod, rel).sum(), table)
    torch.testing.assert_close(g_tiled, g_ref)


def test_materialize_is_the_flip_of_the_causal_buffer():
    allowed = materialize(causal_mod, 6, 6)
    assert allowed.shape == (1, 1, 6, 6)
    assert torch.equal(allowed[0, 0], ~causal_mask(6))  # True = may attend vs True = blocked
    w = materialize(sliding_window_mod(2), 4, 4)[0, 0].int().tolist()
    assert w == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    p = materialize(prefix_mod(2), 4, 4)[0, 0].int().tolist()
    assert p == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    s = materialize(sink_mod(1, 2), 5, 5)[0, 0].int().tolist()
    assert s[4] == [1, 0, 0, 1, 1]


def test_bad_mask_mods_and_arguments_are_named():
    with pytest.raises(TypeError, match="must take 4 arguments"):
        materialize(lambda q, k: q >= k, 4, 4)
    with pytest.raises(TypeError, match="must take 4 arguments"):
        tiled_attention(*_qkv(), mask_mod=lambda b, h, q: q > 0)
    with pytest.raises(TypeError, match="must take 5 arguments"):
        tiled_attention(*_qkv(), score_mod=lambda s, b, h, q: s)
    with pytest.raises(TypeError, match="dtype torch.int64"):
        materialize(lambda b, h, q, k: q - k, 4, 4)
    with pytest.raises(TypeError, match="got bool"):
        materialize(lambda b, h, q, k: True, 4, 4)
    with pytest.raises(TypeError, match="& | ~"):
        materialize(lambda b, h, q, k: (q >= k) and (q - k < 2), 4, 4)
    with pytest.raises(ValueError, match="does not broadcast"):
        materialize(lambda b, h, q, k: torch.ones(3, dtype=torch.bool), 4, 4)
    with pytest.raises(ValueError, match=r"position 3 has id 0 after 1"):
        document_mod(torch.tensor([0, 0, 1, 0]))
    with pytest.raises(TypeError, match="must hold integers"):
        document_mod(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"\(T,\) or \(B, T\)"):
        document_mod(torch.zeros(1, 2, 3, dtype=torch.long))
    for bad, err in ((0, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="block_m"):
            block_mask(causal_mod, 8, 8, bad, 4)
        with pytest.raises(err, match="block_size"):
            tiled_attention(*_qkv(), mask_mod=causal_mod, block_size=bad)
    with pytest.raises(ValueError, match="window W"):
        sliding_window_mod(0)
    with pytest.raises(TypeError, match="at least one mask_mod"):
        and_mods()
    with pytest.raises(ValueError, match="positive finite"):
        softcap_mod(0)
    with pytest.raises(ValueError, match="odd number"):
        relative_bias_mod(torch.zeros(2, 4))


# ----- packing: what goes wrong without the document mask, or without per-document positions


def _docs_and_alone(seed=10, lengths=(6, 9, 5)):
    """Three documents of token vectors, packed into one row, and each one's output alone."""
    g = torch.Generator().manual_seed(seed)
    docs = [torch.randn(n, D, dtype=torch.float64, generator=g) for n in lengths]
    return docs, pack([torch.arange(n) for n in lengths])  # ids and positions only


def test_without_the_document_mask_documents_leak_into_each_other():
    docs, packed = _docs_and_alone()
    m = AttentionLayer(D, 32).double()
    row = torch.cat(docs)[None]  # (1, T, d) the packed row
    alone = torch.cat([m(d[None])[0] for d in docs])  # (T, d) each document by itself
    leaky = m(row)[0]  # causal only: document 2 sees documents 0 and 1
    fixed = m(row, mask_mod=packed.mask_mod())[0]
    first = slice(0, packed.lengths[0])
    torch.testing.assert_close(leaky[first], alone[first])  # the first has nothing before it
    assert (leaky[6:] - alone[6:]).abs().max() > 1e-2  # the later ones are changed
    torch.testing.assert_close(fixed, alone, rtol=1e-12, atol=1e-12)
    # the tiled path, with and without the mask, says the same
    q, k, v = m.query(row), m.key(row), m.value(row)
    torch.testing.assert_close(tiled_attention(q, k, v, mask_mod=packed.mask_mod(),
                                               block_size=4)[0], alone)


@pytest.mark.skipif(alibi_score_mod is None, reason="attnbook.positions (chapter 20) is missing")
def test_absolute_positions_need_restarting_rope_does_not():
    docs, packed = _docs_and_alone()
    T_row = sum(packed.lengths)
    m = AttentionLayer(D, 32).double()
    table = sinusoidal_table(32, D, dtype=torch.float64)  # (32, d) absolute positions
    row = torch.cat(docs)
    alone = torch.cat([m((d + table[: len(d)])[None])[0] for d in docs])
    mod = packed.mask_mod()
    # document mask, but positions 0..T-1 along the row: later documents see other positions
    global_pos = m((row + table[:T_row])[None], mask_mod=mod)[0]
    per_doc = m((row + table[packed.positions])[None], mask_mod=mod)[0]
    assert (global_pos[6:] - alone[6:]).abs().max() > 1e-3
    torch.testing.assert_close(per_doc, alone, rtol=1e-12, atol=1e-12)
    # RoPE scores depend on i - j only, so inside the document mask a shifted start changes
    # nothing but rounding: restarting positions matters for absolute schemes, not for RoPE.
    q, k, v = m.query(row)[None], m.key(row)[None], m.value(row)[None]
    rope = {name: tiled_attention(apply_rope(q, pos), apply_rope(k, pos), v, mask_mod=mod,
                                  block_size=4)
            for name, pos in (("global", torch.arange(T_row)), ("per_doc", packed.positions))}
    torch.testing.assert_close(rope["global"], rope["per_doc"], rtol=1e-10, atol=1e-10)


def test_a_plan_built_once_is_reused():
    from attnbook.online import tile_plan

    q, k, v = (t.detach().requires_grad_() for t in _qkv(11))
    mod = document_mod(DOC_IDS)
    plan = tile_plan(q, k, None, True, 5, mod, softcap_mod(1.5))
    out = tiled_attention(q, k, v, block_size=5, plan=plan)
    ref = tiled_attention(q, k, v, block_size=5, mask_mod=mod, score_mod=softcap_mod(1.5))
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), q)[0],
                               torch.autograd.grad(_explicit(q, k, v, mod, softcap_mod(1.5))
                                                   .sum(), q)[0])
    with pytest.raises(ValueError, match="either a plan or mask_mod"):
        tiled_attention(q, k, v, block_size=5, plan=plan, mask_mod=mod)
    with pytest.raises(ValueError, match="need another"):
        tiled_attention(q, k, v, block_size=6, plan=plan)
