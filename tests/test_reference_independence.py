"""A reference that builds its mask with the code under test cannot catch a bug in that code.

The appendix "Testing attention code" (book/testing_attention_code.md, "Which references are
independent") and chapter 8's Ex. 8.3(c) say the tests' references build their masks from
scratch. Here attnbook's ``blocked_positions`` is broken on purpose, in every
module that holds a reference to it: a reference built the old way, with ``blocked_positions``
and ``to_sdpa_mask``, agrees with the broken module, while SDPA, MHA and the one-line formula
with masks written out disagree with it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import random_padding
from test_attention import mha_reference, sdpa_reference
from test_whole_module_properties import one_line_formula

import attnbook
import attnbook.attention
import attnbook.masks
from attnbook import Attention

ORIGINAL = attnbook.masks.blocked_positions


def no_causal(causal, padding_mask):
    """Mutant: the causal part dropped, so every query sees the future."""
    return ORIGINAL(torch.zeros_like(causal), padding_mask)


def padding_on_queries(causal, padding_mask):
    """Mutant of Ex. 8.3(c): padding applied to the queries (rows) instead of the keys."""
    return causal if padding_mask is None else causal | ~padding_mask[:, :, None]


def shared_code_reference(m, x, padding_mask):
    """SDPA with the mask built by attnbook, looked up when called: the old, blind reference."""
    T = x.shape[1]
    blocked = attnbook.masks.blocked_positions(m.mask[:T, :T], padding_mask)
    q, k, v = m.query(x), m.key(x), m.value(x)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attnbook.to_sdpa_mask(blocked))


REFERENCES = {"sdpa": sdpa_reference, "mha": mha_reference, "formula": one_line_formula}


@pytest.fixture
def mutate(monkeypatch):
    def apply(mutant):
        for module in (attnbook, attnbook.attention, attnbook.masks):
            monkeypatch.setattr(module, "blocked_positions", mutant)
    return apply


def agrees(m, x, pad, reference) -> bool:
    with torch.no_grad():
        return torch.allclose(m(x, pad)[pad], reference(m, x, pad)[pad], rtol=1e-10, atol=1e-10)


def batch(side):
    torch.manual_seed(0)
    m = Attention(6, 8).double()
    x = torch.randn(3, 8, 6, dtype=torch.float64)
    pad = random_padding(3, 8, side)
    pad[0] = torch.arange(8) < 5 if side == "right" else torch.arange(8) >= 3  # some padding
    return m, x, pad


@pytest.mark.parametrize("side", ["right", "left"])
def test_every_reference_agrees_with_the_intact_module(side):
    m, x, pad = batch(side)
    for reference in [*REFERENCES.values(), shared_code_reference]:
        assert agrees(m, x, pad, reference)


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_reference_sharing_the_mask_code_misses_a_mutant(mutate, side):
    m, x, pad = batch(side)
    mutate(no_causal)
    assert agrees(m, x, pad, shared_code_reference)  # blind: it carries the same bug


@pytest.mark.parametrize("name", REFERENCES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_independent_references_catch_a_mutant_without_the_causal_part(mutate, side, name):
    m, x, pad = batch(side)
    mutate(no_causal)
    assert not agrees(m, x, pad, REFERENCES[name])


@pytest.mark.parametrize("name", REFERENCES)
def test_padding_on_queries_is_caught_only_with_left_padding(mutate, name):
    """Ex. 8.3(c): with right padding the causal mask hides every padded key from real queries."""
    mutate(padding_on_queries)
    assert agrees(*batch("right"), REFERENCES[name])
    assert not agrees(*batch("left"), REFERENCES[name])
