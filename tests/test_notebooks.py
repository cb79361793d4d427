"""Conventions every lab follows (DESIGN.md): shared setup cell, in the toc, outputs stored."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import repository, setup_cell_source  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _code_cells(path: Path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_there_are_labs():
    assert NOTEBOOKS, "no notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_setup_cell_is_the_shared_one(path):
    first = _code_cells(path)[0]
    assert first.source == setup_cell_source()


def test_setup_cell_uses_the_configured_repository():
    url, branch = repository()
    assert url.startswith("https://github.com/")
    source = setup_cell_source()
    assert f'"git+{url}@{branch}"' in source
    assert "--no-deps" in source, "the Colab install must never replace Colab's torch"
    assert 'if "google.colab" in sys.modules' in source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lab_is_in_the_toc(path):
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    assert re.search(rf"file:\s*notebooks/{re.escape(path.stem)}\s*$", toc, re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stored_in_order(path):
    cells = _code_cells(path)
    counts = [c.execution_count for c in cells]
    assert all(n is not None for n in counts), "run scripts/run_notebooks.py to store outputs"
    assert counts == list(range(1, len(cells) + 1)), "cells must be executed top to bottom once"
    for cell in cells:
        for out in cell.outputs:
            assert out.output_type != "error", f"a stored error in: {cell.source[:60]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_solutions_are_hidden_on_the_site_and_in_colab(path):
    solutions = [c for c in _code_cells(path) if "@title Solution" in c.source]
    for cell in solutions:
        assert "hide-input" in cell.metadata.get("tags", [])
        assert cell.metadata.get("cellView") == "form"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_ignored_outputs_are_only_widgets_or_timings(path):
    for cell in _code_cells(path):
        if "nbval-ignore-output" in cell.metadata.get("tags", []):
            # A widget, a timing, the device, or a comment that says why ("not compared by
            # nbval: ...", for results that change with the CPU's rounding).
            reason = re.search(r"widgets\.|interact|time|tqdm|device|kernel|not compared by nbval",
                               cell.source, re.I)
            assert reason, f"nbval-ignore-output without a reason in: {cell.source[:80]}"
