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
    if interpreting():
        patch_interpreter_index()
    from . import kernels

    return kernels


def patch_interpreter_index() -> bool:
    """Let Triton 3.6's interpreter use a runtime scalar as a ``range`` bound under NumPy 2.4.

    The interpreter holds every scalar (a kernel argument, ``tl.program_id``, ``n // BLOCK``)
    as a one-element array, and ``for j in range(lo, hi, BLOCK)`` turns ``hi`` into a Python
    int with ``int(array)``. NumPy 2.4 refuses that for an array of shape (1,) ("only
    0-dimensional arrays can be converted to Python scalars"), so under Triton 3.6 every kernel
    whose loop bound is not a ``tl.constexpr`` fails; Triton 3.7 and newer squeeze the array
    first. This wraps the interpreter's tensor set-up to do the same, and only when the
    installed Triton's own conversion fails on a one-element array (a probe, not a version
    check), so a fixed Triton is left alone. Compiled kernels are not affected.

    Returns:
        True if the interpreter was patched (now or before), False if it needs no patch.
    """
    import numpy as np
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:  # an interpreter laid out differently: nothing known to fix
        return False
    if getattr(original, "attnbook_index_patch", False):
        return True

    def patched(tensor, scope):
        original(tensor, scope)
        # What Triton 3.7 and newer do: a one-element array squeezed to 0-d, then int().
        scope.set_attr(tensor, "__index__", lambda self: int(np.squeeze(self.handle.data)))

    patched.attnbook_index_patch = True
    if not _index_fails(original):
        return False
    interpreter._patch_lang_tensor = patched
    return True


def _index_fails(patch_lang_tensor) -> bool:
    """Whether the interpreter's ``__index__`` raises on a one-element array (the 3.6 bug)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    scope = interpreter._LangPatchScope()
    try:
        patch_lang_tensor(tl.tensor, scope)
        probe = tl.tensor(interpreter.TensorHandle(np.array([1], dtype=np.int32), tl.int32),
                          tl.int32)
        probe.__index__()
        return False
    except TypeError:
        return True
    finally:
        scope.restore()


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
