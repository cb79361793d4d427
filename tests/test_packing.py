"""pack puts documents in one row with document ids and per-document positions; unpack undoes it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnbook.masks import check_document_ids, materialize
from attnbook.packing import pack, pad, unpack


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6), seed=st.integers(0, 10**6))
def test_pack_then_unpack_is_the_identity(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    docs = [torch.randint(0, 100, (n,), generator=g) for n in lengths]
    p = pack(docs)
    T = sum(lengths)
    assert p.tokens.shape == p.document_ids.shape == p.positions.shape == (T,)
    assert p.lengths == tuple(lengths)
    check_document_ids(p.document_ids)  # non-decreasing
    for i, (doc, back) in enumerate(zip(docs, unpack(p.tokens, p.lengths))):
        assert torch.equal(doc, back)
        # positions restart at 0 in every document; ids name the document
        assert torch.equal(unpack(p.positions, p.lengths)[i], torch.arange(len(doc)))
        assert (unpack(p.document_ids, p.lengths)[i] == i).all()


def test_unpack_outputs_with_a_feature_axis():
    p = pack([torch.arange(3), torch.arange(2)])
    out = torch.randn(1, 5, 4)  # (1, T, d) what a model returns for the packed row
    parts = unpack(out, p.lengths, dim=1)
    assert [t.shape for t in parts] == [(1, 3, 4), (1, 2, 4)]
    assert torch.equal(torch.cat(parts, 1), out)


def test_packed_mask_is_block_diagonal_causal():
    p = pack([torch.arange(3), torch.arange(2)])
    allowed = materialize(p.mask_mod(), 5, 5)[0, 0]
    expected = torch.zeros(5, 5, dtype=torch.bool)
    expected[:3, :3] = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    expected[3:, 3:] = torch.tril(torch.ones(2, 2, dtype=torch.bool))
    assert torch.equal(allowed, expected)


def test_pad_right_pads_and_marks_real_tokens():
    padded, mask = pad([torch.tensor([5, 6, 7]), torch.tensor([1])], value=-1)
    assert padded.tolist() == [[5, 6, 7], [1, -1, -1]]
    assert mask.tolist() == [[True, True, True], [True, False, False]]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="at least one sequence"):
        pack([])
    with pytest.raises(ValueError, match=r"sequence 1 must be 1-D .*\(2, 2\)"):
        pack([torch.arange(3), torch.zeros(2, 2)])
    with pytest.raises(TypeError, match="list of 1-D tensors"):
        pack(torch.arange(3))
    with pytest.raises(TypeError, match="sequence 0 must be a 1-D torch.Tensor"):
        pack([[1, 2]])
    with pytest.raises(TypeError, match="share one dtype"):
        pack([torch.arange(3), torch.zeros(2)])
    with pytest.raises(ValueError, match="add up to 4 but the packed tensor has 5"):
        unpack(torch.arange(5), [2, 2])
