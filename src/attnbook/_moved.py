"""Old module paths of the lab helpers, found where they moved (``attnbook.lab``).

Notebooks handed out before the move (a term's student editions, a reader's saved copy) start
with ``from attnbook.notebook import setup``; the grader runs them against today's library. A
finder on ``sys.meta_path`` answers ``import attnbook.<old>`` with ``attnbook.lab.<old>`` (the
same module object), so those notebooks keep working; nothing is imported until asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = ("first_head", "mask_widgets", "measure", "notebook", "plotting", "position_lab",
         "predict", "ring_trace", "saturation", "static_widgets", "tasks", "tile_trace", "train")


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)  # the lab module itself, not a copy

    def exec_module(self, module) -> None:
        """Nothing to run: the lab module was imported (and run) by create_module."""


class MovedFinder(importlib.abc.MetaPathFinder):
    """``attnbook.<old>`` -> ``attnbook.lab.<old>`` for the modules in :data:`MOVED`."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != "attnbook" or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(f"attnbook.lab.{name}"))


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
