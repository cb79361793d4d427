"""Triton is optional: load it (and its interpreter on a machine without a GPU) only when asked."""

from __future__ import annotations

import os
import sys
from types import ModuleType

import torch

INSTALL_HINT = "pip install attnbook[triton]"


def interpreting() -> bool:
    """True when Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``), on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def load_kernels() -> ModuleType:
    """Import Triton and :mod:`attnbook.gpu.kernels`, with the interpreter when there is no GPU.

    Triton reads ``TRITON_INTERPRET`` when it is imported (its own library functions are
    compiled or interpreted from then on), so the switch is made here, before the first import,
    and only when no CUDA device is present: on a GPU the kernels are compiled.

    Raises:
        ImportError: Triton is not installed (the message names the extra to install).
    """
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import triton  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"attnbook's GPU kernels need Triton, which is not installed: {INSTALL_HINT}"
        ) from err
    from . import kernels

    return kernels


def check_device(*tensors: torch.Tensor) -> None:
    """Raise a clear error when CPU tensors meet compiled (not interpreted) kernels."""
    if any(t.device.type == "cpu" for t in tensors) and not interpreting():
        raise RuntimeError(
            "CPU tensors can only run through Triton's interpreter: set the environment "
            "variable TRITON_INTERPRET=1 before triton is first imported (here it was imported "
            "without it), or move the tensors to a CUDA device."
        )


def check_interpretable(dtype: torch.dtype) -> None:
    """Refuse bfloat16 in the interpreter rather than return its wrong results.

    Triton 3.9's interpreter computes ``tl.dot`` on bfloat16 tiles wrongly (errors around 1e9
    against float64; ``tests/test_triton_attention.py`` pins this so that a fixed Triton is
    noticed). Compiled kernels on a GPU are not affected; float16 is right in the interpreter.
    """
    if dtype == torch.bfloat16 and interpreting():
        raise NotImplementedError(
            "bfloat16 cannot run in Triton's interpreter: its tl.dot on bfloat16 gives wrong "
            "results (Triton 3.9). On the CPU use float16, float32 or float64; bfloat16 runs "
            "compiled, on a CUDA GPU."
        )
