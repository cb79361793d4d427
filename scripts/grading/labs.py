"""A lab's graded exercises and their checkers, as the editions and the grader find them.

The labs stay the single source. In a lab, an exercise is a code cell that sets a variable to
``...`` (or defines a function whose body still ends in ``return ...``) and calls a ``check_*``
function from ``attnbook.exercises``; its solution is a later cell made by
``scripts/nbtools.py``'s ``solution()`` (first line ``# @title Solution``, tag ``hide-input``).

The cell where an exercise is complete (the exercise cell in the student edition, its solution
in the instructor edition) carries Otter's cell metadata ``{"otter": {"tests": [name]}}``
(:func:`retag`), so Otter grades the exercise right after that cell runs (the labs reuse the
name ``answer``); the grader puts that metadata back when an editor (Colab) drops it.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from nbtools import SOLUTION_TITLE

ROOT = Path(__file__).resolve().parents[2]  # the checkout: notebooks/, src/, book/
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


def check_imports(source: str) -> dict[str, str]:
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
        imports.update(check_imports(cell.source))
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


def graded_spec(ex: Exercise):
    """The exercise's entry in its module's ``GRADED`` (a function graded on hidden inputs, with
    its method limits), or None."""
    return getattr(importlib.import_module(ex.module), "GRADED", {}).get(ex.check)


def checker_hash(ex: Exercise) -> str:
    """The code of the checker that grades ``ex`` and of the name a notebook calls (maybe the
    practice wrapper): a test refuses a notebook in which either changed."""
    from attnbook.exercises.fingerprint import code_hash

    module = importlib.import_module(ex.module)
    spec = getattr(module, "GRADED", {}).get(ex.check)
    public = getattr(module, ex.check)  # what a notebook calls: maybe the practice wrapper
    return code_hash(spec.check if spec is not None else public) + code_hash(public)
