"""The classroom edition: student and instructor notebooks and Otter-Grader autograders.

Usage: python scripts/classroom.py [--out _build/classroom] [notebooks/NN_name.ipynb ...]

The labs stay the single source. In a lab, an exercise is a code cell that sets a variable to
``...`` and calls a ``check_*`` function from ``attnbook.exercises``; its solution is a later
cell made by ``scripts/nbtools.py``'s ``solution()`` (first line ``# @title Solution``, tag
``hide-input``). For every lab this writes::

    OUT/student/NN_name.ipynb      solution cells removed, exercises left with ... and their checks
    OUT/instructor/NN_name.ipynb   the lab with its solutions, plus a grading-notes cell at the top
    OUT/autograder/NN_name.zip     Otter-Grader's autograder for Gradescope (``otter
                                   generate``): one test per exercise, which calls the learner's
                                   function on hidden inputs (or the lab's check on the answer),
                                   refuses a replaced checker, and fails with the diagnosis; its
                                   environment.yml pins Python, CPU torch and the labs' packages
                                   and installs attnbook from the wheel inside the zip
    OUT/tests/NN_name/*.py         the tests inside that zip, readable
    OUT/wheel/attnbook-*.whl       that wheel

Grading for marks on the instructor's machine is scripts/grade.py (no zip needed).

Every edition is stamped (metadata ``attnbook``: lab, content id of its exercises, attnbook
version and commit) and its setup cell installs that commit (or its tag), not the branch.
``--release NAME`` (``make classroom RELEASE=NAME``) also freezes the term's editions and their
checks in scripts/grading/releases/NAME, so the grader grades that term's hand-ins with them
after the labs change (scripts/grading/editions.py).

The cell where an exercise is complete (the exercise cell in the student edition, its solution
in the instructor edition) carries Otter's cell metadata ``{"otter": {"tests": [name]}}``, so
Otter grades the exercise right after that cell runs (the labs reuse the name ``answer``). The
grading script puts that metadata back when an editor (Colab) drops it.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import SOLUTION_TITLE  # noqa: E402

DEFAULT_OUT = ROOT / "_build" / "classroom"
HIDDEN_NOTE = "The solution is hidden; click to show it."
PLACEHOLDER = re.compile(r"^(\w+) = \.\.\.", re.M)
OTTER_KEY = "otter"


@dataclass
class Exercise:
    """One graded exercise of a lab."""

    name: str  # the Otter question name: the check's name without check_, unique in the lab
    check: str  # e.g. "check_scaled_scores"
    module: str  # e.g. "attnbook.exercises.scaling"
    call: str  # the lab's check call, e.g. "check_scaled_scores(answer, q, k)"
    cell: int  # index of the exercise cell in the lab
    variable: str  # the variable the check is called with, e.g. "answer"
    solutions: list[int] = field(default_factory=list)  # indices of its solution cells
    points: int = 1
    function: str | None = None  # the function the learner writes, if the exercise is one

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.check}"


def is_solution(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(SOLUTION_TITLE)


def _imports(source: str) -> dict[str, str]:
    """check name -> module, from ``from attnbook.exercises.X import check_a, check_b``."""
    found = {}
    for m in re.finditer(r"from\s+(attnbook\.exercises\.\w+)\s+import\s+\(?([\w\s,]+)\)?", source):
        for name in re.split(r"[\s,]+", m.group(2).strip()):
            if name.startswith("check_"):
                found[name] = m.group(1)
    return found


def _check_call(source: str) -> tuple[str, str] | None:
    """The first top-level ``check_*(...)`` call of a cell (maybe inside print): name, source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id.startswith("check_")):
            return node.func.id, ast.get_source_segment(source, node)
    return None


def _function_placeholder(source: str) -> str | None:
    """The name of a function in the cell whose body still ends in ``return ...``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(s, ast.Return) and isinstance(s.value, ast.Constant)
                and s.value.value is Ellipsis for s in node.body):
            return node.name
    return None


def _answer_variable(call: str) -> str | None:
    """The variable a check call is given as its first argument (``answer`` by convention)."""
    node = ast.parse(call, mode="eval").body
    first = node.args[0] if node.args else None
    return first.id if isinstance(first, ast.Name) else None


def find_exercises(nb) -> list[Exercise]:
    """The exercises of a lab, each with its solution cells.

    An exercise cell calls a ``check_*`` function and either sets a variable to ``...``
    (``answer = ...``) or defines a function whose body is ``return ...``: the learner writes
    that function, and a grader can call it on hidden inputs.
    """
    imports: dict[str, str] = {}
    exercises: list[Exercise] = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        imports.update(_imports(cell.source))
        if is_solution(cell):
            if exercises:
                exercises[-1].solutions.append(i)
            continue
        placeholder = PLACEHOLDER.search(cell.source)
        function = _function_placeholder(cell.source)
        call = _check_call(cell.source)
        if not (placeholder or function) or not call:
            continue
        check, source = call
        names = {e.name for e in exercises}
        name, n = check.removeprefix("check_"), 2
        while name in names:
            name, n = f"{check.removeprefix('check_')}_{n}", n + 1
        variable = placeholder.group(1) if placeholder else _answer_variable(source)
        exercises.append(Exercise(name, check, imports.get(check, "attnbook.exercises"),
                                  source, i, variable, function=function))
    return exercises


def _calls(cell, check: str) -> bool:
    return cell.cell_type == "code" and re.search(rf"\b{check}\(", cell.source) is not None


def retag(nb, exercises: list[Exercise]) -> int:
    """Put Otter's metadata on the cell where each exercise is complete, matched by its check.

    The graded cell is the last cell of the exercise's block (from the first cell that calls its
    check to the next exercise) that calls the check: the exercise cell in a student's notebook,
    the solution cell in the instructor edition. This also repairs notebooks whose editor
    (Colab) dropped the metadata. Returns how many exercises were found.
    """
    for cell in nb.cells:
        cell.metadata.pop(OTTER_KEY, None)
    starts, pos = [], 0
    for ex in exercises:
        start = next((i for i in range(pos, len(nb.cells)) if _calls(nb.cells[i], ex.check)), None)
        starts.append(start)
        pos = start + 1 if start is not None else pos
    for k, ex in enumerate(exercises):
        if starts[k] is None:
            continue
        end = next((s for s in starts[k + 1:] if s is not None), len(nb.cells))
        last = max(i for i in range(starts[k], end) if _calls(nb.cells[i], ex.check))
        nb.cells[last].metadata[OTTER_KEY] = {"tests": [ex.name]}
    return sum(s is not None for s in starts)


SUMMARY_HEADING = re.compile(r"^##\s+What you saw\s*$", re.M)
SUMMARY_PROMPT = ("## What you saw\n\nWrite down, in a few lines of your own, what this lab "
                  "showed you. (The book's summary is on the chapter's page; it is left out "
                  "here because it states the exercises' answers.)")
STUDENT_NOTE = (
    "**Student edition.** Fill in each `...` of the exercises and run the check below it: it "
    "says whether your answer is right and, if not, which mistake it looks like. Where an "
    "exercise asks for a function, the grader also calls it on inputs you have not seen, so "
    "compute from the function's arguments rather than typing numbers in.\n\n"
    "**Before you hand in: Kernel → Restart and run all** (in Colab: Runtime → Restart session "
    "and run all), then save. The grader runs your notebook top to bottom in a fresh kernel, "
    "so an answer that only works when the cells run in another order does not count. Hand in "
    "this notebook (`.ipynb`); do not change the given inputs or the checks.")


def method_limits(exercises: list[Exercise]) -> str:
    """The student note's paragraph on what each function may not use (the grade's rules)."""
    lines = []
    for ex in exercises:
        spec = _spec(ex) if ex.function else None
        if spec is not None and spec.forbidden:
            names = ", ".join(f"`{n}`" for n in spec.forbidden)
            lines.append(f"- `{ex.function}` may not use {names}.")
    if not lines:
        return ""
    return ("\n\n**Method limits.** An exercise that asks you to compute something yourself "
            "scores nothing if the function calls a ready-made version of it, and the check "
            "below it says so (\"Right values, but ...\") rather than \"Correct\". It also "
            "calls your function on a second input, so an answer typed in does not pass:\n\n"
            + "\n".join(lines))


def _printed(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                   for o in cell.get("outputs", []))


def answer_patterns(nb, exercises: list[Exercise]) -> list[re.Pattern]:
    """What the solution cells print as answers, as patterns to look for elsewhere.

    A printed line counts when it holds several numbers or booleans (a list, a row of weights),
    or when a single number with a decimal point or three digits precedes the check's verdict
    ("2.5 Correct: ..."); such a number also matches with trailing zeros (2.5 finds 2.50).
    """
    patterns = []
    for ex in exercises:
        for i in ex.solutions:
            for line in _printed(nb.cells[i]).splitlines():
                if "Correct" in line.split(":")[0]:
                    value = line.split("Correct", 1)[0].strip()
                    number = value.rstrip("0").rstrip(".") if "." in value else value
                    # A lone small integer (1, 7, or 1.000) appears everywhere: not a clue.
                    if re.fullmatch(r"-?\d+\.\d+|-?\d{3,}", number):
                        tail = r"(?:\.0*)?" if "." not in number else "0*"
                        patterns.append(re.compile(
                            rf"(?<![\w.]){re.escape(number)}{tail}(?![\d])"))
                    continue
                value = line.split(":", 1)[-1].strip()
                if len(re.findall(r"-?\d+\.\d+|True|False", value)) >= 2:
                    patterns.append(re.compile(re.escape(value)))
    return patterns


RELEASES = ROOT / "scripts" / "grading" / "releases"


def _spec(ex: Exercise):
    import importlib

    return getattr(importlib.import_module(ex.module), "GRADED", {}).get(ex.check)


def edition_id(nb, exercises: list[Exercise]) -> str:
    """A content id of a lab's exercises: 12 hex digits that change when an exercise does.

    Hashed: each exercise's cell in the lab (its prompt and placeholder), its check call, the
    function it asks for, and the code of its checker, hidden inputs and method limits. The
    prose and the worked cells around them do not count: an edition with the same exercises
    and checks is the same edition.
    """
    import hashlib
    import inspect

    from attnbook.exercises.fingerprint import code_hash

    digest = hashlib.sha256()
    for ex in exercises:
        spec = _spec(ex) if ex.function else None
        parts = [ex.name, ex.check, ex.module.rsplit(".", 1)[-1], ex.call, ex.function or "",
                 nb.cells[ex.cell].source, _check_hash(ex)]
        if spec is not None:
            parts += [code_hash(spec.cases), repr(tuple(spec.forbidden)),
                      inspect.getsource(spec.cases)]
        digest.update(repr(parts).encode())
    return digest.hexdigest()[:12]


def library_stamp(root: Path = ROOT) -> dict:
    """The library an edition is made with: attnbook's version and the checkout's commit.

    ``dirty`` is True when src/ or notebooks/ differ from that commit (the edition then names
    a commit that does not hold exactly its code: commit before making a term's release).
    """
    import attnbook

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--", "src", "notebooks")) if commit else False
    tag = git("tag", "--points-at", "HEAD").splitlines() if commit else []
    return {"version": attnbook.__version__, "commit": commit, "tag": tag[0] if tag else "",
            "dirty": dirty}


def stamp(nb, lab_nb, lab: str, exercises: list[Exercise], kind: str,
          library: dict | None = None, release: str = "") -> None:
    """Write the edition into ``nb``'s metadata and pin its setup cell to that library.

    ``nb.metadata["attnbook"]`` gets ``lab``, ``edition`` (student or instructor),
    ``exercises`` (:func:`edition_id` of the lab's exercises), ``version``, ``commit`` and
    ``release`` (the term's name, when made with ``--release``); the setup cell's
    ``pip install "git+URL@..."`` names the tag or commit instead of the branch.
    """
    from set_repository import pin_setup_cell

    library = library or library_stamp()
    nb.metadata["attnbook"] = {"lab": lab, "edition": kind,
                               "exercises": edition_id(lab_nb, exercises),
                               "version": library["version"], "commit": library["commit"],
                               "release": release}
    ref = library.get("tag") or library.get("commit")
    if ref:
        pin_setup_cell(nb, ref)


def student_edition(nb, exercises: list[Exercise], lab: str | None = None,
                    library: dict | None = None, release: str = ""):
    """The lab as students get it: no solutions, nothing that gives an answer away.

    Removed: the solution cells, the notes that point at them (the whole cell, so a sentence
    such as "It predicts, then measures." does not dangle), the closing "What you saw"
    summary, which states the answers (replaced by a prompt), and the stored output of any
    cell that prints a value a solution prints (the cell stays; it prints it when run, so a lab
    that computes an answer before asking for it should be reordered). Added: a first cell
    with the hand-in rules and the method limits, and (given ``lab``) the edition in the
    notebook's metadata (:func:`stamp`), by which the grader recognises the lab whatever the
    file is called and grades it with its own edition's checks.
    """
    leaks = answer_patterns(nb, exercises)
    lab_nb, nb = nb, copy.deepcopy(nb)
    drop = {i for ex in exercises for i in ex.solutions}
    drop |= {i for i, c in enumerate(nb.cells) if is_solution(c)}
    cells = []
    for i, cell in enumerate(nb.cells):
        if i in drop:
            continue
        if cell.cell_type == "code" and any(p.search(_printed(cell)) for p in leaks):
            cell.outputs, cell.execution_count = [], None
        if cell.cell_type == "markdown" and HIDDEN_NOTE in cell.source:
            continue
        if cell.cell_type == "markdown" and SUMMARY_HEADING.search(cell.source):
            rest = cell.source[SUMMARY_HEADING.search(cell.source).start():]
            # Keep a trailing "Next: ..." pointer, which gives nothing away.
            after = re.search(r"^Next\b.*", rest, re.M | re.S)
            cell.source = (cell.source[:SUMMARY_HEADING.search(cell.source).start()]
                           + SUMMARY_PROMPT + ("\n\n" + after.group(0) if after else ""))
        cells.append(cell)
    nb.cells = cells
    retag(nb, exercises)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(STUDENT_NOTE + method_limits(exercises)))
    if lab:
        stamp(nb, lab_nb, lab, exercises, "student", library, release)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def grading_notes(exercises: list[Exercise]) -> str:
    """The instructor edition's first cell: what is graded and which mistakes are recognised."""
    from attnbook.exercises import diagnoses

    lines = ["**Instructor edition: grading notes.** `make grade SUBMISSIONS=folder` runs each "
             "hand-in top to bottom in a fresh kernel and, right after each exercise cell (after "
             "the solution cell here), captures the answer; where the exercise is a function, "
             "it is called on hidden inputs. The grader's own copy of the lab's check decides "
             "and its diagnosis is the feedback; points and time limits are in "
             "scripts/grading/points.toml. The checks recognise these mistakes:", ""]
    for ex in exercises:
        module = ex.module.rsplit(".", 1)[-1]
        known = diagnoses().get(module, {}).get(ex.check, [])
        what = f"`{ex.function}`, on hidden inputs; here " if ex.function else ""
        lines.append(f"- `{ex.name}` ({ex.points} point{'s' if ex.points != 1 else ''}): "
                     f"{what}`{ex.call}`")
        lines += [f"  - {m}" for m in known]
    return "\n".join(lines)


def instructor_edition(nb, exercises: list[Exercise], lab: str | None = None,
                       library: dict | None = None, release: str = ""):
    """The lab with its solutions, graded after each solution, opening with grading notes."""
    lab_nb, nb = nb, copy.deepcopy(nb)
    retag(nb, exercises)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(grading_notes(exercises)))
    if lab:
        stamp(nb, lab_nb, lab, exercises, "instructor", library, release)
    return nb


TEST_TEMPLATE = """\"\"\"Otter-Grader test: exercise {name!r} of {lab}, by the lab's check.\"\"\"

from otter.test_files import test_case

OK_FORMAT = False

name = {name!r}
points = {points}
CHECK_HASH = {digest!r}  # the checker's code when this zip was built


def _pristine():
    \"\"\"The lab's checker, refused if the notebook redefined it (its code changed).\"\"\"
    import importlib

    from attnbook.exercises.fingerprint import code_hash

    module = importlib.import_module({module!r})
    check = getattr(module, "GRADED", {{}}).get({check!r})
    check = check.check if check is not None else getattr(module, {check!r})
    # The plain check and the name the notebook calls (it may wrap the check in practice rules).
    if code_hash(check) + code_hash(getattr(module, {check!r})) != CHECK_HASH:
        raise AssertionError("Not graded: the checker {check} was replaced in the notebook")
    return check


@test_case(points={points}, hidden=False)
def test_{name}(env):
    check = _pristine()
    if {variable!r} not in env:
        raise AssertionError("Not graded: the variable {variable} is not defined at this point "
                             "(was the exercise cell deleted or not run?)")
    feedback = eval({call!r}, dict(env, {check}=check))
    assert feedback.ok, feedback.message
"""

FUNCTION_TEST_TEMPLATE = """\"\"\"Otter-Grader test: exercise {name!r} of {lab}, on hidden inputs.

The learner's function {function} is called on inputs drawn with this zip's seed (students never
see this file) and judged by the lab's checker; the names it may not use are refused.
\"\"\"

from otter.test_files import test_case

OK_FORMAT = False

name = {name!r}
points = {points}
SEED = {seed}
CHECK_HASH = {digest!r}  # the checker's code when this zip was built


def _names(function, env, depth=0):
    import types

    found, codes = set(), [function.__code__]
    while codes:
        code = codes.pop()
        found.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    for helper in [env.get(n) for n in list(found)]:
        if isinstance(helper, types.FunctionType) and helper is not function and depth < 3:
            found |= _names(helper, env, depth + 1)
    return found


@test_case(points={points}, hidden=False)
def test_{name}(env):
    import importlib

    from attnbook.exercises import hidden_cases
    from attnbook.exercises.fingerprint import code_hash

    module = importlib.import_module({module!r})
    spec = module.GRADED[{check!r}]
    if code_hash(spec.check) + code_hash(getattr(module, {check!r})) != CHECK_HASH:
        raise AssertionError("Not graded: the checker {check} was replaced in the notebook")
    function = env.get({function!r})
    if not callable(function):
        raise AssertionError("Not graded: the function {function} is not defined")
    used = sorted(_names(function, env) & set(spec.forbidden))
    if used:
        raise AssertionError(f"Not graded: {function} uses {{', '.join(used)}}, which the "
                             "exercise rules out")
    for case in hidden_cases(spec, SEED):
        feedback = spec.check(function(*case.call), *case.check_args)
        assert feedback.ok, f"On a hidden input ({{case.label}}): {{feedback.message}}"
"""


def _check_hash(ex: Exercise) -> str:
    import importlib

    from attnbook.exercises.fingerprint import code_hash

    module = importlib.import_module(ex.module)
    spec = getattr(module, "GRADED", {}).get(ex.check)
    public = getattr(module, ex.check)  # what a notebook calls: maybe the practice wrapper
    return code_hash(spec.check if spec is not None else public) + code_hash(public)


def write_tests(lab: str, exercises: list[Exercise], folder: Path, seed: int = 0) -> None:
    """Otter's test files for one lab, and exercises.json (what the grading scripts read)."""
    import importlib

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for ex in exercises:
        spec = getattr(importlib.import_module(ex.module), "GRADED", {}).get(ex.check)
        template = FUNCTION_TEST_TEMPLATE if spec is not None and ex.function else TEST_TEMPLATE
        (folder / f"{ex.name}.py").write_text(template.format(
            lab=lab, name=ex.name, points=ex.points, module=ex.module, check=ex.check,
            call=ex.call, variable=ex.variable, function=ex.function, seed=seed,
            digest=_check_hash(ex)), encoding="utf-8")
    manifest = [{"name": e.name, "check": e.check, "module": e.module, "call": e.call,
                 "points": e.points, "function": e.function} for e in exercises]
    (folder / "exercises.json").write_text(json.dumps(manifest, indent=1) + "\n")


# Gradescope builds its image from this (Otter's setup.sh runs mamba on it): the Python of the
# pins, CPU torch (its own index: the default Linux wheel is the CUDA build, over 2 GB), the
# pinned packages the labs import, and attnbook from the wheel shipped in the zip.
ENVIRONMENT = """name: otter-env
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - jupyter_server
  - pip:
      - --extra-index-url https://download.pytorch.org/whl/cpu
      - otter-grader[grading,plugins]=={otter}
{pins}
      - /autograder/source/files/{wheel}
"""
LAB_PACKAGES = ("torch", "numpy", "matplotlib", "ipywidgets", "tqdm", "ipykernel")


def pins(path: Path = ROOT / "requirements.txt") -> dict[str, str]:
    """name -> version of every ``name==version`` line of requirements.txt and its ``-r`` files
    (the CI's pins, the one source of versions)."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("-r "):
            found.update({k: v for k, v in pins(path.parent / line[3:].strip()).items()
                          if k not in found})
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            found.setdefault(m.group(1).lower(), m.group(2))
    return found


def build_wheel(out: Path) -> Path:
    """A wheel of attnbook from this checkout, built in a copy (the work tree stays clean)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("attnbook-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "src", Path(tmp) / "src",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, tmp)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-q", ".", "-w", str(out)], cwd=tmp, check=True,
                       capture_output=True, text=True)
    return next(out.glob("attnbook-*.whl"))


def otter_generate(tests: Path, zip_path: Path, wheel: Path | None = None) -> None:
    """``otter generate`` in an empty folder, with the environment the labs need.

    The zip's environment.yml pins Python, CPU torch and the labs' packages to the versions of
    requirements*.txt and installs attnbook from ``wheel`` (shipped in the zip as
    files/<wheel>); without a wheel, Otter's default environment (no torch: the labs fail).
    """
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(tests, Path(tmp) / "tests", ignore=shutil.ignore_patterns("*.json"))
        command = [sys.executable, "-m", "otter", "generate", "-t", "tests", "-o",
                   str(zip_path.resolve()), "--no-requirements", "--no-config"]
        if wheel is not None:
            versions = pins()
            shutil.copy(wheel, Path(tmp) / wheel.name)
            (Path(tmp) / "environment.yml").write_text(ENVIRONMENT.format(
                otter=versions["otter-grader"], wheel=wheel.name,
                pins="\n".join(f"      - {p}=={versions[p]}" for p in LAB_PACKAGES
                               if p in versions)), encoding="utf-8")
            command += ["-e", "environment.yml", wheel.name]
        else:
            command += ["--no-environment"]
        subprocess.run(command, cwd=tmp, check=True, capture_output=True, text=True)


def build(labs: list[Path] | None = None, out: Path = DEFAULT_OUT,
          seed: int | None = None, release: str = "",
          releases: Path = RELEASES) -> dict[str, list[Exercise]]:
    """Write the editions and autograders of ``labs`` (default: every lab) into ``out``.

    Args:
        labs: lab notebooks.
        out: the output folder.
        seed: the Gradescope tests' hidden-input seed (default: drawn now; it is written
            into the tests, which students never see).
        release: a term's name: also freeze these editions and their checks into
            ``releases/<release>`` (scripts/grading/editions.py), where the grader finds them.
        releases: where releases go.

    Returns:
        lab name -> its exercises.
    """
    import secrets

    if release and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", release):
        raise ValueError(f"a release name is letters, digits, '.', '_' and '-': {release!r}")
    if release and (releases / release).exists():
        raise FileExistsError(f"release {release} exists ({releases / release}); a term's "
                              "release is never overwritten: pick another name")
    library = library_stamp()
    if release and library["dirty"]:
        print("warning: src/ or notebooks/ have uncommitted changes; the editions name commit "
              f"{library['commit'][:10]}, which does not hold them. Commit and push first.")

    labs = labs or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for sub in ("student", "instructor", "autograder", "tests"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    seed = secrets.randbits(31) if seed is None else seed
    wheel = build_wheel(out / "wheel")
    built, frozen = {}, {}
    for path in labs:
        nb = nbformat.read(path, as_version=4)
        exercises = find_exercises(nb)
        lab = path.stem
        student = student_edition(nb, exercises, lab, library, release)
        nbformat.write(student, out / "student" / path.name)
        nbformat.write(instructor_edition(nb, exercises, lab, library, release),
                       out / "instructor" / path.name)
        if exercises:
            frozen[lab] = (student, exercises, edition_id(nb, exercises))
        write_tests(lab, exercises, out / "tests" / lab, seed)
        if exercises:
            otter_generate(out / "tests" / lab, out / "autograder" / f"{lab}.zip", wheel)
        built[lab] = exercises
        print(f"{lab}: {len(exercises)} exercises")
    if release:
        from grading.editions import write_release

        write_release(releases / release, frozen, library, release)
        print(f"release {release}: {len(frozen)} editions frozen in {releases / release}")
    return built


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("labs", nargs="*", type=Path, help="labs (default: every lab)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, help="the Gradescope tests' hidden-input seed "
                                                 "(default: random)")
    parser.add_argument("--release", default="", help="a term's name: also freeze its "
                        "editions and checks in scripts/grading/releases/NAME for the grader")
    args = parser.parse_args(argv)
    build([p.resolve() for p in args.labs] or None, args.out, args.seed, args.release)
    print(f"editions and autograders in {args.out}")


if __name__ == "__main__":
    main()
