"""Stored outputs a GPU run can reproduce: random inputs are drawn on the CPU.

CUDA's generator (Philox) draws other numbers than the CPU's from the same seed, so a lab that
draws ``torch.randn(..., device=device)`` on a Colab GPU computes on different inputs from the
ones its stored outputs came from, and nbval on the GPU compares the wrong thing. The labs draw
on the CPU (the global CPU generator that ``setup()`` seeds, or an explicit CPU generator) and
then move the tensor: ``torch.randn(shape).to(device)``. Cells whose outputs nbval ignores
(timings) are exempt: their inputs do not reach a compared output.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RANDOM = {"randn", "rand", "randint", "randperm", "randn_like", "rand_like", "randint_like",
          "normal", "bernoulli", "multinomial"}


def device_draws(source: str) -> list[str]:
    """The torch random calls in ``source`` that draw on a device without a CPU generator."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("!", "%"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in RANDOM and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"):
            names = {k.arg for k in node.keywords}
            if "device" in names and "generator" not in names:
                found.append(ast.unparse(node))
    return found


def test_the_check_finds_a_device_draw():
    assert device_draws("x = torch.randn(2, 3, device=device)") == [
        "torch.randn(2, 3, device=device)"]
    assert device_draws("x = torch.randn(2, 3).to(device)") == []
    assert device_draws("x = torch.randn(2, generator=g, device=device)") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_compared_cells_draw_on_the_cpu(path):
    problems = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code" or "nbval-ignore-output" in cell.metadata.get("tags", []):
            continue
        problems += [f"cell {i}: {call}" for call in device_draws(cell.source)]
    assert not problems, (
        f"{path.name} draws random numbers on the device (a GPU would draw others): "
        f"{problems}; draw on the CPU and move: torch.randn(shape).to(device)")
