"""attnbook.lab: the book's instruments, apart from the library they measure.

``import attnbook`` gives the attention a reader uses and extends; this subpackage holds what
the labs, the figures and the benchmarks need to look at it: traces of the tiled and ring
loops (``tile_trace``, ``ring_trace``), the measurements of chapter 3 (``saturation``) and
chapter 20 (``position_lab``), widgets and figures (``static_widgets``, ``mask_widgets``,
``plotting``, ``predict``, ``notebook``), the timing and memory protocol (``measure``), and the
synthetic tasks, training loop and first trained head of the sweeps (``tasks``, ``train``,
``first_head``). The lab imports the library, never the other way round: ``import attnbook``
loads none of these modules.

Each module loads on first use: ``from attnbook.lab.measure import compare``, or
``attnbook.lab.measure`` after ``import attnbook``.
"""

from __future__ import annotations

import importlib

from .._moved import MOVED as _MODULES  # one list: the modules that live here


def __getattr__(name: str):
    """Import a lab module on first access (``attnbook.lab.tasks``), as ``import`` would."""
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})
