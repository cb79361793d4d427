"""The classroom edition: student and instructor editions and Otter-Grader autograders.

The editions are built for labs 3, 4 and 5, whose exercises are functions graded on hidden
inputs; no student edition gives an exercise's answer away (in its outputs or its text). No
current lab asks for a value (``answer = ...`` checked as it is), but older editions do (the
releases in scripts/grading/releases), so that form is tested on a small lab written here. The
registry of diagnoses and the course guide's generated tables are checked too. Grading for marks
is tested in tests/test_grading.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from grading import autograder, classroom, classroom_guide, handouts, labs  # noqa: E402

LABS = ["03_scaling", "04_causal_mask", "05_padding"]
ALL = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
needs_otter = pytest.mark.skipif(importlib.util.find_spec("otter") is None,
                                 reason="otter-grader is not installed")


def _value_lab():
    """A small lab in the value form, as lab 03 was before its exercises became functions
    (release 2026-autumn-b): each exercise cell sets ``answer = ...`` and checks it on the
    lab's own inputs; a solution cell follows, after the note that hides it."""
    cell, md = nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell
    solution = labs.SOLUTION_TITLE + " (double-click to show the code)\n"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [
        md("# Lab 3 — Scaling by √d (an older edition)"),
        cell("import math\n\nimport torch\n\ngen = torch.Generator().manual_seed(0)"),
        md("## Exercise 1: scaled scores per head"),
        cell("from attnbook.exercises.scaling import check_scaled_scores\n\n"
             "q = torch.randn(4, 5, 8, generator=gen, dtype=torch.float64)  # (h, T, d_h)\n"
             "k = torch.randn(4, 5, 8, generator=gen, dtype=torch.float64)  # (h, T, d_h)\n"
             "answer = ...  # your code: the scaled scores, (h, T, T)\n\n"
             "check_scaled_scores(answer, q, k)"),
        md(handouts.HIDDEN_NOTE),
        cell(solution + "answer = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
             "print(check_scaled_scores(answer, q, k))"),
        md("## Exercise 2: the variance of the scores"),
        cell("from attnbook.exercises.scaling import check_dot_variance\n\n"
             "qs = torch.randn(300, 16, generator=gen, dtype=torch.float64)  # (n, d)\n"
             "ks = torch.randn(200, 16, generator=gen, dtype=torch.float64)  # (m, d)\n"
             "answer = ...  # your code: a scalar tensor\n\n"
             "check_dot_variance(answer, qs, ks)"),
        md(handouts.HIDDEN_NOTE),
        cell(solution + "answer = (qs @ ks.T).var()\nprint(check_dot_variance(answer, qs, ks))"),
        md("## What you saw\n\n- The divisor is the head width.\n\nNext, step 4."),
    ]
    return nb


def test_the_value_form_of_an_older_edition_is_found_and_edited():
    """An exercise that sets ``answer = ...`` is found with its variable and no function; the
    student edition keeps the placeholder and drops the solution, and grades the exercise cell;
    the instructor edition grades the solution cell; Colab's dropped metadata is repaired."""
    lab = _value_lab()
    exercises = labs.find_exercises(lab)
    assert [(e.name, e.variable, e.function, e.solutions) for e in exercises] == [
        ("scaled_scores", "answer", None, [5]), ("dot_variance", "answer", None, [9])]
    assert exercises[0].call == "check_scaled_scores(answer, q, k)"
    student = handouts.student_edition(lab, exercises, "value_lab")
    assert not any(labs.is_solution(c) for c in student.cells)
    graded = [c for c in student.cells if "otter" in c.metadata]
    assert [c.metadata["otter"]["tests"] for c in graded] == [["scaled_scores"], ["dot_variance"]]
    assert all(labs.PLACEHOLDER.search(c.source) for c in graded)
    assert "**Method limits.**" not in student.cells[1].source  # no function, nothing to limit
    for c in student.cells:
        c.metadata.pop("otter", None)
    assert labs.retag(student, exercises) == 2
    assert len([c for c in student.cells if "otter" in c.metadata]) == 2
    teacher = handouts.instructor_edition(lab, exercises, "value_lab")
    graded = [c for c in teacher.cells if "otter" in c.metadata]
    assert len(graded) == 2 and all(labs.is_solution(c) for c in graded)
    notes = teacher.cells[1].source
    assert "- `scaled_scores` (1 point): `check_scaled_scores(answer, q, k)`" in notes


def test_current_labs_ask_for_functions_only():
    """Every current lab's exercise is a function (issue 31 §1): the value form lives on in
    older editions only."""
    for path in ALL:
        nb = nbformat.read(path, as_version=4)
        values = [e.name for e in labs.find_exercises(nb) if not e.function]
        assert not values, f"{path.stem}: exercises in the value form: {values}"


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
        assert not any(labs.is_solution(c) for c in student.cells)
        assert not any(handouts.HIDDEN_NOTE in c.source for c in student.cells)
        solutions = sum(labs.is_solution(c) for c in lab_nb.cells)
        assert sum(labs.is_solution(c) for c in teacher.cells) == solutions > 0
        # Every other cell of the lab is in the student edition, unchanged, outputs included,
        # except the closing summary, which states the answers.
        first = next(c for c in lab_nb.cells if c.cell_type == "code")  # pinned: see below
        kept = [c for c in lab_nb.cells if not labs.is_solution(c)
                and handouts.HIDDEN_NOTE not in c.source
                and not handouts.SUMMARY_HEADING.search(c.source) and c is not first]
        sources = [c.source for c in student.cells]
        assert all(c.source in sources for c in kept)
        assert any(handouts.SUMMARY_PROMPT in s for s in sources)
        graded = [c for c in student.cells if "otter" in c.metadata]
        assert len(graded) == len(exercises[lab])
        assert all(ex.function for ex in exercises[lab])  # the value form: _value_lab
        assert all("return ..." in c.source for c in graded)
        assert "Restart and run all" in student.cells[1].source
        # The edition: its lab, its exercises' content id and the library it was made with,
        # and a setup cell that installs that library (a commit or tag), not the branch.
        stamp = student.metadata["attnbook"]
        assert {k: stamp[k] for k in ("lab", "edition")} == {"lab": lab, "edition": "student"}
        assert stamp["exercises"] == handouts.edition_id(lab_nb, exercises[lab])
        library = handouts.library_stamp()
        assert (stamp["version"], stamp["commit"]) == (library["version"], library["commit"])
        assert teacher.metadata["attnbook"]["exercises"] == stamp["exercises"]
        setup = next(c.source for c in student.cells if c.cell_type == "code")
        ref = library["tag"] or library["commit"]
        assert ref and f'@{ref}"' in setup and "@main" not in setup
        # The instructor edition is graded after each solution; it opens with grading notes.
        graded = [c for c in teacher.cells if "otter" in c.metadata]
        assert all(labs.is_solution(c) for c in graded)
        assert "grading notes" in teacher.cells[1].source
        assert (out / "autograder" / f"{lab}.zip").exists()


def test_the_student_note_states_the_method_limits():
    lab = nbformat.read(ROOT / "notebooks" / "06_softmax.ipynb", as_version=4)
    note = handouts.student_edition(lab, labs.find_exercises(lab), "06_softmax").cells[1]
    assert "**Method limits.**" in note.source and "Right values, but" in note.source
    assert "- `softmax_columns` may not use `softmax`, `stable_softmax`" in note.source
    assert "- `jacobian_from_p` may not use `softmax_jacobian`" in note.source


def test_edition_id_changes_with_an_exercise_and_only_then():
    lab = nbformat.read(ROOT / "notebooks" / "06_softmax.ipynb", as_version=4)
    exercises = labs.find_exercises(lab)
    before = handouts.edition_id(lab, exercises)
    prose = next(i for i, c in enumerate(lab.cells) if c.cell_type == "markdown" and i > 3)
    lab.cells[prose].source += "\n\nA sentence more."
    assert handouts.edition_id(lab, exercises) == before  # the prose is not the edition
    lab.cells[exercises[0].cell].source += "\n# a changed prompt"
    assert handouts.edition_id(lab, exercises) != before


def test_a_release_freezes_the_editions_and_is_never_overwritten(tmp_path):
    from grading import editions

    lab = ROOT / "notebooks" / "04_causal_mask.ipynb"
    with pytest.MonkeyPatch.context() as patch:  # no Gradescope zips: not what this tests
        patch.setattr(autograder, "otter_generate", lambda *a, **k: None)
        patch.setattr(autograder, "build_wheel", lambda out: out / "attnbook-0.whl")
        classroom.build([lab], tmp_path / "out", seed=1, release="t1", releases=tmp_path / "r")
        with pytest.raises(FileExistsError):
            classroom.build([lab], tmp_path / "out", seed=1, release="t1",
                            releases=tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "t1" / "release.json").read_text())
    student = nbformat.read(tmp_path / "out" / "student" / lab.name, as_version=4)
    assert student.metadata["attnbook"]["release"] == "t1"
    assert meta["labs"]["04_causal_mask"]["exercises"] == student.metadata["attnbook"][
        "exercises"]
    import tarfile

    with tarfile.open(tmp_path / "r" / "t1" / "release.tar.gz") as tar:
        names = tar.getnames()
    assert {"attnbook/exercises/causal_mask.py", "student/04_causal_mask.ipynb"} <= set(names)
    [frozen] = editions.releases(tmp_path / "r")
    assert frozen.id == meta["labs"]["04_causal_mask"]["exercises"]
    assert all(ex.module.startswith("attnbook_release_t1.") for ex in frozen.exercises)


def test_set_repository_pins_and_reads_a_setup_cells_ref():
    import set_repository

    lab = nbformat.read(ROOT / "notebooks" / "04_causal_mask.ipynb", as_version=4)
    url, branch = set_repository.current(ROOT)
    setup = next(c for c in lab.cells if c.cell_type == "code")
    assert set_repository.install_line_ref(setup.source) == branch
    assert set_repository.pin_setup_cell(lab, "v0.1.0")
    assert f'"git+{url}@v0.1.0"' in setup.source
    assert set_repository.install_line_ref(setup.source) == "v0.1.0"
    with pytest.raises(ValueError):
        set_repository.pin_setup_cell(lab, 'main"; rm -rf ~; "')


@needs_otter
def test_retag_repairs_metadata_dropped_by_an_editor(built):
    out, exercises = built
    nb = nbformat.read(out / "student" / "03_scaling.ipynb", as_version=4)
    for cell in nb.cells:
        cell.metadata.pop("otter", None)
    assert labs.retag(nb, exercises["03_scaling"]) == 3
    assert [c.metadata["otter"]["tests"][0] for c in nb.cells if "otter" in c.metadata] == [
        "scaled_scores", "dot_variance", "entropy"]


def test_every_lab_exercise_is_found_with_its_solution():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        exercises = labs.find_exercises(nb)
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
    assert classroom_guide.OUTPUT.read_text(encoding="utf-8") == classroom_guide.render(), (
        "run: python scripts/classroom_guide.py")
    assert classroom_guide.TIMES.read_text(encoding="utf-8") == classroom_guide.render_times(), (
        "run: python scripts/classroom_guide.py")
    page = (ROOT / "book" / "course_guide.md").read_text(encoding="utf-8")
    assert "{include} generated/course_checks.md" in page
    assert "{include} generated/course_times.md" in page



def _printed(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                   for o in cell.get("outputs", []))


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_no_student_edition_gives_an_answer_away(path):
    """What a solution cell prints as its answer appears nowhere in the student edition.

    Also gone: the notes that point at the removed solutions, with whatever else they say, and
    the closing summary.
    """
    lab = nbformat.read(path, as_version=4)
    exercises = labs.find_exercises(lab)
    student = handouts.student_edition(lab, exercises, path.stem)
    shown = "\n".join(c.source + "\n" + _printed(c) for c in student.cells)
    for pattern in handouts.answer_patterns(lab, exercises):
        found = pattern.search(shown)
        assert not found, f"{path.stem}: the answer {found.group(0)!r} is shown"
    notes = [c.source for c in lab.cells if c.cell_type == "markdown"
             and handouts.HIDDEN_NOTE in c.source]
    assert not any(n in shown for n in notes)
    assert not re.search(r"^## What you saw\s*\n\s*\n\s*- ", shown, re.M)


def _verdicts(text: str) -> list[str]:
    """Lines of a cell's output that answer: a check's verdict or a prediction's result."""
    return [line for line in text.splitlines()
            if re.match(r"\s*(\S+ )?(Correct|Not yet|Right values)\b", line)
            or re.search(r": measured .+", line)]


def _no_answering_output(lab, student, name: str) -> None:
    """Issue 48: no output of ``student`` answers a prediction or an exercise; the other
    outputs (setup, figures, tables the text refers to) are kept."""
    outputs = [_printed(c) for c in student.cells if c.cell_type == "code"]
    for text in outputs:
        assert not _verdicts(text), f"{name}: a student edition shows {_verdicts(text)[0]!r}"
    # A prediction's result (read from the lab's measuring cell) is not printed above it either.
    code = [c for c in lab.cells if c.cell_type == "code"]
    for k, cell in enumerate(code):
        for m in re.finditer(r": measured (.+?)(?: \(no guess yet|: |$)", _printed(cell), re.M):
            value = m.group(1)
            if not re.search(r"\d", value) or re.fullmatch(r"-?\d(\.0*)?%?", value):
                continue  # a lone digit, True or a word is everywhere
            shown = [c for c in student.cells[:] if c.cell_type == "code"
                     and any(c.source == d.source for d in code[:k])]
            hit = re.compile(rf"(?<![\w.]){re.escape(value)}(?![\w])")
            assert not any(hit.search(_printed(c)) for c in shown), (
                f"{name}: the prediction's result {value} is printed above the prediction")
    # Each prompt's guess cell and measuring cell come without outputs; setup and the figures
    # outside them keep theirs.
    assert all(not c.outputs for c in student.cells if c.cell_type == "code"
               and re.search(r"^guess_\w+ = None", c.source, re.M))
    figures = [c.source for c in lab.cells if c.cell_type == "code"
               and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))
               and "compare_prediction(" not in c.source and not labs.is_solution(c)]
    kept = {c.source for c in student.cells if c.cell_type == "code" and c.outputs}
    assert all(f in kept for f in figures), f"{name}: a figure lost its output"


@needs_otter
def test_built_student_editions_answer_no_prediction_or_exercise(built):
    """The editions ``make classroom`` writes: the student's carry no output that answers a
    prediction or an exercise; the instructor's keep every output."""
    out, _ = built
    for lab in LABS:
        lab_nb = nbformat.read(ROOT / "notebooks" / f"{lab}.ipynb", as_version=4)
        student = nbformat.read(out / "student" / f"{lab}.ipynb", as_version=4)
        teacher = nbformat.read(out / "instructor" / f"{lab}.ipynb", as_version=4)
        _no_answering_output(lab_nb, student, lab)
        assert [_printed(c) for c in teacher.cells[2:] if c.cell_type == "code"] == \
               [_printed(c) for c in lab_nb.cells[1:] if c.cell_type == "code"]
        assert any(_verdicts(_printed(c)) for c in teacher.cells)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_no_student_edition_answers_a_prediction_or_a_check(path):
    """Every lab's student edition (built as ``make classroom`` builds it) is checked as the
    built ones above."""
    lab = nbformat.read(path, as_version=4)
    student = handouts.student_edition(lab, labs.find_exercises(lab), path.stem)
    _no_answering_output(lab, student, path.stem)


def test_student_edition_clears_prediction_and_check_cells_only():
    """Labs 20 and 21: the guess and measuring cells of each prediction and the exercises'
    check cells lose their outputs; a table that answers nothing keeps its output."""
    for stem, keeps in (("20_positions", "half(x[perm]) vs interleaved"),
                        ("21_mask_functions", "causal_mod == ")):
        lab = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        exercises = labs.find_exercises(lab)
        clear = handouts.answering_cells(lab, exercises)
        assert {ex.cell for ex in exercises} <= clear
        spans = handouts.prediction_spans(lab)
        assert len(spans) == sum(bool(handouts.PREDICTION.search(c.source))
                                 for c in lab.cells if c.cell_type == "markdown")
        assert all(i in clear for a, b in spans for i in range(a, b + 1)
                   if lab.cells[i].cell_type == "code")
        student = handouts.student_edition(lab, exercises, stem)
        assert any(keeps in _printed(c) for c in student.cells)


def test_answer_patterns_find_lists_rows_and_single_numbers():
    nb = nbformat.v4.new_notebook()
    sol = nbformat.v4.new_code_cell("# @title Solution\nanswer = 2.5")
    sol.outputs = [nbformat.v4.new_output("stream", name="stdout", text=(
        "2.5 Correct: the ratio matches.\n0.030 0.604 0.082\nmeasured: [False, True, True]\n"
        "Correct: Y matches.\nsame: True\n"))]
    nb.cells = [nbformat.v4.new_code_cell("answer = ...\ncheck_x(answer)"), sol]
    ex = labs.Exercise("x", "check_x", "m", "check_x(answer)", 0, "answer", [1])
    found = [p for p in handouts.answer_patterns(nb, [ex])]
    texts = ["ratio = 2.50 (17 MFLOP)", "tau: 0.030 0.604 0.082 0.001",
             "[False, True, True]"]
    assert all(any(p.search(t) for p in found) for t in texts)
    assert not any(p.search("12.5 and 2.51 and True") for p in found)


def run_like_gradescope(zip_path: Path, notebook, folder: Path) -> dict:
    """Grade ``notebook`` with Otter's own autograder entry point, laid out as on Gradescope.

    Gradescope unzips the autograder into /autograder/source, puts the hand-in into
    /autograder/submission and runs source/run_otter.py, which calls
    ``otter.run.run_autograder.main("/autograder")``; we call the same function on a folder
    laid out the same way. attnbook comes from the wheel inside the zip (installed into a
    folder first on PYTHONPATH), not from this checkout.
    """
    ag = folder / "autograder"
    for sub in ("source", "submission", "results"):
        (ag / sub).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(ag / "source")
    [wheel] = (ag / "source" / "files").glob("attnbook-*.whl")
    site = folder / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(wheel)], check=True)
    nbformat.write(notebook, ag / "submission" / "submission.ipynb")
    env = dict(os.environ, PYTHONPATH=str(site), ATTNBOOK_STATIC_WIDGETS="skip")
    where = subprocess.run([sys.executable, "-c", "import attnbook; print(attnbook.__file__)"],
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site)), where  # the kernel imports the zip's attnbook
    subprocess.run([sys.executable, "-c", "import sys\n"
                    "from otter.run.run_autograder import main\nmain(sys.argv[1])", str(ag)],
                   env=env, cwd=folder, check=True, capture_output=True, text=True, timeout=600)
    return json.loads((ag / "results" / "results.json").read_text())


@needs_otter
def test_gradescope_zip_runs_with_its_own_environment(tmp_path):
    """The zip of lab 06 ships attnbook and pins torch; Otter's entry point grades with it."""
    out = tmp_path / "classroom"
    classroom.build([ROOT / "notebooks" / "06_softmax.ipynb"], out, seed=11)
    zip_path = out / "autograder" / "06_softmax.zip"
    with zipfile.ZipFile(zip_path) as z:
        names = z.namelist()
        environment = z.read("environment.yml").decode()
    assert any(n.startswith("files/attnbook-") and n.endswith(".whl") for n in names)
    versions = autograder.pins()
    for package in ("torch", "numpy", "ipywidgets"):
        assert f"- {package}=={versions[package]}" in environment, package
    assert f"otter-grader[grading,plugins]=={versions['otter-grader']}" in environment
    assert "download.pytorch.org/whl/cpu" in environment and "python=3.11" in environment

    def score(nb, name):
        tests = run_like_gradescope(zip_path, nb, tmp_path / name)["tests"]
        graded = [t for t in tests if "score" in t]  # Gradescope sums these
        return sum(t["score"] for t in graded), {t["name"]: t["output"] for t in graded}

    teacher = nbformat.read(out / "instructor" / "06_softmax.ipynb", as_version=4)
    assert score(teacher, "teacher")[0] == 3
    student = nbformat.read(out / "student" / "06_softmax.ipynb", as_version=4)
    points, tests = score(student, "untouched")
    assert points == 0 and "still empty" in tests["softmax"]
    # The cheat of issue 19: replace the checkers, answer anything.
    for cell in student.cells:
        if "def softmax_columns(St):" in cell.source:
            cell.source = cell.source.replace("return ...", "return torch.zeros_like(St)")
    setup = next(c for c in student.cells if c.cell_type == "code")
    setup.source += ("\nimport attnbook.exercises.softmax as sm\n"
                     "sm.check_softmax.__code__ = (lambda *a: sm.Feedback(True, 'ok')).__code__")
    student.metadata["kernelspec"]["name"] = "attn-course"  # a named local kernel, too
    points, tests = score(student, "cheat")
    assert points == 0 and "replaced" in tests["softmax"]  # graded, with python3


def _load_tests(folder: Path) -> dict:
    """The generated Otter test files of a folder, imported: name -> its test_case."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"otter_test_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found[path.stem] = getattr(module, f"test_{path.stem}")
    return found


def _fails(test, env) -> str:
    try:
        test.test_func(env)
    except AssertionError as err:
        return str(err)
    return ""


@pytest.mark.parametrize("lab", sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.ipynb")))
def test_every_labs_otter_tests_pass_the_books_solutions(lab, tmp_path):
    """The Gradescope path for every lab: each exercise's Otter test, called as Otter calls it,
    gives full marks to the book's solution function and refuses an environment without it."""
    from conftest import lab_namespace, solution_function

    nb = nbformat.read(ROOT / "notebooks" / f"{lab}.ipynb", as_version=4)
    exercises = labs.find_exercises(nb)
    autograder.write_tests(lab, exercises, tmp_path, seed=5)
    tests = _load_tests(tmp_path)
    assert sorted(tests) == sorted(ex.name for ex in exercises)
    for ex in exercises:
        env = {**lab_namespace(nb), ex.function: solution_function(nb, ex)}
        assert _fails(tests[ex.name], env) == "", (lab, ex.name)
        assert "is not defined" in _fails(tests[ex.name], lab_namespace(nb)), (lab, ex.name)


def test_otter_tests_judge_values_and_functions_and_refuse_a_replaced_checker(tmp_path):
    """The zip's test files, called as Otter calls them (test_func(env)), without a kernel: the
    value form on the older edition written above, the function form on lab 06."""
    import math

    import torch

    from attnbook.exercises import scaling, softmax

    values_lab = _value_lab()
    autograder.write_tests("value_lab", labs.find_exercises(values_lab),
                           tmp_path / "value_lab", seed=3)
    nb = nbformat.read(ROOT / "notebooks" / "06_softmax.ipynb", as_version=4)
    autograder.write_tests("06_softmax", labs.find_exercises(nb), tmp_path / "06_softmax",
                           seed=3)
    values = _load_tests(tmp_path / "value_lab")["scaled_scores"]
    q, k = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    right = q @ k.transpose(-2, -1) / math.sqrt(8)
    assert _fails(values, {"answer": right, "q": q, "k": k}) == ""
    assert "divided by d = 8" in _fails(values, {"answer": right * math.sqrt(8) / 8, "q": q,
                                                 "k": k})
    assert "not defined" in _fails(values, {"q": q, "k": k})
    variance = _load_tests(tmp_path / "value_lab")["dot_variance"]
    qs, ks = torch.randn(30, 16, dtype=torch.float64), torch.randn(20, 16, dtype=torch.float64)
    assert _fails(variance, {"answer": (qs @ ks.T).var(), "qs": qs, "ks": ks}) == ""
    assert "standard deviation" in _fails(variance, {"answer": (qs @ ks.T).std(), "qs": qs,
                                                     "ks": ks})
    function = _load_tests(tmp_path / "06_softmax")["softmax"]

    def softmax_columns(S):
        e = (S - S.amax(0, keepdim=True)).exp()
        return e / e.sum(0, keepdim=True)

    assert _fails(function, {"softmax_columns": softmax_columns}) == ""
    assert "On a hidden input" in _fails(function, {"softmax_columns": lambda S: S.exp() / S.exp(
    ).sum(0, keepdim=True)})
    assert "uses softmax" in _fails(function, {"softmax_columns": lambda S: S.softmax(0)})
    assert "not defined" in _fails(function, {})
    for module, name, test, env in (
            (scaling, "check_scaled_scores", values, {"answer": right, "q": q, "k": k}),
            (softmax, "check_softmax", function, {"softmax_columns": softmax_columns})):
        check = getattr(module, name)
        original = check.__code__
        check.__code__ = (lambda *a, **kw: None).__code__  # what a notebook could do
        try:
            assert "was replaced in the notebook" in _fails(test, env)
        finally:
            check.__code__ = original
