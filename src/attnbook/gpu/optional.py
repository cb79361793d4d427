"""Labs without Triton: the ``%%triton`` cell magic runs a kernel cell only where Triton exists.

Triton publishes Linux wheels only, and Colab's CPU runtime has none. A reader on macOS or
Windows still reads every lab of Part VI and runs its other cells; each cell marked ``%%triton``
then prints one line saying it was skipped and why, instead of failing on ``import triton``.
"""

from __future__ import annotations

import importlib.util
import platform

SKIP_MESSAGE = ("skipped: this cell runs a Triton kernel, and Triton is not installed here "
                "({reason}). Its stored output on the book's site shows what it prints.")


def triton_available() -> bool:
    """True when ``import triton`` would find a package."""
    return importlib.util.find_spec("triton") is not None


def _reason() -> str:
    if platform.system() != "Linux":
        return f"Triton publishes wheels for Linux only, and this is {platform.system()}"
    return "on Linux: pip install triton"


def setup_triton_cells() -> bool:
    """Prepare a Part VI lab: load the kernels if Triton is installed, register ``%%triton``.

    With Triton, the kernels load (compiled on a CUDA device, else through the interpreter) and
    ``%%triton`` cells run as ordinary cells. Without it, this prints what the reader will see
    and each ``%%triton`` cell prints :data:`SKIP_MESSAGE` instead of running.

    Returns:
        Whether Triton is available.
    """
    available = triton_available()
    if available:
        from .triton_env import load_kernels

        load_kernels()
    else:
        print("Triton is not installed here (" + _reason() + "): the cells marked %%triton "
              "are skipped, and the rest of the lab runs.")
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: no cells to mark
        return available
    shell = get_ipython()
    if shell is not None:
        def triton(line: str, cell: str):
            """Run this cell if Triton is installed; otherwise say that it was skipped."""
            if available:
                # An exception in the cell fails this cell too, as it would without the magic.
                shell.run_cell(cell, store_history=False).raise_error()
            else:
                print(SKIP_MESSAGE.format(reason=_reason()))

        shell.register_magic_function(triton, magic_kind="cell", magic_name="triton")
    return available
