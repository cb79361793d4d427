"""Issue 48, item 3, through the real grading path: hand-ins of labs 20 and 21 graded by
``grading.grade`` (the student's kernel runs the notebook, the grader judges in its own process).

- a function that calls a ruled-out library function imported under another name
  (``from attnbook import apply_rope as turn``) is not graded, and flagged ``method``;
- a function that does not use a name the exercise requires (``allowed_matrix``) likewise;
- an exercise left as ``...`` is "Not answered";
- the rest, answered with the book's solutions, get full marks; and what the notebook's own
  check printed says the same (practice equals grade).

Both labs run in a kernel (70 s on this machine's two cores, the two side by side).
"""

from __future__ import annotations

import ast
import csv
import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from grading import grade, handouts, labs  # noqa: E402

needs_kernel = pytest.mark.skipif(importlib.util.find_spec("ipykernel") is None,
                                  reason="ipykernel is not installed")

# rotate_pair with apply_rope, renamed: the pair as features 2, 3 of a head of width 8 in the
# interleaved layout, whose pair 1 turns by 10000^(-2/8) per position (the lab's theta).
RENAMED = ("from attnbook import apply_rope as turn\n\n\n"
           "def rotate_pair(pair, m, theta):\n"
           "    x = torch.zeros(1, 8, dtype=pair.dtype)\n"
           "    x[0, 2:4] = pair\n"
           "    return turn(x, torch.tensor([m]), layout='interleaved')[0, 2:4]\n")
# document_window_allowed with the right values, but not from a mask_mod.
WITHOUT_REQUIRED = ("def document_window_allowed(document_ids, w):\n"
                    "    i = torch.arange(len(document_ids))\n"
                    "    back = i[:, None] - i[None, :]\n"
                    "    same = document_ids[:, None] == document_ids[None, :]\n"
                    "    return same & (back >= 0) & (back < w)\n")


def _def_segment(source: str, function: str) -> str:
    tree = ast.parse(source)
    [node] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    return ast.get_source_segment(source, node)


def _hand_in(stem: str, answers: dict[str, str | None]):
    """``stem``'s student edition, each exercise answered with the book's solution, or with
    ``answers[function]`` (a cell's code for the function; None leaves the ``...``)."""
    lab = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    exercises = labs.find_exercises(lab)
    nb = handouts.student_edition(lab, exercises, stem)
    for ex in exercises:
        if ex.function in answers and answers[ex.function] is None:
            continue
        [cell] = [c for c in nb.cells if c.cell_type == "code"
                  and f"def {ex.function}(" in c.source and re.search(r"return \.\.\.", c.source)]
        old = _def_segment(cell.source, ex.function)
        new = answers.get(ex.function) or _def_segment(lab.cells[ex.solutions[0]].source,
                                                       ex.function)
        cell.source = cell.source.replace(old, new.rstrip("\n"))
    return nb


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    subs = tmp_path_factory.mktemp("hand-ins") / "in"
    (subs / "lena").mkdir(parents=True)
    nbformat.write(_hand_in("20_positions", {"rotate_pair": RENAMED}),
                   subs / "lena" / "20_positions.ipynb")
    nbformat.write(_hand_in("21_mask_functions", {"document_window_allowed": WITHOUT_REQUIRED,
                                                  "softcap_grad": None}),
                   subs / "lena" / "21_mask_functions.ipynb")
    folder = grade.grade(subs, tmp_path_factory.mktemp("grades"), jobs=2, seed=48,
                         quiet=True)
    with open(folder / "exercises.csv", encoding="utf-8") as f:
        return {r["exercise"]: r for r in csv.DictReader(f)}


@needs_kernel
def test_a_ruled_out_function_under_another_name_is_not_graded(rows):
    r = rows["rotate_pair"]
    assert float(r["points"]) == 0, r
    assert "uses apply_rope" in r["feedback"] and "method" in r["flags"], r
    assert r["notebook_said"].startswith("Right values, but rotate_pair uses apply_rope"), r


@needs_kernel
def test_a_function_without_the_required_name_is_not_graded(rows):
    r = rows["document_mod"]
    assert float(r["points"]) == 0, r
    assert "does not use allowed_matrix" in r["feedback"] and "method" in r["flags"], r
    assert r["notebook_said"].startswith(
        "Right values, but document_window_allowed does not use allowed_matrix"), r


@needs_kernel
def test_an_unanswered_exercise_scores_nothing_and_the_rest_full_marks(rows):
    assert float(rows["softcap_grad"]["points"]) == 0
    assert "still returns `...`" in rows["softcap_grad"]["feedback"], rows["softcap_grad"]
    for name in ("relative_scores", "to_half", "alibi_slopes", "tile_counts"):
        r = rows[name]
        assert float(r["points"]) == float(r["possible"]) and "method" not in r["flags"], r
        assert r["notebook_said"].startswith("Correct"), r
