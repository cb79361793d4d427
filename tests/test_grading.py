"""Grading for marks, end to end: the adversarial submissions folder graded as an instructor would.

tests/submissions/make_submissions.py writes the hand-ins of labs 04, 06 and 07 (cheats,
LMS names, broken notebooks, typical mistakes, patched torch, older and newer editions);
grade.grade runs them two kernels at a time (about two minutes on two cores) and each student's
score, flags and feedback are checked. Fast unit tests of discovery, static checks and the
gradebook folder come first.
"""

from __future__ import annotations

import csv
import importlib.util
import inspect
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
from conftest import lab_namespace, solution_function  # noqa: E402
from grading import discover, editions, grade, gradebook, handouts, judge, labs  # noqa: E402

LABS = ["04_causal_mask", "06_softmax", "07_weighted_sum"]
ALL_LABS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
HISTORY = __import__("make_submissions").old_lab("06_softmax") is not None  # not shallow
needs_history = pytest.mark.skipif(not HISTORY, reason="the git history of the labs is absent")
needs_kernel = pytest.mark.skipif(importlib.util.find_spec("ipykernel") is None,
                                  reason="ipykernel is not installed")


def _lab(name):
    return nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)


# Discovery: names real classes produce.


@pytest.mark.parametrize("rel, student, sid, lab", [
    ("alice/06_softmax.ipynb", "alice", "", "06_softmax"),
    ("alice/Copy of 06_softmax.ipynb", "alice", "", "06_softmax"),
    ("alice/06_softmax (1).ipynb", "alice", "", "06_softmax"),
    ("anaperez_1234_56789_06_softmax.ipynb", "anaperez", "1234", "06_softmax"),
    ("anaperez_LATE_1234_56789_06_softmax-2.ipynb", "anaperez", "1234", "06_softmax"),
    ("Ana Perez_123456_assignsubmission_file_06_softmax.ipynb", "Ana Perez", "123456",
     "06_softmax"),
    ("Ana Perez_123456_assignsubmission_file_/lab.ipynb", "Ana Perez", "123456", "06_softmax"),
    ("bob/untitled.ipynb", "bob", "", "06_softmax"),  # found by its title cell
])
def test_submissions_are_recognised_by_name_and_content(tmp_path, rel, student, sid, lab):
    nb = _lab("06_softmax")
    if rel.startswith("bob"):
        nb.metadata.pop("attnbook", None)
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    [sub] = discover.discover(tmp_path, ALL_LABS)
    assert (sub.student, sub.student_id, sub.lab, sub.problem) == (student, sid, lab, "")


def test_lab_id_in_metadata_wins_over_the_file_name(tmp_path):
    nb = handouts.student_edition(_lab("04_causal_mask"),
                                  labs.find_exercises(_lab("04_causal_mask")),
                                  "04_causal_mask")
    (tmp_path / "zoe").mkdir()
    nbformat.write(nb, tmp_path / "zoe" / "06_softmax.ipynb")  # misnamed by the student
    [sub] = discover.discover(tmp_path, ALL_LABS)
    assert (sub.lab, sub.how) == ("04_causal_mask", "metadata")


def test_gradescope_export_names_come_from_its_metadata(tmp_path):
    (tmp_path / "submission_777").mkdir()
    nbformat.write(_lab("06_softmax"), tmp_path / "submission_777" / "06_softmax.ipynb")
    (tmp_path / "submission_metadata.yml").write_text(
        "submission_777:\n  :submitters:\n  - :name: Kim Lee\n    :sid: '42'\n")
    [sub] = discover.discover(tmp_path, ALL_LABS)
    assert (sub.student, sub.student_id) == ("Kim Lee", "42")


def test_the_latest_of_duplicates_is_picked(tmp_path):
    for name in ("06_softmax.ipynb", "06_softmax (1).ipynb"):
        nbformat.write(_lab("06_softmax"), tmp_path / name)
        os.utime(tmp_path / name, (1000, 1000))  # an LMS download: equal times
    subs = [discover.Submission("x", tmp_path / n, copy=discover._copy_number(Path(n).stem))
            for n in ("06_softmax (1).ipynb", "06_softmax.ipynb")]
    chosen, others = discover.pick(subs)
    assert chosen.path.name == "06_softmax (1).ipynb" and len(others) == 1
    os.utime(tmp_path / "06_softmax.ipynb", (2000, 2000))  # a newer file wins over the number
    assert discover.pick(subs)[0].path.name == "06_softmax.ipynb"


# Static checks of the notebook's source.


def test_tampering_lines_are_found_and_the_labs_have_none():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in (
        "import attnbook.exercises.softmax as sm\nsm.check_softmax = lambda *a: True",
        "check_jacobian = print",
        "if x:\n    !pip install foo\nsetattr(sm, 'check_temperature', None)",
        "import sys\nsys.modules['attnbook.exercises.softmax'] = None",
        "answer = q @ k.T",
        "import torch\ntorch.allclose = lambda *a, **k: True",
        "import torch as t\nt.Tensor.__eq__ = lambda a, b: True",
        "from torch import Tensor\nTensor.__eq__ = None",
        "import numpy as np\nnp.allclose = None",
        "import builtins\nbuiltins.print = None",
        "from attnbook import softmax\nsoftmax.stable_softmax += 0",
        # Not tampering: a lab's settings, the learner's own objects.
        "import torch\ntorch.backends.cuda.matmul.allow_tf32 = False\nx = torch.ones(2)\n"
        "x[0] = 3\nx.requires_grad = True\nclass A:\n    pass\nA.b = 1",
    )]
    hits = judge.tampering_lines(nb)
    assert [h.split(":")[0] for h in hits] == [f"cell {i}" for i in (0, 1, 2, 3, *range(5, 11))
                                               ], hits
    assert "cell 6: `t.Tensor.__eq__ = lambda a, b: True`" in hits  # the line, quoted
    for lab in ALL_LABS:  # the book's own labs (solutions included) raise no false alarm
        assert judge.tampering_lines(_lab(lab)) == [], lab


def test_order_kernel_and_never_run_flags():
    nb = _lab("06_softmax")
    codes = lambda n: [f.code for f in judge.source_flags(n)]  # noqa: E731
    assert codes(nb) == []
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[3].execution_count, code[4].execution_count = 5, 4
    nb.metadata["kernelspec"]["name"] = "attn-course"
    assert codes(nb) == ["out-of-order", "kernel"]
    for c in code:
        c.execution_count = None
    assert "never-run" in codes(nb)


@pytest.mark.parametrize("lab", ALL_LABS)
def test_every_exercise_of_every_lab_is_a_function_with_hidden_inputs(lab):
    """Issue 31 §1: every lab with exercises phrases them as functions graded on hidden inputs
    (no ``answer = ...`` value left), and the same seed gives the same inputs."""
    from attnbook.exercises import hidden_cases

    exercises = labs.find_exercises(_lab(lab))
    values = [ex.name for ex in exercises if not ex.function]
    assert not values, f"{lab}: exercises still taking a value: {values}"
    for ex in exercises:
        spec = judge.spec_of(ex)
        assert spec is not None, (lab, ex.name, "no GRADED entry for", ex.check)
        assert spec.function == ex.function, (lab, ex.name, spec.function, ex.function)
        cases = hidden_cases(spec, 1)
        assert len(cases) >= 2, (lab, ex.name)
        # The same seed gives the same inputs; another seed gives others (where drawn).
        again, other = hidden_cases(spec, 1), hidden_cases(spec, 2)
        assert repr(again[0].call) == repr(cases[0].call)
        if any(hasattr(a, "shape") and a.numel() > 1 and a.is_floating_point()
               for c in cases for a in c.call):
            assert repr(other) != repr(cases), (lab, ex.name, "the seed draws nothing")


def test_several_tensors_come_back_as_they_were_returned():
    """A function that returns a tuple of tensors (two outputs) is judged on that tuple, as the
    notebook's own check judged it, not on a string of its repr."""
    import torch

    pair = (torch.ones(2, 3), torch.zeros(2))
    item = {"kind": "sequence", "type": "tuple",
            "items": [{"kind": "tensor", "value": t} for t in pair]}
    back = judge._value(item)
    assert isinstance(back, tuple) and all(map(torch.equal, back, pair))
    assert judge._same(back, pair) and not judge._same(back, (pair[0], torch.ones(2)))
    assert judge._value({**item, "type": "list"}) == list(back)


def test_library_functions_are_known_by_the_file_of_their_code():
    """The run-time tamper check: a library function's code comes from its module's file."""
    from attnbook.exercises import softmax

    known = judge.pristine_functions()
    assert known["attnbook.exercises.softmax.check_softmax"] == softmax.__file__
    # The notebook's check_softmax wraps the plain check in the practice rules (issue 31).
    assert inspect.unwrap(softmax.check_softmax).__code__.co_filename == softmax.__file__
    assert all(name.startswith("attnbook.") for name in known) and len(known) > 50
    # A decorated function (torch.no_grad) is known by the file of the code it wraps.
    assert all(path.endswith(".py") and "/attnbook/" in path for path in known.values())
    # Part VI's checkers and library are guarded too (labs 16-19 are graded); only the Triton
    # kernels stay out of the grader's process.
    assert "attnbook.exercises.gpu.check_merge" in known
    assert "attnbook.gpu.io_cost.flash_io" in known
    assert not any(name.startswith("attnbook.gpu.kernels.") for name in known)


def test_run_folders_are_dated_and_never_overwritten(tmp_path):
    a, b = gradebook.new_folder(tmp_path), gradebook.new_folder(tmp_path)
    assert a != b and a.exists() and b.exists()
    gradebook.new_folder(tmp_path, "final")
    with pytest.raises(FileExistsError):
        gradebook.new_folder(tmp_path, "final")


# The adversarial folder, graded end to end.


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    import make_submissions

    subs = tmp_path_factory.mktemp("submissions") / "in"
    make_submissions.build(subs)
    # The term that handed out lab 06 before its exercises became functions, frozen afterwards.
    releases = tmp_path_factory.mktemp("releases")
    if make_submissions.old_lab("06_softmax") is not None:
        editions.freeze_ref(releases, "2026-autumn", make_submissions.OLD_EDITION,
                            ["06_softmax"])
    # This term's editions, as the repository ships them (ruth's lab 04).
    import shutil

    shutil.copytree(editions.RELEASES / make_submissions.TERM_RELEASE,
                    releases / make_submissions.TERM_RELEASE)
    # ATTNBOOK_GRADES_DIR keeps the run folder to read (e.g. for a pull request's note).
    out = Path(os.environ.get("ATTNBOOK_GRADES_DIR") or tmp_path_factory.mktemp("grades"))
    from grading import sandbox

    with pytest.MonkeyPatch.context() as patch:  # kai's loop ignores interrupts: wait less
        patch.setattr(sandbox, "INTERRUPT_WAIT", 3.0)
        patch.setattr(sandbox, "PROBE_WAIT", 2.0)
        folder = grade.grade(subs, out, LABS, jobs=2, seed=20261201, quiet=True,
                             config_path=ROOT / "tests" / "submissions" / "points.toml",
                             releases=releases)
    with open(folder / "gradebook.csv", encoding="utf-8") as f:
        book = {r["student"]: r for r in csv.DictReader(f)}
    with open(folder / "exercises.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return folder, book, rows


def _ex(rows, student, lab):
    return {r["exercise"]: (float(r["points"]), r["feedback"], r["flags"]) for r in rows
            if r["student"] == student and r["lab"] == lab}


def _flags(book, student):
    return book[student]["flags"].split("; ") if book[student]["flags"] else []


@needs_kernel
def test_gradebook_has_one_row_per_student_and_a_column_per_lab(graded):
    folder, book, rows = graded
    old = ["mia", "nora", "pablo", "uma", "vic", "wes"] if HISTORY else []
    assert sorted(book) == sorted(["Julia Kim", "ada", "ben", "cleo", "dan", "eve", "frankli",
                                   "gus", "hana", "ivan", "kai", "lena", *old, "olga", "pia",
                                   "quinn", "rosa", "ruth", "sam", "tom"])
    header = list(next(iter(book.values())))
    assert header[:2] == ["student", "student_id"] and header[2:5] == LABS
    assert {"total", "possible", "review", "flags", "files", "editions"} <= set(header)
    for r in book.values():
        assert float(r["total"]) == pytest.approx(sum(float(r[lab]) for lab in LABS))
        assert r["possible"] == "10"  # 3 + 3 + 4: hull_bound is worth 2 (points.toml)
    assert len(rows) == len(book) * 9  # long form: every student x every exercise
    assert len(list((folder / "feedback").glob("*.md"))) == len(book)
    run = json.loads((folder / "run.json").read_text())
    assert run["notebooks"] == 20 + len(old) and run["seed"] == 20261201
    assert run["releases"] == (["2026-autumn", "2026-autumn-b"] if HISTORY
                               else ["2026-autumn-b"])
    assert all(r["edition"] for r in rows if r["file"])  # every graded exercise names it


@needs_kernel
def test_right_answers_get_full_marks_and_a_missing_lab_zero(graded):
    _, book, rows = graded
    assert (book["ada"]["04_causal_mask"], book["ada"]["06_softmax"]) == ("3", "3")
    assert book["ada"]["07_weighted_sum"] == "0" and "missing:07_weighted_sum" in _flags(book,
                                                                                          "ada")
    assert all("hidden inputs" in f for _, f, _ in _ex(rows, "ada", "06_softmax").values())
    assert "tamper" not in book["ada"]["flags"] and book["hana"]["06_softmax"] == "3"
    assert "06_softmax:never-run" in _flags(book, "hana")
    assert "graded as the notebook defines it at its end" in _ex(rows, "hana",
                                                                  "06_softmax")["jacobian"][1]


@needs_kernel
def test_replaced_checkers_score_nothing_and_are_flagged(graded):
    _, book, rows = graded
    assert book["ben"]["06_softmax"] == "0" and book["ben"]["review"] == "yes"
    assert "06_softmax:tamper" in _flags(book, "ben")
    report = (graded[0] / "feedback" / "ben.md").read_text(encoding="utf-8")
    assert "setattr(_sm, _name" in report  # the line, found in the source
    assert "check_softmax was redefined" in report  # and what the run saw


@needs_kernel
def test_overwritten_inputs_and_hard_coded_numbers_fail_on_hidden_inputs(graded):
    _, book, rows = graded
    cleo = _ex(rows, "cleo", "07_weighted_sum")
    assert cleo["outputs"][0] == 0 and "right on the lab's own input only" in cleo["outputs"][1]
    assert "largest value over all tokens" in cleo["hull_bound"][1]  # typical mistakes named
    assert "a second time" in cleo["permuted_outputs"][1]
    dan = _ex(rows, "dan", "06_softmax")
    assert dan["softmax"][0] == 0 and "hard-coded" in dan["softmax"][2]
    assert "it raised NotImplementedError: no time left." in dan["temperature"][1]
    assert "(Your exercise cell raised NotImplementedError: no time left.)" in dan["temperature"][1]
    assert book["dan"]["06_softmax"] == "1"  # the one right exercise still counts
    assert "06_softmax:kernel" in _flags(book, "dan")  # graded with python3 all the same
    assert "06_softmax=dan/Copy of 06_softmax.ipynb" in book["dan"]["files"]


@needs_kernel
def test_the_books_lab_with_solutions_is_flagged_and_only_her_cells_count(graded):
    _, book, rows = graded
    assert book["eve"]["06_softmax"] == "0" and "06_softmax:solutions-present" in _flags(book,
                                                                                         "eve")
    eve = _ex(rows, "eve", "06_softmax")
    assert "naive formula" in eve["softmax"][1] and "diag(p)" in eve["jacobian"][1]
    assert "Correct" not in eve["softmax"][1]  # the solution's saved "Correct" is not hers


@needs_kernel
def test_lms_names_and_duplicates(graded):
    _, book, rows = graded
    assert book["frankli"]["student_id"] == "1234" and book["frankli"]["06_softmax"] == "3"
    assert "06_softmax:duplicate" in _flags(book, "frankli")
    assert "frankli_1234_56790_06_softmax-1.ipynb" in book["frankli"]["files"]
    assert "published-solution" in _ex(rows, "frankli", "06_softmax")["softmax"][2]
    julia = _ex(rows, "Julia Kim", "04_causal_mask")
    assert book["Julia Kim"]["student_id"] == "123456"
    assert book["Julia Kim"]["04_causal_mask"] == "0"
    assert "top-left corner" in julia["cached_mask"][1]
    assert "filled with 0" in julia["window_scores"][1]
    assert "outputs before j" in julia["changed_outputs"][1]


@needs_kernel
def test_an_endless_loop_costs_only_its_exercise(graded):
    _, book, rows = graded
    gus = _ex(rows, "gus", "06_softmax")
    assert gus["softmax"][0] == gus["jacobian"][0] == 1
    assert gus["temperature"][0] == 0 and "ran longer than 8 s" in gus["temperature"][1]
    assert any(f.startswith("not-graded") for f in _flags(book, "gus"))  # notes.ipynb
    report = (graded[0] / "feedback" / "gus.md").read_text(encoding="utf-8")
    assert "notes.ipynb" in report and "not a lab of this course" in report
    kai = _ex(rows, "kai", "07_weighted_sum")
    assert (kai["outputs"][0], kai["hull_bound"][0], kai["permuted_outputs"][0]) == (1, 2, 0)
    assert "ignored the interrupt" in kai["permuted_outputs"][1]
    assert "07_weighted_sum:stopped" in _flags(book, "kai")
    hana = (graded[0] / "feedback" / "hana.md").read_text(encoding="utf-8")
    assert "not a readable notebook" in hana  # the broken 07: reported, the run went on


@needs_kernel
def test_patching_torch_is_flagged_with_its_lines_and_changes_no_score(graded):
    _, book, rows = graded
    assert book["lena"]["06_softmax"] == "0" and "06_softmax:tamper" in _flags(book, "lena")
    report = (graded[0] / "feedback" / "lena.md").read_text(encoding="utf-8")
    assert "`torch.allclose = lambda *a, **k: True`" in report  # the line, quoted
    assert "`torch.Tensor.__eq__ = lambda self, other:" in report
    assert "torch.allclose was replaced by the notebook's own code" in report  # and at run time
    assert "the Jacobian looks like diag(p)" in _ex(rows, "lena", "06_softmax")["jacobian"][1]


@needs_kernel
@needs_history
def test_an_older_edition_is_graded_with_its_releases_checks(graded):
    _, book, rows = graded
    mia = _ex(rows, "mia", "06_softmax")
    assert book["mia"]["06_softmax"] == "3", mia
    assert "06_softmax:edition" in _flags(book, "mia")
    assert "06_softmax=" in book["mia"]["editions"] and "(release 2026-autumn)" in book["mia"][
        "editions"]
    report = (graded[0] / "feedback" / "mia.md").read_text(encoding="utf-8")
    assert "Graded with edition" in report and "release 2026-autumn" in report


@needs_kernel
def test_this_terms_edition_is_graded_with_the_release_the_repository_ships(graded):
    """Ruth's lab 04 is the edition make classroom stamped this term, before the practice
    wrapper changed every edition id: release 2026-autumn-b grades it, with its own checks."""
    _, book, rows = graded
    ruth = _ex(rows, "ruth", "04_causal_mask")
    assert book["ruth"]["04_causal_mask"] == "3", ruth
    lab04 = [f for f in _flags(book, "ruth") if f.startswith("04_causal_mask:")]
    assert sorted(lab04) == ["04_causal_mask:edition", "04_causal_mask:never-run"], lab04
    assert "(release 2026-autumn-b)" in book["ruth"]["editions"]
    assert all("release 2026-autumn-b" in r["edition"] for r in rows
               if r["student"] == "ruth" and r["lab"] == "04_causal_mask"), ruth


@needs_kernel
@needs_history
def test_an_older_edition_without_its_release_is_flagged_not_renamed_or_deleted(graded):
    _, book, rows = graded
    assert "04_causal_mask:old-edition" in _flags(book, "nora")
    nora = _ex(rows, "nora", "04_causal_mask")
    assert all("renamed" not in f and "is not in the edition handed in" in f
               for _, f, _ in nora.values()), nora
    report = (graded[0] / "feedback" / "nora.md").read_text(encoding="utf-8")
    assert "without an edition stamp" in report
    # its cells import checks the library has since dropped: no release would grade them, so
    # the flag asks for the answers in the current edition instead of advising a release
    assert "no longer has (attnbook.exercises.causal_mask.check_causal_mask" in report
    assert "copy their answers into the current edition" in report
    assert "(current)" in report  # the edition the grader has, named


@needs_kernel
@needs_history
def test_a_stamped_older_edition_is_flagged_and_graded_as_far_as_the_checks_go(graded):
    """The edition of lab 07 handed out before its exercises changed: recognised as older by
    its stamp (its commit is an ancestor of this checkout), the unchanged exercise graded."""
    import make_submissions

    _, book, rows = graded
    assert "07_weighted_sum:old-edition" in _flags(book, "pablo")
    pablo = _ex(rows, "pablo", "07_weighted_sum")
    assert book["pablo"]["07_weighted_sum"] == "2", pablo  # the hull bound, worth 2
    assert all("is not in the edition handed in" in pablo[name][1]
               for name in ("outputs", "permuted_outputs")), pablo
    report = (graded[0] / "feedback" / "pablo.md").read_text(encoding="utf-8")
    commit = make_submissions.stamped_old_edition().metadata["attnbook"]["commit"]
    assert f"commit {commit[:10]}" in report and "editions.py NAME COMMIT LAB" in report


@needs_kernel
def test_a_newer_edition_is_flagged_and_graded_as_far_as_the_checks_go(graded):
    _, book, rows = graded
    assert book["olga"]["06_softmax"] == "3" and "06_softmax:newer-edition" in _flags(book, "olga")
    report = (graded[0] / "feedback" / "olga.md").read_text(encoding="utf-8")
    assert "edition 0123456789ab" in report and "git pull" in report


@needs_kernel
def test_the_common_mistakes_are_named_and_method_limits_applied(graded):
    _, book, rows = graded
    pia, quinn = _ex(rows, "pia", "06_softmax"), _ex(rows, "quinn", "06_softmax")
    assert book["pia"]["06_softmax"] == "0" and book["quinn"]["06_softmax"] == "1"
    assert "maximum of the whole matrix" in pia["softmax"][1]
    assert "uses autograd" in pia["jacobian"][1] and "method" in pia["jacobian"][2]
    assert "uses temperature_softmax" in pia["temperature"][1]
    assert "shifted by its row's max but normalised by its column's sum" in quinn["softmax"][1]
    assert "uses softmax_jacobian" in quinn["jacobian"][1] and quinn["temperature"][0] == 1
    rosa = _ex(rows, "rosa", "04_causal_mask")
    assert book["rosa"]["04_causal_mask"] == "1" and "uses causal_mask" in rosa["cached_mask"][1]
    assert "the attention weights" in rosa["window_scores"][1]
    sam, tom = _ex(rows, "sam", "07_weighted_sum"), _ex(rows, "tom", "07_weighted_sum")
    assert book["sam"]["07_weighted_sum"] == "2" and ".values" in sam["hull_bound"][1]
    assert book["tom"]["07_weighted_sum"] == "1"
    assert "uses einsum" in tom["outputs"][1] and "hard-coded" in tom["hull_bound"][2]


@needs_kernel
def test_the_notebooks_own_checks_agree_with_the_grade(graded):
    """Issue 31: what the practice check printed in the graded run says Correct exactly where
    the grade is full, for every hand-in whose checks were not tampered with and whose edition
    the grader has (a stale edition's old checks may say Correct: it is flagged instead). An
    older edition graded with its release's checks ran in the grader's kernel against the
    current library, whose check of a changed exercise asks something else (mia's lab 06:
    the rows' softmax then, the columns' now): its grade is its release's, what it printed is
    not, so it is left out too."""
    _, _, rows = graded
    compared = 0
    for r in rows:
        said = r["notebook_said"]
        skip = {"tamper", "old-edition", "edition"}
        if not said or not r["file"] or skip & set(r["flags"].split("; ")):
            continue
        full = float(r["points"]) == float(r["possible"])
        assert said.startswith("Correct") == full, (r["student"], r["exercise"], said,
                                                    r["feedback"])
        compared += 1
    assert compared >= 40
    said = {(r["student"], r["exercise"]): r["notebook_said"] for r in rows}
    assert said[("pia", "jacobian")].startswith("Right values, but jacobian_from_p uses")
    assert said[("tom", "hull_bound")].startswith("Right values on the lab's input, but not")


@needs_kernel
def test_out_of_order_work_is_explained(graded):
    _, book, rows = graded
    ivan = _ex(rows, "ivan", "06_softmax")
    assert ivan["softmax"][0] == 0 and "saved notebook shows “Correct”" in ivan["softmax"][1]
    assert "06_softmax:out-of-order" in _flags(book, "ivan")
    assert book["ivan"]["06_softmax"] == "2"


@needs_kernel
def test_the_kernel_is_sandboxed(tmp_path):
    """Scrubbed environment, its own home and folder, no network where Linux allows it."""
    import socket

    from grading import sandbox
    from grading.sandbox import Kernel, Limits, can_unshare_network

    os.environ["ATTNBOOK_SECRET_FOR_TEST"] = "do-not-leak"
    host = socket.create_server(("127.0.0.1", 0))  # a service of the grader's machine
    try:
        with Kernel(tmp_path / "k", Limits(memory_gib=2.0)) as kernel:
            # Results go through a file: ipykernel 7 may deliver printed output after it says
            # it is idle, so a cell's stdout is for diagnostics only (scores use files too).
            reply = kernel.run(
                "import json, os, pathlib, resource, socket\n"
                "seen = {'secret': os.environ.get('ATTNBOOK_SECRET_FOR_TEST'), 'cwd': os.getcwd(),"
                " 'home': os.environ['HOME'], 'gib': resource.getrlimit(resource.RLIMIT_AS)[0]"
                " // 2**30}\n"
                "try:\n    socket.create_connection(('192.0.2.1', 80), timeout=2)\n"
                "except OSError as e:\n    seen['errno'] = e.errno\n"
                "pathlib.Path(os.environ['HOME'], 'note').write_text('x')\n"
                "pathlib.Path('seen.json').write_text(json.dumps(seen))", timeout=60)
            assert reply.status == "ok", reply
            seen = json.loads((tmp_path / "k" / "work" / "seen.json").read_text())
            assert seen["secret"] is None and seen["gib"] == 2
            assert seen["cwd"] == str(tmp_path / "k" / "work")
            assert seen["home"] == str(tmp_path / "k" / "home")
            if can_unshare_network():
                assert seen["errno"] == 101  # ENETUNREACH: no network interface at all
                # Its own loopback works (lab 15's gloo processes), the machine's does not.
                port = host.getsockname()[1]
                reply = kernel.run(
                    "import json, pathlib, socket\n"
                    "own = socket.create_server(('127.0.0.1', 0))\n"
                    "socket.create_connection(own.getsockname(), timeout=2).close()\n"
                    "try:\n"
                    f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                    "    host = 'reached'\n"
                    "except OSError as e:\n    host = e.errno\n"
                    "pathlib.Path('lo.json').write_text(json.dumps(host))", timeout=60)
                assert reply.status == "ok", reply
                lo = json.loads((tmp_path / "k" / "work" / "lo.json").read_text())
                assert lo == 111, lo  # ECONNREFUSED: nothing listens on the kernel's own lo
            big = kernel.run("x = bytearray(3 * 2**30)", timeout=120)
            assert big.status == "error" and "MemoryError" in big.error
            flood = kernel.run("for i in range(10**5):\n    print(i)", timeout=180)
            assert flood.status == "ok" and len(flood.stdout) < 2 * sandbox.PRINTED_LIMIT
            loop = kernel.run("while True:\n    pass", timeout=3)
            assert loop.status == "timeout"
            after = kernel.run("pathlib.Path('after').write_text('ok')", 60)
            assert after.status == "ok", after  # a late interrupt must not reach this cell
            assert (tmp_path / "k" / "work" / "after").exists()
    finally:
        host.close()
        del os.environ["ATTNBOOK_SECRET_FOR_TEST"]
    assert (tmp_path / "k" / "home" / "note").exists()  # the write stayed in its own home


@pytest.mark.parametrize("lab", ALL_LABS)
def test_the_books_solutions_pass_every_hidden_input(lab):
    """The hidden inputs and the checks agree with the book's own solutions, for several seeds,
    and the practice check in the notebook would say Correct for them too (the method limits
    and the second input)."""
    from attnbook.exercises import hidden_cases, practice_verdict

    lab_nb = _lab(lab)
    for ex in labs.find_exercises(lab_nb):
        spec = judge.spec_of(ex)
        assert spec is not None and ex.function, (lab, ex.name, "not a function exercise")
        right = solution_function(lab_nb, ex)
        for seed in (1, 2, 3):
            for case in hidden_cases(spec, seed):
                fb = spec.check(right(*case.call), *case.check_args)
                assert fb.ok, (lab, ex.name, case.label, fb.message)
        namespace = {**lab_namespace(lab_nb), "__name__": "__main__", ex.function: right}
        first = hidden_cases(spec, 7)[0]
        fb = spec.check(right(*first.call), *first.check_args)
        assert practice_verdict(spec, fb, namespace).ok, (lab, ex.name)


def test_typical_mistakes_fail_with_a_name():
    """Each typical mistake of the adversarial folder fails on a hidden input with its own
    diagnosis."""
    import torch
    from make_submissions import MISTAKES

    from attnbook.exercises import hidden_cases
    from attnbook.softmax import stable_softmax

    for lab in [*LABS, "10_online_softmax"]:
        lab_nb = _lab(lab)
        for ex in labs.find_exercises(lab_nb):
            spec = judge.spec_of(ex)
            right = solution_function(lab_nb, ex)
            if ex.function in MISTAKES:
                namespace = {"torch": torch, "stable_softmax": stable_softmax}
                args = ", ".join(inspect.signature(right).parameters)
                exec(f"def wrong({args}):\n{MISTAKES[ex.function]}", namespace)  # noqa: S102
                verdicts = [spec.check(namespace["wrong"](*c.call), *c.check_args)
                            for c in hidden_cases(spec, 1)]
                assert not all(v.ok for v in verdicts), (lab, ex.name)
                assert any("looks like" in v.message for v in verdicts), (lab, ex.name)


def test_partial_credit_is_the_share_of_hidden_inputs_when_asked():
    from grading.execute import Run

    from attnbook.exercises import hidden_cases

    ex = next(e for e in labs.find_exercises(_lab("06_softmax")) if e.name == "softmax")
    spec = judge.spec_of(ex)
    cases = hidden_cases(spec, 4)
    right = solution_function(_lab("06_softmax"), ex)
    results = [{"kind": "tensor", "value": right(*c.call)} for c in cases]
    results[0] = {"kind": "error", "repr": "ValueError: no"}
    captured = {"answer": {"kind": "missing"}, "args": [], "kwargs": {}, "tamper": [],
                "function": {"defined": True, "names": ["exp"], "source": "", "results": results}}
    run = Run({"softmax": captured}, {}, [], [])
    cfg = {"defaults": {"points": 3, "seconds": 5, "case_seconds": 5, "partial": True},
           "labs": {}}
    exercises = [ex]
    [v], _ = judge.judge("06_softmax", exercises, run, {"softmax": cases}, cfg, None, set(), {})
    assert v.points == pytest.approx(3 * (len(cases) - 1) / len(cases))
    assert "it raised ValueError: no" in v.message
    cfg["defaults"]["partial"] = False
    [v], _ = judge.judge("06_softmax", exercises, run, {"softmax": cases}, cfg, None, set(), {})
    assert v.points == 0
    captured["function"]["names"] = ["exp", "softmax"]  # the method limit
    [v], _ = judge.judge("06_softmax", exercises, run, {"softmax": cases}, cfg, None, set(), {})
    assert v.points == 0 and v.flags == ["method"] and "uses softmax" in v.message


@needs_kernel
def test_an_exercise_that_is_not_a_function_is_checked_on_the_handed_out_inputs(tmp_path):
    """Lab 03's exercises took values in this term's editions (release 2026-autumn-b, before
    they became functions): such a hand-in is graded with that release's checks; a student who
    overwrites q gets 0 and a flag, while the untouched inputs of the next exercise are accepted
    (a reference run of the release's edition gives the inputs)."""
    [old] = [e for e in editions.releases() if e.lab == "03_scaling"
             and e.release == "2026-autumn-b"]
    nb = old.student
    assert not any(ex.function for ex in old.exercises)  # the value form
    for cell in nb.cells:
        if "check_scaled_scores(answer, q, k)" in cell.source:
            cell.source = cell.source.replace(
                "answer = ...", "q = torch.zeros_like(q)\n"
                "answer = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))")
        if "check_dot_variance(answer, qs, ks)" in cell.source:
            cell.source = cell.source.replace("answer = ...",
                                              "answer = (qs * ks).sum(dim=-1).var()")
    (tmp_path / "in" / "zed").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "in" / "zed" / "03_scaling.ipynb")
    folder = grade.grade(tmp_path / "in", tmp_path / "out", jobs=2, seed=1, quiet=True,
                         config_path=ROOT / "tests" / "submissions" / "points.toml")
    with open(folder / "exercises.csv", encoding="utf-8") as f:
        rows = {r["exercise"]: r for r in csv.DictReader(f)}
    assert rows["scaled_scores"]["points"] == "0"
    assert "inputs-changed" in rows["scaled_scores"]["flags"]
    assert "The given input q differs" in rows["scaled_scores"]["feedback"]
    assert rows["dot_variance"]["points"] == "1", rows["dot_variance"]["feedback"]
    assert "inputs-changed" not in rows["dot_variance"]["flags"]
    assert "old-edition" not in rows["dot_variance"]["flags"]
    assert json.loads((folder / "run.json").read_text())["reference_runs"] == 1
    with open(folder / "gradebook.csv", encoding="utf-8") as f:
        [row] = list(csv.DictReader(f))
    assert "2026-autumn-b" in json.dumps(row), row  # the gradebook records the edition graded


@needs_kernel
def test_a_cell_that_ignores_interrupts_is_stopped_with_its_kernel(tmp_path, monkeypatch):
    """A student who turns SIGINT off to outlast the time limit: the kernel is shut down."""
    from grading import sandbox

    monkeypatch.setattr(sandbox, "INTERRUPT_WAIT", 3.0)
    monkeypatch.setattr(sandbox, "PROBE_WAIT", 2.0)
    with sandbox.Kernel(tmp_path / "k") as kernel:
        reply = kernel.run("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                           "while True:\n    pass", timeout=2)
        assert reply.status == "dead" and "did not stop" in reply.error
        assert not kernel.alive() and kernel.run("1", 5).status == "dead"


def test_an_unstamped_notebook_is_recognised_by_its_cells():
    """Before editions were stamped: the current lab by its functions, else an old edition."""
    lab = _lab("06_softmax")
    exercises = labs.find_exercises(lab)
    now = editions.Edition("06_softmax", "current-id", exercises)
    student = handouts.student_edition(lab, exercises)  # no lab given: no stamp
    assert "attnbook" not in student.metadata
    assert editions.identify(student, "06_softmax", now, []) == (now, None)
    # One exercise deleted: still the current edition, graded exercise by exercise.
    student.cells = [c for c in student.cells if "def softmax_columns(" not in c.source]
    assert editions.identify(student, "06_softmax", now, []) == (now, None)
    # None of its functions: an edition the grader does not know.
    student.cells = [c for c in student.cells if "def " not in c.source]
    edition, flag = editions.identify(student, "06_softmax", now, [])
    assert edition is now and flag.code == "old-edition" and "current-id" in flag.text
    # Stamped with an id and a commit this checkout lacks: newer (or another fork's).
    student.metadata["attnbook"] = {"lab": "06_softmax", "exercises": "feedfeedfeed",
                                    "commit": "0" * 40, "version": "9"}
    assert editions.identify(student, "06_softmax", now, [])[1].code == "newer-edition"


@needs_kernel
@needs_history
def test_the_editions_of_a949cb8_are_flagged_not_taken_for_the_current_one(graded):
    """Issue 37 §5: lab 04's edition at a949cb8 (stamped with the lab alone) kept one exercise
    name of the current lab (changed_outputs), so the grader took it for the current edition
    with two exercises deleted: 1 / 3, 'renamed or deleted?' and no flag, whatever its name
    ('Copy of ...'), kernel (a local ipykernel) or answer type (a list: accepted). It is now
    flagged old-edition with what to do. Lab 04's cells import checks the library has dropped,
    so a release frozen from a949cb8 would not grade it either: its flag asks for the answers in
    the current edition; lab 07's, which imports nothing dropped, advises freezing a release."""
    _, book, rows = graded
    for who, lab, score in (("uma", "04_causal_mask", "1"), ("wes", "04_causal_mask", "0"),
                            ("vic", "07_weighted_sum", "2")):
        assert f"{lab}:old-edition" in _flags(book, who), (who, _flags(book, who))
        assert book[who][lab] == score, (who, _ex(rows, who, lab))
        report = (graded[0] / "feedback" / f"{who}.md").read_text(encoding="utf-8")
        assert "without an edition stamp" in report
        if lab == "04_causal_mask":  # its cells import checks the library has dropped: a
            # release frozen from a949cb8 would not grade it, so the flag does not advise one
            assert "no longer has (attnbook.exercises.causal_mask.check_causal_mask" in report
            assert "copy their answers into the current edition" in report
            assert "editions.py NAME COMMIT LAB" not in report
        else:
            assert "editions.py NAME COMMIT LAB" in report
    uma, wes, vic = (_ex(rows, w, lab) for w, lab in (
        ("uma", "04_causal_mask"), ("wes", "04_causal_mask"), ("vic", "07_weighted_sum")))
    assert not [f for f in _flags(book, "uma") if f.endswith(":kernel")]  # local python3
    assert "04_causal_mask=uma/Copy of 04_causal_mask.ipynb" in book["uma"]["files"]
    assert uma["changed_outputs"][0] == 1  # the list, right on every hidden input
    assert all("is not in the edition handed in" in uma[n][1] and "renamed" not in uma[n][1]
               for n in ("cached_mask", "window_scores")), uma
    assert wes["changed_outputs"][0] == 0 and "hard-coded" in wes["changed_outputs"][2]
    assert all("is not in the edition handed in" in vic[n][1]
               for n in ("outputs", "permuted_outputs")), vic


def test_an_unstamped_edition_that_kept_one_exercise_name_is_not_the_current_one():
    """The current edition with an exercise deleted stays current; lab 04's edition at a949cb8,
    which shares changed_outputs with it, does not (issue 37 §5)."""
    import make_submissions

    lab = _lab("04_causal_mask")
    now = editions.Edition("04_causal_mask", "current-id", labs.find_exercises(lab))
    student = handouts.student_edition(lab, now.exercises)
    student.cells = [c for c in student.cells if "def window_scores(" not in c.source]
    assert editions.identify(student, "04_causal_mask", now, []) == (now, None)
    old = make_submissions.a949_edition("04_causal_mask")
    if old is None:
        pytest.skip("the git history of the labs is absent")
    edition, flag = editions.identify(old, "04_causal_mask", now, [])
    assert edition is now and flag.code == "old-edition"
    for name in ALL_LABS:  # no current lab or student edition calls a check it lacks
        nb = _lab(name)
        here = editions.Edition(name, "x", labs.find_exercises(nb))
        assert editions._foreign_checks(nb, here) == [], name
        assert editions._foreign_checks(
            handouts.student_edition(nb, here.exercises), here) == [], name
