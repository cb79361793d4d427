"""The instructor's tools are one package, scripts/grading/, apart from the library.

Read with ast, not imported: an import inside a function counts as much as one at the top (the
circle this replaced, scripts/classroom.py -> grading/editions.py -> classroom.py, went through
one). Checked: the package and the scripts it uses import each other in no circle; each module
imports only modules its package docstring lists above it; the commands in scripts/ are thin
entry points; src/attnbook never imports the package or any script; and the commands still run
as the Makefile and the course guide call them.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
PACKAGE = SCRIPTS / "grading"
# The commands that run the package: scripts/NAME.py calls grading/NAME.py's main.
COMMANDS = ("classroom", "grade", "classroom_guide", "export_questions")
# What the package may import from scripts/ outside itself (leaves: they import no package).
OUTSIDE = {"nbtools", "set_repository", "main_line_words"}


def _modules() -> dict[str, Path]:
    """Every module of scripts/ by its import name: top-level scripts and the package's."""
    found = {p.stem: p for p in SCRIPTS.glob("*.py")}
    found["grading"] = PACKAGE / "__init__.py"
    found |= {f"grading.{p.stem}": p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return found


def _imports(name: str, path: Path, known) -> set[str]:
    """The modules of ``known`` that ``path`` (module ``name``) imports, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # grading.labs.find_exercises -> grading.labs
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_the_circle_this_package_replaced():
    old = {"classroom": {"grading.editions", "nbtools"}, "grading.editions": {"classroom",
           "grading.judge"}, "grading.judge": {"classroom", "grading.execute"},
           "grading.execute": {"grading.sandbox"}, "grading.sandbox": set(), "nbtools": set()}
    assert _cycle(old) == ["classroom", "grading.editions", "classroom"]
    assert _cycle({k: v - {"grading.editions"} for k, v in old.items()}) is None


def test_the_instructor_package_has_no_import_circle():
    graph = _graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
    # The scripts outside the package that it uses are leaves: none of them imports it back.
    for name in OUTSIDE:
        assert not {m for m in graph[name] if m.startswith("grading")}, name
    used = {m for n, deps in graph.items() if n.startswith("grading") for m in deps
            if not m.startswith("grading")}
    assert used <= OUTSIDE, f"the package imports scripts outside it: {used - OUTSIDE}"


def test_each_module_imports_only_those_listed_above_it():
    """The package docstring's map is its layering: read top to bottom, a module imports only
    modules named before it, so the map can never describe a circle."""
    graph = _graph()
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")))
    listed = re.findall(r"^    (\w+)\.py\b", doc, re.M)
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    helpers = {"in_kernel", "kernel_launcher"}  # run inside the kernel, as files: no imports
    assert sorted(listed) == sorted(set(modules) - helpers), "the map lists every module once"
    for i, name in enumerate(listed):
        inside = {m.removeprefix("grading.") for m in graph[f"grading.{name}"]
                  if m.startswith("grading.")}
        assert inside <= set(listed[:i]), f"{name}.py imports {inside - set(listed[:i])}"
    for name in helpers:
        assert not graph[f"grading.{name}"], name


def test_the_commands_are_thin_entry_points():
    graph = _graph()
    for name in COMMANDS:
        tree = ast.parse((SCRIPTS / f"{name}.py").read_text(encoding="utf-8"))
        assert f"grading.{name}" in graph[name], name
        assert graph[name] <= {"grading", f"grading.{name}"}, name
        defined = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert not defined, f"scripts/{name}.py defines code: it belongs in grading/{name}.py"
    # No other script reaches into the package.
    others = {n for n, deps in graph.items() if not n.startswith("grading")
              and n not in COMMANDS and any(d.startswith("grading") for d in deps)}
    assert not others, others


def test_the_library_never_imports_the_instructors_tools():
    scripts = set(_modules()) | {"grading"}
    for path in sorted((ROOT / "src" / "attnbook").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            for name in names:
                top = name.split(".")[0]
                assert top not in scripts, f"{path.relative_to(ROOT)} imports {name}"


@pytest.mark.parametrize("command", [
    ["scripts/classroom.py", "--help"],  # make classroom [RELEASE=...]
    ["scripts/grade.py", "--help"],  # make grade
    ["scripts/export_questions.py", "--help"],  # make lms
    ["scripts/grading/editions.py", "--help"],  # the course guide's freeze of an earlier term
])
def test_the_commands_run_as_the_makefile_and_the_course_guide_call_them(command):
    out = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage:"), out.stdout
