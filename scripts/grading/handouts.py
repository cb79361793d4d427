"""The two editions of a lab: the student's (no solutions) and the instructor's (grading notes).

Every edition is stamped (metadata ``attnbook``: lab, content id of its exercises, attnbook
version and commit, the term's release) and its setup cell installs that commit (or its tag),
not the branch: the grader recognises a hand-in's edition by the stamp (editions.py).
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path

import nbformat

from .labs import ROOT, Exercise, checker_hash, graded_spec, is_solution, retag

HIDDEN_NOTE = "The solution is hidden; click to show it."  # the lab's note above a solution
SUMMARY_HEADING = re.compile(r"^##\s+What you saw\s*$", re.M)
SUMMARY_PROMPT = ("## What you saw\n\nWrite down, in a few lines of your own, what this lab "
                  "showed you. (The book's summary is on the chapter's page; it is left out "
                  "here because it states the exercises' answers.)")
STUDENT_NOTE = (
    "**Student edition.** Fill in each `...` of the exercises and run the check below it: it "
    "says whether your answer is right and, if not, which mistake it looks like. Where an "
    "exercise asks for a function, the grader also calls it on inputs you have not seen, so "
    "compute from the function's arguments rather than typing numbers in. The outputs that "
    "would answer a prediction or an exercise are cleared: write your guess in each **Predict "
    "first** cell before you run the cell that measures it.\n\n"
    "**Before you hand in: Kernel → Restart and run all** (in Colab: Runtime → Restart session "
    "and run all), then save. The grader runs your notebook top to bottom in a fresh kernel, "
    "so an answer that only works when the cells run in another order does not count. Hand in "
    "this notebook (`.ipynb`); do not change the given inputs or the checks.")


def method_limits(exercises: list[Exercise]) -> str:
    """The student note's paragraph on what each function may not use (the grade's rules)."""
    lines = []
    for ex in exercises:
        spec = graded_spec(ex) if ex.function else None
        public = [n for n in (spec.forbidden if spec is not None else ()) if not n.startswith("_")]
        if public:  # a private helper behind them is caught too, not listed
            names = ", ".join(f"`{n}`" for n in public)
            lines.append(f"- `{ex.function}` may not use {names}, under any name.")
        for n in getattr(spec, "required", ()) or ():
            lines.append(f"- `{ex.function}` must use `{n}`, as the exercise says.")
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


PREDICTION = re.compile(r"\*\*Predict first\.\*\*")
MEASURED = re.compile(r": measured (.+?)(?: \(no guess yet|: |$)", re.M)


def prediction_spans(nb) -> list[tuple[int, int]]:
    """Each "Predict first" prompt's code cells: (first, last) indices, from the cell after the
    prompt to the first cell that calls ``compare_prediction`` (the guess and the measurement)."""
    spans = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or not PREDICTION.search(cell.source):
            continue
        for j in range(i + 1, len(nb.cells)):
            if nb.cells[j].cell_type == "code" and "compare_prediction(" in nb.cells[j].source:
                spans.append((i + 1, j))
                break
    return spans


def measured_answers(nb) -> list[tuple[int, re.Pattern]]:
    """What each prediction's measuring cell prints as the result ("measured 16%"), as
    (index of that cell, pattern): a cell above it that prints the same gives the answer away.

    Only distinctive numbers count (two digits or more, a percentage, a shape): a lone digit,
    True, False or a word such as a scheme's name appears in many cells that answer nothing.
    """
    found = []
    for _, last in prediction_spans(nb):
        for m in MEASURED.finditer(_printed(nb.cells[last])):
            value = m.group(1).strip()
            if not re.search(r"\d", value) or re.fullmatch(r"-?\d(?:\.0*)?%?", value):
                continue
            found.append((last, re.compile(rf"(?<![\w.]){re.escape(value)}(?![\w])")))
    return found


def answering_cells(nb, exercises: list[Exercise]) -> set[int]:
    """The code cells of a lab whose stored output answers an exercise or a prediction.

    Those are: each exercise's cell (its check's verdict); the cells of each "Predict first"
    prompt, from the guess to the cell that measures and calls ``compare_prediction``; any
    cell above a prediction that prints its measured result; any cell that prints a value a
    solution prints (:func:`answer_patterns`).
    """
    leaks = answer_patterns(nb, exercises)
    clear = {ex.cell for ex in exercises}
    for first, last in prediction_spans(nb):
        clear |= {i for i in range(first, last + 1) if nb.cells[i].cell_type == "code"}
    measured = measured_answers(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        text = _printed(cell)
        if any(p.search(text) for p in leaks):
            clear.add(i)
        if any(i < last and p.search(text) for last, p in measured):
            clear.add(i)
    return clear


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
        spec = graded_spec(ex) if ex.function else None
        parts = [ex.name, ex.check, ex.module.rsplit(".", 1)[-1], ex.call, ex.function or "",
                 nb.cells[ex.cell].source, checker_hash(ex)]
        if spec is not None:
            parts += [code_hash(spec.cases), repr(tuple(spec.forbidden)),
                      inspect.getsource(spec.cases)]
            if getattr(spec, "required", ()):
                parts.append(repr(tuple(spec.required)))
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
    summary, which states the answers (replaced by a prompt), and the stored output of every
    cell that answers an exercise or a prediction (:func:`answering_cells`: the checks, the
    guess and measuring cells of each "Predict first", and any cell that prints a solution's
    value or a prediction's result before it is asked; the cell stays and prints it when run).
    Setup and the other figures and tables keep their outputs. Added: a first cell
    with the hand-in rules and the method limits, and (given ``lab``) the edition in the
    notebook's metadata (:func:`stamp`), by which the grader recognises the lab whatever the
    file is called and grades it with its own edition's checks.
    """
    answering = answering_cells(nb, exercises)
    lab_nb, nb = nb, copy.deepcopy(nb)
    drop = {i for ex in exercises for i in ex.solutions}
    drop |= {i for i, c in enumerate(nb.cells) if is_solution(c)}
    cells = []
    for i, cell in enumerate(nb.cells):
        if i in drop:
            continue
        if cell.cell_type == "code" and i in answering:
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

