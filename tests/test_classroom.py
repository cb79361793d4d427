"""The classroom edition: student and instructor editions, Otter-Grader autograders, grading.

Grades ten notebooks of labs 3, 4 and 5 (about three minutes on two cores): the instructor
edition to full marks, an untouched student edition to zero, typical mistakes to partial marks
with the check's diagnosis, and notebooks that raise, loop or delete variables with a clear
message, without stopping the others. The registry of diagnoses and the course guide's generated
table are checked too.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import classroom  # noqa: E402

LABS = ["03_scaling", "04_causal_mask", "05_padding"]
needs_otter = pytest.mark.skipif(importlib.util.find_spec("otter") is None,
                                 reason="otter-grader is not installed")


def _edit(nb, check: str, old: str, new: str):
    """Replace ``old`` by ``new`` in the (first) exercise cell that calls ``check``."""
    for cell in nb.cells:
        if cell.cell_type == "code" and f"{check}(" in cell.source and old in cell.source:
            cell.source = cell.source.replace(old, new, 1)
            return nb
    raise AssertionError(f"no exercise cell with {check} and {old!r}")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("classroom")
    exercises = classroom.build([ROOT / "notebooks" / f"{lab}.ipynb" for lab in LABS], out)
    return out, exercises


@needs_otter
def test_editions(built):
    out, exercises = built
    for lab in LABS:
        lab_nb = nbformat.read(ROOT / "notebooks" / f"{lab}.ipynb", as_version=4)
        student = nbformat.read(out / "student" / f"{lab}.ipynb", as_version=4)
        teacher = nbformat.read(out / "instructor" / f"{lab}.ipynb", as_version=4)
        assert exercises[lab], lab
        assert not any(classroom.is_solution(c) for c in student.cells)
        assert not any(classroom.HIDDEN_NOTE in c.source for c in student.cells)
        solutions = sum(classroom.is_solution(c) for c in lab_nb.cells)
        assert sum(classroom.is_solution(c) for c in teacher.cells) == solutions > 0
        # Every other cell of the lab is in the student edition, unchanged, outputs included.
        kept = [c for c in lab_nb.cells if not classroom.is_solution(c)
                and classroom.HIDDEN_NOTE not in c.source]
        sources = [c.source for c in student.cells]
        assert all(c.source in sources for c in kept)
        graded = [c for c in student.cells if "otter" in c.metadata]
        assert len(graded) == len(exercises[lab])
        assert all(classroom.PLACEHOLDER.search(c.source) for c in graded)
        # The instructor edition is graded after each solution; it opens with grading notes.
        graded = [c for c in teacher.cells if "otter" in c.metadata]
        assert all(classroom.is_solution(c) for c in graded)
        assert "grading notes" in teacher.cells[1].source
        assert (out / "autograder" / f"{lab}.zip").exists()


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory):
    import grade

    out, _ = built
    subs = tmp_path_factory.mktemp("submissions")
    read = lambda edition, lab: nbformat.read(out / edition / f"{lab}.ipynb", as_version=4)  # noqa: E731

    def hand_in(student, lab, nb):
        (subs / student).mkdir(exist_ok=True)
        nbformat.write(nb, subs / student / f"{lab}.ipynb")

    for lab in LABS:
        hand_in("instructor", lab, read("instructor", lab))
    hand_in("untouched", "03_scaling", read("student", "03_scaling"))
    # Typical mistakes: ÷d, tril instead of triu, the padding mask not inverted.
    hand_in("typical", "03_scaling", _edit(
        read("student", "03_scaling"), "check_scaled_scores", "answer = ...",
        "answer = q @ k.transpose(-2, -1) / q.size(-1)"))
    hand_in("typical", "04_causal_mask", _edit(
        read("student", "04_causal_mask"), "check_causal_mask", "answer = ...",
        "answer = torch.tril(torch.ones(5, 5, dtype=torch.bool))"))
    nb = _edit(read("student", "05_padding"), "check_blocked", "answer = ...",
               "answer = causal | padding_mask[:, None, :]")
    hand_in("typical", "05_padding", _edit(nb, "check_empty_rows", "answer = ...",
                                          "answer = ~padding_mask.cumsum(dim=-1).bool()"))
    # Broken notebooks: one raises, one loops for ever, one deletes what the checks need.
    nb = _edit(read("student", "03_scaling"), "check_scaled_scores", "answer = ...",
               "answer = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))")
    hand_in("broken", "03_scaling", _edit(nb, "check_dot_variance", "answer = ...",
                                         "raise RuntimeError('my code is not finished')"))
    hand_in("broken", "04_causal_mask", _edit(read("student", "04_causal_mask"),
                                              "check_causal_mask", "answer = ...",
                                              "while True:\n    pass"))
    hand_in("broken", "05_padding", _edit(read("student", "05_padding"), "check_blocked",
                                          "answer = ...", "del padding_mask, causal\nanswer = 1"))
    (subs / "broken" / "99_not_a_lab.ipynb").write_text("{not json")
    # ATTNBOOK_GRADES_DIR keeps the report to read (e.g. for a pull request's note).
    grades = Path(os.environ.get("ATTNBOOK_GRADES_DIR") or tmp_path_factory.mktemp("grades"))
    rows = grade.grade(subs, grades, out, timeout=75)
    return grades, rows


def _scores(rows, student, lab):
    return {r["exercise"]: (r["points"], r["feedback"], r["note"]) for r in rows
            if r["student"] == student and r["lab"] == lab}


@needs_otter
def test_instructor_edition_gets_full_marks(graded):
    grades, rows = graded
    for lab in LABS:
        scores = _scores(rows, "instructor", lab)
        assert scores and all(p == 1 for p, _, _ in scores.values()), (lab, scores)
    with open(grades / "scores.csv", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows)
    assert {"student", "lab", "exercise", "points", "possible", "feedback"} <= set(table[0])


@needs_otter
def test_untouched_student_edition_gets_zero(graded):
    _, rows = graded
    scores = _scores(rows, "untouched", "03_scaling")
    assert len(scores) == 3 and all(p == 0 for p, _, _ in scores.values())
    assert all("still empty" in f for _, f, _ in scores.values())


@needs_otter
def test_typical_mistakes_get_partial_marks_and_their_diagnosis(graded):
    grades, rows = graded
    s3 = _scores(rows, "typical", "03_scaling")
    assert s3["scaled_scores"][0] == 0 and "divided by d = 8, not by √d" in s3["scaled_scores"][1]
    s4 = _scores(rows, "typical", "04_causal_mask")
    assert s4["causal_mask"][0] == 0 and "tril" in s4["causal_mask"][1]
    s5 = _scores(rows, "typical", "05_padding")
    assert s5["blocked"][0] == 0 and "without inverting it" in s5["blocked"][1]
    assert s5["empty_rows"][0] == 1  # partial marks: the other exercise is right
    report = (grades / "feedback.md").read_text(encoding="utf-8")
    assert "## typical" in report and "### 05_padding: 1 / 2" in report
    assert "without inverting it" in report and "divided by d = 8" in report


@needs_otter
def test_broken_notebooks_are_graded_with_a_clear_message(graded):
    grades, rows = graded
    s3 = _scores(rows, "broken", "03_scaling")
    assert s3["scaled_scores"][0] == 1, s3  # graded before the cell that raised
    assert s3["dot_variance"][0] == 0
    assert "RuntimeError: my code is not finished" in s3["dot_variance"][2]
    assert s3["dot_variance"][1].startswith(
        "Your exercise cell raised RuntimeError: my code is not finished.")
    s4 = _scores(rows, "broken", "04_causal_mask")
    assert all(p == 0 and "ran longer than 75 s" in f for p, f, _ in s4.values())
    s5 = _scores(rows, "broken", "05_padding")
    assert s5["blocked"][0] == 0 and "raised NameError" in s5["blocked"][1]
    report = (grades / "feedback.md").read_text(encoding="utf-8")
    assert "Not graded: no lab has this number." in report  # 99_not_a_lab
    # The other students were graded after the broken ones (alphabetical order: b < i < t < u).
    assert _scores(rows, "typical", "03_scaling") and _scores(rows, "untouched", "03_scaling")


@needs_otter
def test_a_notebook_that_waits_is_tried_twice_then_reported(built, tmp_path):
    """No CPU used for `stall` seconds (a cell waiting, or a reply the kernel lost): one retry."""
    pytest.importorskip("psutil")
    import grade

    out, _ = built
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(3600)")]
    path = tmp_path / "03_scaling.ipynb"
    nbformat.write(nb, path)
    result = grade.grade_notebook(path, "03_scaling", out, tmp_path / "r", timeout=120, stall=8)
    assert "made no progress for 8 s, twice" in result["note"]
    assert all(e["score"] == 0 for e in result["exercises"].values())


@needs_otter
def test_retag_repairs_metadata_dropped_by_an_editor(built):
    out, exercises = built
    nb = nbformat.read(out / "student" / "03_scaling.ipynb", as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("otter", None)
    assert classroom.retag(nb, exercises["03_scaling"]) == 3
    assert [c.metadata["otter"]["tests"][0] for c in nb.cells if "otter" in c.metadata] == [
        "scaled_scores", "dot_variance", "entropy"]


def test_every_lab_exercise_is_found_with_its_solution():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        exercises = classroom.find_exercises(nb)
        assert exercises, path.name
        for ex in exercises:
            assert ex.solutions, (path.name, ex.name)
            assert ex.module.startswith("attnbook.exercises."), (path.name, ex.name)


def test_diagnosis_registry_covers_every_check():
    from attnbook.exercises import diagnoses

    registry = diagnoses()
    assert "scaling" in registry and "causal_mask" in registry
    assert any("divided by d" in m for m in registry["scaling"]["check_scaled_scores"])
    for module, checks in registry.items():
        for check, mistakes in checks.items():
            assert mistakes, f"{module}.{check} recognises no mistake"


def test_course_guide_table_is_generated_and_up_to_date():
    spec = importlib.util.spec_from_file_location("classroom_guide",
                                                  ROOT / "scripts" / "classroom_guide.py")
    guide = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guide)
    assert guide.OUTPUT.read_text(encoding="utf-8") == guide.render(), (
        "run: python scripts/classroom_guide.py")
    assert guide.TIMES.read_text(encoding="utf-8") == guide.render_times(), (
        "run: python scripts/classroom_guide.py")
    page = (ROOT / "book" / "course_guide.md").read_text(encoding="utf-8")
    assert "{include} generated/course_checks.md" in page
    assert "{include} generated/course_times.md" in page

