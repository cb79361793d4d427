"""A checkpoint saved from the original module (attnbook.seed) loads into Attention and agrees."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch

import attnbook
from attnbook import Attention
from attnbook.seed import Attention as Seed

SEED_TEXT = Path(__file__).resolve().parents[2] / "shared" / "seed" / "attention_seed.txt"


def _code_lines(text: str) -> list[str]:
    """The seed's code as stripped lines, without comments, docstrings or blank lines."""
    lines, in_doc = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if line.count('"""') == 1:
            in_doc = not in_doc
            continue
        if in_doc or not line or line.startswith("#") or line.startswith('"""'):
            continue
        lines.append(line)
    return lines


@pytest.mark.skipif(not SEED_TEXT.exists(), reason="../shared/seed is not beside this checkout")
def test_seed_fixture_is_the_seed():
    seed = SEED_TEXT.read_text(encoding="utf-8")
    seed = seed[seed.index("from __future__") :]
    seed = re.sub(r"\|\s*$", "", seed.strip())  # the page's closing gutter bar
    ours = Path(attnbook.seed.__file__).read_text(encoding="utf-8")
    ours = ours[ours.index("from __future__") : ours.index("SeedAttention =")]
    assert _code_lines(ours) == _code_lines(seed)


@pytest.mark.parametrize("pad_kind", [None, "right"])
def test_seed_checkpoint_round_trip(pad_kind):
    original = Seed(d_model=8, context_length=12)
    buf = io.BytesIO()
    torch.save(original.state_dict(), buf)
    buf.seek(0)
    ours = Attention(d_model=8, context_length=12)
    result = ours.load_state_dict(torch.load(buf, weights_only=True))  # strict by default
    assert not result.missing_keys and not result.unexpected_keys
    assert set(ours.state_dict()) == {"query.weight", "key.weight", "value.weight", "mask"}
    x = torch.randn(3, 10, 8)
    pad = None
    if pad_kind:
        pad = torch.arange(10)[None, :] < torch.tensor([10, 7, 3])[:, None]
    expected = original(x, pad)
    got = ours(x, pad)
    real = pad if pad is not None else torch.ones(3, 10, dtype=torch.bool)
    torch.testing.assert_close(got[real], expected[real], rtol=1e-6, atol=1e-6)


def test_our_checkpoint_loads_into_the_seed():
    ours = Attention(4, 6)
    original = Seed(4, 6)
    original.load_state_dict(ours.state_dict())
    x = torch.randn(2, 6, 4)
    torch.testing.assert_close(original(x), ours(x))
