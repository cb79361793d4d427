"""Point the book at another repository (a course's fork): one command rewrites every place.

Usage: python scripts/set_repository.py https://github.com/OWNER/NAME [--branch main] [--root .]

Classroom editions (scripts/classroom.py) do not install from the branch: their setup cell names
the ref (tag or commit) of the library they were made with; :func:`pin_setup_cell` writes it and
:func:`install_line_ref` reads it back.

_config.yml's ``repository`` block is the one setting; this script writes the new URL and branch
there and then everywhere that repeats it: every lab's setup cell (``pip install
"git+URL@BRANCH"``, rewritten from scripts/nbtools.py's setup_cell_source, so only that cell
changes and outputs stay), the README, and any other text file of the book that names the old
address. The Colab links on the site and every page's "Report a problem" link (a new issue
in this repository: _ext/attnbook_report.py) are built from the same block at build time.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import repository  # noqa: E402

TEXT_FILES = ["README.md", "book/*.md", "pyproject.toml"]
URL = re.compile(r"^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def current(root: Path) -> tuple[str, str]:
    """The repository url and branch that ``root``'s _config.yml sets now."""
    return repository(root)


def _set_config(root: Path, url: str, branch: str) -> None:
    path = root / "_config.yml"
    text = path.read_text(encoding="utf-8")
    start = text.index("\nrepository:")
    end = text.find("\n\n", start + 1)
    end = len(text) if end < 0 else end
    block = text[start:end]
    block = re.sub(r"^(\s+url:\s*)\S+", rf"\g<1>{url}", block, count=1, flags=re.M)
    block = re.sub(r"^(\s+branch:\s*)\S+", rf"\g<1>{branch}", block, count=1, flags=re.M)
    path.write_text(text[:start] + block + text[end:], encoding="utf-8")


def _set_notebook(path: Path, old: str, new: str) -> bool:
    """Replace the install line in the setup cell (the first code cell) only."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cell = next((c for c in nb.cells if c.cell_type == "code"), None)
    if cell is None or old not in cell.source:
        return False
    cell.source = cell.source.replace(old, new)
    nbformat.write(nb, path)
    return True


def install_line_ref(source: str) -> str | None:
    """The ref (branch, tag or commit) that a setup cell's ``pip install "git+URL@REF"`` names."""
    m = re.search(r'git\+https://github\.com/[^@"\s]+@([^"\s]+)', source)
    return m.group(1) if m else None


def pin_setup_cell(nb, ref: str, root: Path = ROOT) -> bool:
    """Make ``nb``'s setup cell (its first code cell) install attnbook at ``ref``, not a branch.

    A classroom edition installs the library it was made with (a tag or a commit), so a term
    that started before the library changed still runs against its own version in Colab.

    Args:
        nb: a notebook (changed in place).
        ref: a tag or commit of the repository that _config.yml names.
        root: the checkout whose _config.yml names the repository.

    Returns:
        Whether the setup cell had an install line to pin.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.\-/]+", ref):
        raise ValueError(f"not a git ref: {ref!r}")
    url, _ = current(root)
    cell = next((c for c in nb.cells if c.cell_type == "code"), None)
    if cell is None:
        return False
    new = re.sub(rf"git\+{re.escape(url)}@[^\"\s]+", f"git+{url}@{ref}", cell.source)
    changed = new != cell.source
    cell.source = new
    return changed


def set_repository(url: str, branch: str | None = None, root: Path = ROOT) -> list[Path]:
    """Rewrite the repository address everywhere under ``root``; returns the files changed."""
    url = url.rstrip("/").removesuffix(".git")
    if not URL.match(url):
        raise ValueError(f"not a GitHub repository URL: {url}")
    old_url, old_branch = current(root)
    branch = branch or old_branch
    changed = []
    _set_config(root, url, branch)
    changed.append(root / "_config.yml")
    old_pin, new_pin = f"git+{old_url}@{old_branch}", f"git+{url}@{branch}"
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        if _set_notebook(path, old_pin, new_pin):
            changed.append(path)
    for pattern in TEXT_FILES:
        for path in sorted(root.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            new = text.replace(old_pin, new_pin).replace(old_url, url)
            if new != text:
                path.write_text(new, encoding="utf-8")
                changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="https://github.com/OWNER/NAME")
    parser.add_argument("--branch", help="the branch the setup cells install from")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    try:
        changed = set_repository(args.url, args.branch, args.root)
    except ValueError as err:
        sys.exit(str(err))
    for path in changed:
        print(f"updated {path.relative_to(args.root)}")


if __name__ == "__main__":
    main()
