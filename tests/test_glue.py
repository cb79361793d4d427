"""attnbook.lab.notebook.glue stores exactly what myst-nb's glue stores, formatted by the lab."""

from __future__ import annotations

import IPython.display
import torch

from attnbook.lab.notebook import GLUE_PREFIX, glue


def test_glue_formats_and_stores_like_myst_nb(monkeypatch):
    shown = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw, metadata: shown.append((data, raw, metadata)))
    assert glue("scale_var", torch.tensor(1045.5678), ".1f") == "1045.6"
    assert glue("ratio", 0.7333, ".0%") == "73%"
    assert glue("name", "flash") == "flash"
    data, raw, metadata = shown[0]
    assert raw is True
    assert data == {GLUE_PREFIX + "text/plain": "'1045.6'"}
    assert metadata == {"scrapbook": {"name": "scale_var", "mime_prefix": GLUE_PREFIX}}


def test_glue_matches_myst_nb_output(monkeypatch):
    from myst_nb import glue as myst_glue

    shown = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw, metadata: shown.append((data, metadata)))
    import myst_nb.ext.glue as ext

    monkeypatch.setattr(ext, "ipy_display",
                        lambda data, raw, metadata: shown.append((data, metadata)))
    glue("k", 0.25, ".2f")
    myst_glue("k", "0.25", display=False)
    assert shown[0] == shown[1]
