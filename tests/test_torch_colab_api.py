"""Every torch name the library and the labs use exists in the torch that Colab runs (2.11).

The labs are tested here under the pinned torch 2.13; Colab's CPU and GPU runtimes run them under
2.11 (googlecolab/backend-info). scripts/torch_api.py reads 2.11's Python layer from its macOS
wheel (type stubs of the C functions included) and lists what it lacks: an attribute it does
not define, or a keyword argument no overload accepts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import torch_api  # noqa: E402


@pytest.fixture(scope="module")
def colab_torch():
    return torch_api.TorchSource(torch_api.download(torch_api.COLAB_TORCH))


def test_the_version_is_colabs():
    """The version checked is the one requirements-colab.txt records for Colab's runtimes."""
    assert f"torch {torch_api.COLAB_TORCH}" in (ROOT / "requirements-colab.txt").read_text()


def test_library_and_labs_use_only_what_colabs_torch_has(colab_torch):
    uses = torch_api.used_names()
    assert len(uses) > 100  # the scan sees the labs and the library, not an empty set
    assert {"torch.nn.functional.scaled_dot_product_attention",
            "torch.nn.attention.flex_attention.flex_attention",
            "torch.cuda.synchronize"} <= set(uses)
    missing = colab_torch.missing(uses)
    assert not missing, (f"torch {torch_api.COLAB_TORCH} (Colab) lacks these, used here: "
                         + "; ".join(missing))


def test_names_are_read_through_aliases_and_from_lab_cells(tmp_path):
    text = ("from torch.nn import functional as F\nimport torch.distributed as dist\n"
            "from torch import nn\n"
            "F.pad(x, (1, 0), value=0.0)\ndist.get_rank()\nnn.Linear(2, 3, bias=False)\n")
    uses = torch_api.names_in(text, "t")
    assert uses["torch.nn.functional.pad"].keywords == {"value"}
    assert "torch.distributed.get_rank" in uses
    assert uses["torch.nn.Linear"].keywords == {"bias"}
    nb = tmp_path / "lab.ipynb"
    nb.write_text('{"cells": [{"cell_type": "code", "source": ["if True:\\n", '
                  '"    !pip install x\\n", "import torch\\n", "torch.tril(m)"]}]}')
    assert "torch.tril" in torch_api.names_in(torch_api._notebook_code(nb), "lab")


def test_the_check_fails_on_what_a_release_lacks(colab_torch):
    text = ("import torch\nimport torch.nn.functional as F\n"
            "F.scaled_dot_product_attention(q, k, v, is_causal=True, bogus=1)\n"
            "torch.no_such_function(x)\ntorch.nn.Linear(2, 3, bias=False, nope=2)\n"
            "torch.ops.aten.not_an_op(x)\ntorch.ops.aten._unsafe_view(x, s)\n"
            "torch.nn.attention.SDPBackend.NOT_A_BACKEND\n"
            "torch.nn.attention.SDPBackend.FLASH_ATTENTION\n")
    missing = colab_torch.missing(torch_api.names_in(text, "t"))
    assert [m.split(" (")[0] for m in missing] == [
        "torch.nn.Linear(..., nope=)", "torch.nn.attention.SDPBackend.NOT_A_BACKEND",
        "torch.nn.functional.scaled_dot_product_attention(..., bogus=)",
        "torch.no_such_function", "torch.ops.aten.not_an_op"]


def test_an_older_release_lacks_what_was_added_since():
    """torch 2.3 predates FlexAttention (2.5) and SDPA's enable_gqa (2.5): the check sees it."""
    old = torch_api.TorchSource(torch_api.download("2.3.0"))
    missing = " ".join(old.missing(torch_api.used_names()))
    assert "torch.nn.attention.flex_attention.flex_attention " in missing
    assert "scaled_dot_product_attention(..., enable_gqa=)" in missing
