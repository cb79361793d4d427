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
