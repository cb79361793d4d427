"""Execute the labs in place, storing outputs and widget state (what the site shows, nbval checks).

Usage: python scripts/run_notebooks.py [notebook.ipynb ...]   (default: every notebooks/*.ipynb)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def run(path: Path) -> float:
    """Execute one notebook in its own folder and write it back; return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for cell in nb.cells:  # execution counts from 1 in order, as a reader running it would see
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths: list[str]) -> None:
    if any(p in ("-h", "--help") for p in paths):
        print(__doc__.strip())
        return
    missing = [p for p in paths if not Path(p).is_file() or not p.endswith(".ipynb")]
    if missing:
        sys.exit(f"not a notebook file: {', '.join(missing)}\n\n{__doc__.strip()}")
    os.environ.pop("ATTNBOOK_DEVICE", None)
    notebooks = [Path(p).resolve() for p in paths] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in notebooks:
        seconds = run(path)
        print(f"{path.relative_to(ROOT)}: {seconds:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
