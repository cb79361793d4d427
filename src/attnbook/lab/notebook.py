"""What every lab's setup cell calls: seeds, a device, and settings that make CPU and GPU agree."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def pick_device() -> torch.device:
    """CUDA when present, else CPU (override with the ATTNBOOK_DEVICE environment variable)."""
    name = os.environ.get("ATTNBOOK_DEVICE")
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (every device) so a lab gives the same numbers each run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(seed: int = 0) -> torch.device:
    """Prepare a lab: seed, turn off TF32 so GPU matmuls match the CPU's, round printed numbers.

    Args:
        seed: the seed for every random generator.

    Returns:
        The device the lab should use.
    """
    seed_everything(seed)
    # TF32 keeps only 10 mantissa bits on Ampere+ GPUs: printed digits would differ from CPU.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=3, suppress=True, linewidth=100)
    try:
        import matplotlib

        matplotlib.rcParams.update({"figure.dpi": 100, "figure.figsize": (5.5, 3.5),
                                    "axes.spines.top": False, "axes.spines.right": False})
    except ImportError:  # matplotlib is optional for the library itself
        pass
    return pick_device()


GLUE_PREFIX = "application/papermill.record/"


def glue(key: str, value, fmt: str | None = None) -> str:
    """Store a number or short text for a chapter page to paste (myst-nb's glue, not displayed).

    The lab formats the value here, so the page pastes exactly the digits the lab printed:
    ``{glue:text}`../notebooks/03_scaling.ipynb::key``` in the chapter. nbval compares the
    stored text, so a changed result fails CI instead of silently disagreeing with the prose.

    Args:
        key: a name unique within the lab, e.g. ``"scale_var_d1024"``.
        value: the value to store (a number, a tensor with one element, or a string).
        fmt: a format spec such as ``".2f"``, ``".1e"`` or ``".0%"``; None stores ``str(value)``.

    Returns:
        The stored text.
    """
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    text = str(value) if fmt is None else format(value, fmt)
    try:  # the same output as myst_nb.glue(key, text, display=False), without needing myst-nb
        from IPython.display import display
    except ImportError:  # plain Python: nothing to store
        return text
    display({GLUE_PREFIX + "text/plain": repr(text)}, raw=True,
            metadata={"scrapbook": {"name": key, "mime_prefix": GLUE_PREFIX}})
    return text
