"""Helpers for writing the labs: the shared setup cell, and a notebook made from a list of cells.

Authors write a short generator (kept out of the repository) that calls :func:`write_lab`, then
run ``scripts/run_notebooks.py`` to execute the notebook and store its outputs. The stored
notebook is the one source of truth.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def repository(root: Path = ROOT) -> tuple[str, str]:
    """The repository url and branch from _config.yml (the launch buttons use the same block)."""
    text = (root / "_config.yml").read_text(encoding="utf-8")
    block = text[text.index("\nrepository:") :]
    url = re.search(r"^\s+url:\s*(\S+)", block, re.M).group(1)
    branch = re.search(r"^\s+branch:\s*(\S+)", block, re.M).group(1)
    return url, branch


def setup_cell_source() -> str:
    """The first code cell of every lab."""
    url, branch = repository()
    return (
        "# Setup, the same in every lab. In Colab: install the book's package (--no-deps keeps\n"
        "# Colab's torch). Everywhere: seed every generator, pick CUDA if present, else CPU.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    !pip install -q --no-deps "git+{url}@{branch}"\n'
        "\n"
        "from attnbook.lab.notebook import setup\n"
        "\n"
        "device = setup(seed=0)"
    )


def md(text: str) -> nbformat.NotebookNode:
    """A markdown cell."""
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str, tags: list[str] | None = None, **metadata) -> nbformat.NotebookNode:
    """A code cell, optionally tagged (e.g. ``hide-input``, ``nbval-ignore-output``)."""
    cell = nbformat.v4.new_code_cell(text.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    cell.metadata.update(metadata)
    return cell


SOLUTION_TITLE = "# @title Solution"
"""How a solution cell starts (scripts/classroom.py removes these cells from student editions)."""


def solution(text: str) -> nbformat.NotebookNode:
    """A solution cell: hidden on the site (hide-input) and collapsed to a form in Colab."""
    return code(SOLUTION_TITLE + " (double-click to show the code)\n" + text.strip("\n"),
                tags=["hide-input"], cellView="form")


def write_lab(path: str | Path, title_cell: nbformat.NotebookNode, cells: list) -> Path:
    """Write a lab: its title cell, the shared setup cell, then ``cells``."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [title_cell, code(setup_cell_source()), *cells]
    path = Path(path)
    nbformat.write(nb, path)
    return path


def toc_pages(root: Path = ROOT) -> list[str]:
    """Every document in _toc.yml, in reading order, as paths without suffix."""
    import yaml  # Jupyter Book's own dependency

    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return pages


def glued(lab: str, root: Path = ROOT) -> dict[str, str]:
    """The values a lab glued, as stored in its outputs: key -> text (myst-nb's glue records)."""
    import ast
    import json

    nb = json.loads((root / "notebooks" / lab).read_text(encoding="utf-8"))
    found = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                found[name] = ast.literal_eval(
                    out["data"]["application/papermill.record/text/plain"])
    return found
