"""Shared fixtures: seeded inputs and a helper that copies weights between modules."""

from __future__ import annotations

import ast
import os

import pytest
import torch

# Part VI's Triton kernels run through Triton's interpreter where there is no CUDA. The variable
# must be set before Triton is first imported (torch.utils.flop_counter imports it), so here.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """Tiny matrices train far faster on one thread (and reproducibly)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def random_padding(B: int, T: int, side: str = "right", generator=None) -> torch.Tensor:
    """A (B, T) bool mask, True = real, with at least one real token per sequence."""
    lengths = torch.randint(1, T + 1, (B,), generator=generator)
    pos = torch.arange(T)
    if side == "right":
        return pos[None, :] < lengths[:, None]
    return pos[None, :] >= (T - lengths)[:, None]


def pytest_configure(config):
    # Slow checks that `make test` runs in their own steps (after the site build), and that the
    # unit step leaves out with -m "not browser and not colab".
    config.addinivalue_line("markers", "browser: opens the built site in Chromium")
    config.addinivalue_line("markers", "colab: runs every lab outside the repository from a wheel")


# The book's solutions of a lab's exercises, compiled here (tests of grading and editions).


def lab_namespace(lab_nb) -> dict:
    """What the lab imports (its ``import`` lines, run here), for compiling its solutions."""
    import math

    namespace = {"torch": torch, "math": math}
    for cell in lab_nb.cells:
        if cell.cell_type != "code":
            continue
        lines = ["" if ln.lstrip().startswith(("!", "%")) else ln
                 for ln in cell.source.splitlines()]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        exec(compile(ast.Module(imports, []), "<imports>", "exec"), namespace)  # noqa: S102
    return namespace


def solution_function(lab_nb, ex):
    """The function the book's solution cell defines for ``ex``, compiled here with the lab's
    imports and the other functions its solution cell defines (its helpers)."""
    namespace = lab_namespace(lab_nb)
    source = lab_nb.cells[ex.solutions[0]].source
    tree = ast.parse(source)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert ex.function in [n.name for n in defs], (ex.name, "no solution function")
    exec(compile(ast.Module(defs, []), "<solution>", "exec"), namespace)  # noqa: S102
    return namespace[ex.function]


def book_solutions(lab: str) -> dict:
    """check name -> the function the book's solution cell of ``lab`` defines for it."""
    import sys
    from pathlib import Path

    import nbformat

    root = Path(__file__).resolve().parents[1]
    if str(root / "scripts") not in sys.path:
        sys.path.insert(0, str(root / "scripts"))
    from grading import labs

    nb = nbformat.read(root / "notebooks" / f"{lab}.ipynb", as_version=4)
    return {ex.check: solution_function(nb, ex) for ex in labs.find_exercises(nb)}


# The unit step runs two files at a time (pytest-xdist, --dist loadfile --no-loadscope-reorder),
# starting them in collection order. The longest files go first and the short ones fill in
# behind them. Ordered by test count (xdist's default), test_install.py (10 tests, 141 s in all,
# 110-134 s of it the local-route test) started last and ran alone while the other worker sat
# idle: 5:51 for the unit step before, 4:48 after, in runs here.
LONGEST_FIRST = ("test_grading.py", "test_install.py", "test_classroom.py",
                 "test_grading_method_limits.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole
