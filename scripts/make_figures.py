"""Redraw every figure that a book page shows (stored under book/figures/).

Usage: python scripts/make_figures.py [module ...]   (default: every module in scripts/figures)
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import figures  # noqa: E402


def main(names: list[str]) -> None:
    outdir = ROOT / "book" / "figures"
    outdir.mkdir(parents=True, exist_ok=True)
    names = names or [m.name for m in pkgutil.iter_modules(figures.__path__)]
    for name in names:
        module = importlib.import_module(f"figures.{name}")
        written = module.main(outdir)
        print(f"{name}: {written}")


if __name__ == "__main__":
    main(sys.argv[1:])
