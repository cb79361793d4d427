"""One running example where the text says so: chapters 2 and 4 draw what their labs compute.

Chapter 4's figures (the masking steps and the Jacobian) are drawn from chapter 0's six-token
example, which Lab 4 builds draw for draw; chapter 2's trained-head figure titles its panels with
the statistic the chapter quotes, computed on Lab 2's held-out batch.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def _cell(lab: str, text: str) -> dict:
    """The one code cell of ``lab`` whose source contains ``text``."""
    nb = json.loads((ROOT / "notebooks" / lab).read_text(encoding="utf-8"))
    (cell,) = [c for c in nb["cells"]
               if c["cell_type"] == "code" and text in "".join(c["source"])]
    return cell


def _printed_matrix(cell: dict) -> list[list[str]]:
    """The rows of the first tensor a cell printed, as strings with the printed decimals."""
    text = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    body = text[text.index("tensor(") : text.index("]]") + 2]
    return [re.findall(r"-?\d+\.\d+", row) for row in body.split("],")]


def _fmt(t: torch.Tensor) -> list[list[str]]:
    return [[f"{v:.3f}" for v in row] for row in t.round(decimals=2).tolist()]


def test_lab_4_uses_chapter_0s_example_and_its_scores_are_the_figures():
    from figures.glance import tiny_example

    from attnbook import attention_scores, scale_scores

    x, attn = tiny_example()  # (1, 6, 8), float64
    with torch.no_grad():
        s = scale_scores(attention_scores(attn.query(x), attn.key(x)), 8)[0]  # (T, T)
    printed = _printed_matrix(_cell("04_causal_mask.ipynb", "print(scores[0].cpu().round("))
    assert printed == _fmt(s)
    assert printed[0] == printed[4]  # both "the": the running example, not fresh vectors


def test_lab_4s_jacobian_is_figure_4_3s():
    from figures.glance import tiny_example

    x, attn = tiny_example()
    J = torch.autograd.functional.jacobian(lambda z: attn(z)[0], x)[:, :, 0]  # (T, d, T, d)
    norms = J.pow(2).sum(dim=(1, 3)).sqrt()  # (T, T)
    assert _printed_matrix(_cell("04_causal_mask.ipynb", "block_norms = J.pow(2)")) == _fmt(norms)


def test_figure_2_3_titles_the_statistic_lab_2_glues():
    import figures.first_head as fig

    source = "".join(_cell("02_scores.ipynb", 'glue("scores_head_prev_before"')["source"])
    sequences, seed = fig.HELD_OUT
    assert f"run.task.batch({sequences}, seed={seed})" in source
