"""Figures for the book pages, one module per chapter, each with a ``main(outdir)``."""

from __future__ import annotations

from pathlib import Path


def save(fig, outdir: Path, name: str, dpi: int = 130) -> Path:
    """Write ``fig`` to ``outdir/name`` as the book stores figures, close it, return the path."""
    import matplotlib.pyplot as plt

    out = outdir / name
    fig.savefig(out, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return out
