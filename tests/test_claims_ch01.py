"""Claims of the opening chapters (0, the module at a glance, and 1, the projections).

Each test pins one sentence of the prose: PyTorch's own behaviour (how nn.Linear stores its
matrix, which products raise, what a buffer is) and the library's (one layer sees no order but
the mask's, a stack of two can), and that the chapters' figures draw the very example their labs
compute and glue.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from attnbook import Attention

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import glued  # noqa: E402

# Chapter 1: nn.Linear stores the transpose ----------------------------------------------------


def test_linear_stores_out_by_in_and_computes_x_weight_transposed():
    layer = nn.Linear(4, 3, bias=False)
    x = torch.randn(2, 5, 4)
    assert layer.weight.shape == (3, 4)  # (out, in)
    torch.testing.assert_close(layer(x), x @ layer.weight.T)


def test_forgetting_the_transpose_raises_only_when_the_layer_is_not_square():
    x = torch.randn(3, 5, 6)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        x @ nn.Linear(6, 2, bias=False).weight  # (15 x 6) @ (2 x 6)
    square = nn.Linear(6, 6, bias=False)
    wrong = x @ square.weight  # no error, right shape, other numbers
    assert wrong.shape == square(x).shape
    assert not torch.allclose(wrong, square(x))


def test_the_causal_mask_is_a_saved_buffer_that_follows_the_module_but_is_not_trained():
    attn = Attention(d_model=4, context_length=8)
    assert sum(p.numel() for p in attn.parameters()) == 3 * 4**2
    assert "mask" in attn.state_dict()
    assert "mask" not in dict(attn.named_parameters())
    assert attn.to("meta").mask.device.type == "meta"


# Chapter 1: one layer sees no order except through the causal mask; a stack can ----------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_permuting_the_tokens_before_a_query_leaves_its_output_unchanged(seed):
    torch.manual_seed(seed)
    attn = Attention(d_model=8, context_length=8).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    perm = torch.cat([torch.randperm(5), torch.tensor([5])])  # shuffle tokens 0..4, keep 5
    with torch.no_grad():
        torch.testing.assert_close(attn(x[:, perm])[0, 5], attn(x)[0, 5])


def test_without_the_mask_permuting_the_tokens_permutes_the_outputs():
    attn = Attention(d_model=8, context_length=8).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    perm = torch.randperm(6)

    def unmasked(x):  # steps 2, 3, 5 and 6 without step 4
        q, k, v = attn.query(x), attn.key(x), attn.value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1) @ v

    with torch.no_grad():
        torch.testing.assert_close(unmasked(x[:, perm]), unmasked(x)[:, perm])


def test_equal_scores_give_the_running_mean_whose_weight_encodes_the_position():
    # One layer with W_q = 0 (every score equal) and a start token whose value stands out:
    # output i is 1/(i + 1), so the mask alone lets a causal layer count positions.
    counter = Attention(d_model=2, context_length=8).double()
    with torch.no_grad():
        counter.query.weight.zero_()
        counter.value.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
        x = torch.tensor([[1.0, 0.0]] + [[0.0, 1.0]] * 6, dtype=torch.float64)[None]  # (1, 7, 2)
        y = counter(x)[0, :, 0]  # (T,)
    torch.testing.assert_close(y, 1 / torch.arange(1, 8, dtype=torch.float64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_stacked_causal_layers_tell_orders_apart_that_one_layer_cannot(seed):
    torch.manual_seed(seed)
    attn = Attention(d_model=8, context_length=8).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    perm = [1, 0, 2, 3, 4, 5]  # swap the first two tokens
    with torch.no_grad():
        torch.testing.assert_close(attn(x[:, perm])[0, 2], attn(x)[0, 2])  # one layer: a multiset
        two, two_perm = attn(attn(x)), attn(attn(x[:, perm]))
    assert (two[0, 2] - two_perm[0, 2]).abs().max() > 1e-3  # two layers: the order shows


def test_lab_1_shows_the_counting_layer_and_the_two_layer_stack():
    nb = json.loads((ROOT / "notebooks" / "01_projections.ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(out.get("text", "")) for cell in nb["cells"]
                   if cell["cell_type"] == "code" for out in cell["outputs"])
    assert "1/y - 1:   [0, 1, 2, 3, 4, 5, 6] = the positions" in text
    assert "one layer:  output of 'sat' unchanged: True" in text
    assert "two layers: output of 'sat' unchanged: False" in text


def test_one_shared_matrix_makes_every_token_prefer_itself():
    torch.manual_seed(0)
    attn = Attention(d_model=64, context_length=16).double()
    x = torch.randn(50, 16, 64, dtype=torch.float64)
    with torch.no_grad():
        attn.key.weight.copy_(attn.query.weight)
        _, w = attn(x, return_weights=True)  # (B, T, T)
    own_key_wins = w.argmax(dim=-1) == torch.arange(16)
    assert own_key_wins.float().mean() > 0.95


# Chapters 0 and 1: the figures draw the labs' example -----------------------------------------


def test_the_glance_figure_shows_the_weights_lab_0_glues():
    from figures.glance import weights

    w = weights()  # (T, T)
    values = glued("00_at_a_glance.ipynb")
    for j in range(3):
        assert values[f"glance_a2{j}"] == f"{w[2, j].item():.2f}"
    below = w[1:][~torch.ones(6, 6, dtype=torch.bool).triu(1)[1:]]  # rows 1..5, keys j <= i
    assert values["glance_w_min"] == f"{below.min().item():.2f}"
    assert values["glance_w_max"] == f"{below.max().item():.2f}"


def test_the_first_output_is_the_first_value_whatever_the_parameters():
    from figures.glance import tiny_example

    x, attn = tiny_example()
    with torch.no_grad():
        torch.testing.assert_close(attn(x)[0, 0], attn.value(x)[0, 0])


def test_the_projections_figure_shows_lab_1s_token_vectors():
    from figures.projections import tiny_example

    x, _ = tiny_example()
    nb = json.loads((ROOT / "notebooks" / "01_projections.ipynb").read_text(encoding="utf-8"))
    printed = next("".join(out["text"]) for cell in nb["cells"] if cell["cell_type"] == "code"
                   and cell["source"] and "".join(cell["source"]).strip().endswith("show(x[0])")
                   for out in cell["outputs"] if "text" in out)
    rows = [line.split()[1:] for line in printed.strip().splitlines()]
    assert rows == [[f"{v:.2f}" for v in row] for row in x[0].tolist()]
