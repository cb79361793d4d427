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


# The worked example by hand: chapter 2's d = 2, T = 3 exercise carried through chapters 3-7.
HAND_PAGES = {"03_scaling.md": "scaled", "04_causal_mask.md": "masked",
              "06_softmax.md": "weights", "07_weighted_sum.md": "out"}


def _block(page: str, start: str, end: str = "\n\n") -> str:
    """The text of ``page`` from ``start`` to the next ``end``."""
    text = (ROOT / "book" / page).read_text(encoding="utf-8")
    begin = text.index(start)
    return text[begin : text.index(end, begin)]


def _vectors(text: str, letter: str) -> list[list[float]]:
    """The vectors ``\\v<letter>_0 = (a, b)``, ``\\v<letter>_1``, ... typed in ``text``."""
    found = re.findall(r"\\v" + letter + r"_(\d) = \((-?\d+), (-?\d+)\)", text)
    assert [int(i) for i, _, _ in found] == list(range(len(found))), found
    return [[float(a), float(b)] for _, a, b in found]


def _row(row) -> str:
    """A row as the pages print it: 3 decimals, exact integers bare, a true minus sign, and
    no-break spaces after the commas."""
    def entry(v: float) -> str:
        if v == float("-inf"):
            return "−∞"
        text = f"{abs(v):.0f}" if v == round(v) else f"{abs(v):.3f}"
        return ("−" if v < 0 else "") + text
    return "(" + ",\u00a0".join(entry(v) for v in row) + ")"


def _by_hand():
    """The example's Q, K (chapter 2's exercise) and V (chapter 7), and PyTorch's own steps."""
    import torch.nn.functional as F

    exercise = _block("02_scores.md", ":label: ex-scores-hand", "```")
    q = torch.tensor(_vectors(exercise, "q"), dtype=torch.float64)  # (T, d) = (3, 2)
    k = torch.tensor(_vectors(exercise, "k"), dtype=torch.float64)
    v = torch.tensor(_vectors(_block("07_weighted_sum.md", "**The running example by hand"), "v"),
                     dtype=torch.float64)
    assert q.shape == k.shape == v.shape == (3, 2)
    scaled = q @ k.T / 2 ** 0.5  # (T, T)
    masked = scaled.masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    out = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    assert torch.allclose(out, weights @ v, rtol=0, atol=1e-12)
    return q, k, {"scaled": scaled, "masked": masked, "weights": weights, "out": out}


def test_chapter_2s_solution_gives_the_raw_scores_of_its_exercise():
    q, k, _ = _by_hand()
    solution = _block("02_scores.md", "```{solution} ex-scores-hand", "$$\n\n")
    product = solution[solution.rindex("= \\begin{pmatrix}") :]
    rows = product[product.index("}") + 1 : product.index("\\end")].split("\\\\")
    typed = [[float(x) for x in row.split("&")] for row in rows]
    assert torch.equal(torch.tensor(typed, dtype=torch.float64), q @ k.T)


def test_lab_2_glues_the_worked_example_computed_independently():
    from nbtools import glued

    _, _, steps = _by_hand()
    values = glued("02_scores.ipynb")
    for name, matrix in steps.items():
        for i, row in enumerate(matrix.tolist()):
            assert values[f"hand_{name}_{i}"] == _row(row), (name, i)
            # Far from a rounding tie, so no CPU prints another last digit.
            for x in row:
                if abs(x) != float("inf") and x != round(x):
                    assert abs((x * 1e3) % 1 - 0.5) > 1e-6, (name, i, x)
    assert sum(key.startswith("hand_") for key in values) == 4 * 3  # nothing else glued


def test_chapters_paste_the_worked_example_from_lab_2():
    """Chapters 3, 4, 6 and 7 each paste their step's three rows under one short passage."""
    for page, name in HAND_PAGES.items():
        passage = _block(page, "**The running example by hand.**")
        keys = re.findall(r"\{glue:text\}`\.\./notebooks/02_scores\.ipynb::(hand_\w+):s`", passage)
        assert keys == [f"hand_{name}_{i}" for i in range(3)], page
        assert "{ref}`ex-scores-hand`" in passage, page
        assert len(passage.splitlines()) <= 8, f"{page}: keep the passage short"
    assert "{doc}`Lab 2 <../notebooks/02_scores>` checks every one" in _block(
        "02_scores.md", "```{solution} ex-scores-hand", "```\n")
    # The lab computes it with the library's own step functions, and checks them by hand.
    source = "".join(_cell("02_scores.ipynb", "def row_text(")["source"])
    for step in ("attention_scores(", "scale_scores(", "causal_mask(", "masked_softmax(",
                 "weighted_sum(", ".attend("):
        assert step in source, step
