"""Run one notebook top to bottom in a sandboxed kernel and capture each exercise's answer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .sandbox import Kernel, Limits, Reply

IN_KERNEL = (Path(__file__).resolve().parent / "in_kernel.py").read_text(encoding="utf-8")


@dataclass
class Capture:
    """What the grader asks the kernel for after one exercise's cell."""

    name: str  # the exercise
    cell: int  # the index of the cell after which to capture
    variable: str  # the answer variable, e.g. "answer"
    args: list[str]  # the check's other arguments, as source (evaluated in the notebook)
    kwargs: dict[str, str]
    seconds: float  # time limit of the exercise cell
    case_seconds: float = 10.0  # time limit of each call on a hidden input
    function: str | None = None  # the learner's function, for exercises phrased as one
    cases: list[tuple] = field(default_factory=list)  # hidden inputs to call it with
    at_end: bool = False  # its exercise cell was not found: captured after the last cell


@dataclass
class Run:
    """The outcome of running one notebook."""

    captured: dict[str, dict | None]  # exercise -> what the kernel stored (None: not reached)
    events: dict[str, str]  # exercise -> why it has no usable capture, or what went wrong
    errors: list[tuple[int, str]]  # (cell index, "Error: message") of cells that raised
    timeouts: list[int]  # indices of cells stopped at their time limit
    raised: dict[str, str] = field(default_factory=dict)  # exercise -> its cell's error
    at_end: list[str] = field(default_factory=list)  # exercises captured after the last cell
    said: dict[str, str] = field(default_factory=dict)  # exercise -> what its cell printed
    note: str = ""  # what stopped the run early, if anything
    seconds: float = 0.0
    network_off: bool = False


def run_notebook(nb, captures: list[Capture], folder: Path, limits: Limits,
                 pristine: dict[str, str], imported: dict[str, str],
                 cell_seconds: float = 120, notebook_seconds: float = 900) -> Run:
    """Execute ``nb``'s code cells in order, each with its time limit, capturing after exercises.

    Args:
        nb: the notebook to run (solution cells already removed).
        captures: one per exercise found in it.
        folder: an empty folder for the kernel's home, work folder and the capture files.
        limits: the kernel's resource limits.
        pristine: qualname -> module file of each of the library's functions.
        imported: notebook name -> qualname of each checker the lab imports.
        cell_seconds: time limit of a cell that is not an exercise.
        notebook_seconds: time limit of the whole notebook.

    Returns:
        A :class:`Run`; it never raises for anything the notebook does.
    """
    at: dict[int, list[Capture]] = {}
    for c in captures:
        at.setdefault(c.cell, []).append(c)
    run = Run({c.name: None for c in captures}, {}, [], [],
              at_end=[c.name for c in captures if c.at_end])
    start = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    with Kernel(folder, limits) as kernel:
        run.network_off = kernel.no_network
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            left = notebook_seconds - (time.monotonic() - start)
            if left <= 0:
                run.note = (f"The notebook ran past its limit of {notebook_seconds:g} s in total "
                            "and was stopped; exercises after that point were not graded.")
                break
            limit = min([c.seconds for c in at.get(i, []) if not c.at_end] or [cell_seconds])
            reply = kernel.run(cell.source, min(limit, left))
            for c in at.get(i, []):  # the practice check's verdict, as the learner saw it
                if not c.at_end:
                    run.said[c.name] = (reply.stdout or "").strip()[-400:]
            if reply.status == "error":
                run.errors.append((i, reply.error))
                for c in at.get(i, []):
                    if not c.at_end:
                        run.raised[c.name] = reply.error
            elif reply.status == "timeout":
                run.timeouts.append(i)
                for c in at.get(i, []):
                    if not c.at_end:  # the last cell is not the exercise's own
                        run.events[c.name] = (f"your exercise cell ran longer than {limit:g} s "
                                              "and was stopped (an endless loop?)")
            elif reply.status == "dead":
                run.note = _dead_note(reply, limits)
                break
            for c in at.get(i, []):
                dead = _capture(kernel, c, folder, run, pristine, imported)
                if dead:
                    run.note = _dead_note(dead, limits)
                    break
            if run.note:
                break
    run.seconds = time.monotonic() - start
    return run


def _dead_note(reply: Reply, limits: Limits) -> str:
    if "interrupted" in reply.error:
        return ("A cell ran past its time limit and ignored the interrupt (does it catch "
                "KeyboardInterrupt or turn SIGINT off?), so its kernel was stopped; exercises "
                "from that cell on were not graded.")
    return (f"The kernel stopped ({reply.error}); a notebook that needs more than "
            f"{limits.memory_gib:g} GiB of memory, or crashes Python, ends here. Exercises from "
            "that point on were not graded.")


def _capture(kernel: Kernel, c: Capture, folder: Path, run: Run, pristine, imported):
    """Capture one exercise; return the Reply if the kernel died doing it, else None."""
    inputs, output = folder / f"inputs-{c.name}.pt", folder / f"capture-{c.name}.pt"
    output.unlink(missing_ok=True)
    # After a cell that timed out, calling its function again would only time out again.
    function = c.function if c.name not in run.events else None
    if function:
        torch.save(c.cases, inputs)
    params = {"variable": c.variable, "args": c.args, "kwargs": c.kwargs,
              "function": function, "inputs": str(inputs), "output": str(output),
              "case_seconds": float(c.case_seconds), "pristine": pristine,
              "imported": imported}
    code = (IN_KERNEL + f"\n_attnbook_capture({params!r})\n"
            "del _attnbook_capture\n")
    reply = kernel.run(code, timeout=c.case_seconds * len(c.cases) + 60, silent=True)
    inputs.unlink(missing_ok=True)  # the hidden inputs exist only while the capture runs
    if reply.status == "dead":
        return reply
    if reply.status != "ok" or not output.exists():
        why = reply.error or reply.status
        run.events.setdefault(c.name, f"the grader could not read the answer ({why})")
        return None
    try:
        run.captured[c.name] = torch.load(output, weights_only=True)
    except Exception as err:  # a file the notebook replaced with something else
        run.events.setdefault(c.name, f"the grader could not read the answer ({err})")
    return None
