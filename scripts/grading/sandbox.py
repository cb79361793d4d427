"""A fresh ``python3`` kernel for one submission, as isolated as a local run can make it.

What it does: the kernel gets a scrubbed environment (no variable of the grader's shell, so no
tokens or paths leak in), a temporary home and working folder that are deleted afterwards, a
limit on its address space (a runaway allocation raises MemoryError instead of taking the
machine) and on the size of any file it writes, and, where Linux lets an unprivileged user
create namespaces (``unshare -rn``), no network at all: the kernel talks to the grader over
Unix sockets, so it needs none. Inside that empty namespace the kernel brings up its own
loopback device, which reaches nothing outside it: lab 15 runs ring attention between processes
on 127.0.0.1 (gloo), and without it that cell waited for its time limit (about 2 minutes a
hand-in) and failed.

What it does not do: the kernel still runs as the instructor's user and can read (and write)
whatever that user can, outside the temporary folders too. scripts/grade.py therefore loads the
pristine checkers before any kernel starts and fingerprints them before and after a run; the
course guide says plainly that containers (Gradescope) are the stronger boundary.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpec

LAUNCHER = Path(__file__).resolve().parent / "kernel_launcher.py"
PRINTED_LIMIT = 100_000  # characters of a cell's output kept for diagnostics
INTERRUPT_WAIT = 20.0  # seconds an interrupted cell has to reply
PROBE_WAIT = 10.0  # seconds an idle kernel has to answer "pass" when that reply did not come


@dataclass(frozen=True)
class Limits:
    """Resource limits of one kernel."""

    memory_gib: float = 4.0  # address space; torch on the CPU needs about 1 GiB to start
    file_mib: int = 256  # the largest file the kernel may write
    network: bool = False  # True keeps the network (e.g. a lab that downloads on purpose)


@dataclass
class Reply:
    """What running one piece of code in the kernel gave."""

    status: str  # "ok", "error", "timeout" (interrupted) or "dead" (the kernel is gone)
    error: str = ""  # "ValueError: ..." for status "error"
    stdout: str = ""  # what it printed (streams and results), for diagnostics
    seconds: float = 0.0


@functools.cache
def can_unshare_network() -> bool:
    """Whether ``unshare -rn`` works here (a Linux user namespace with its own empty network)."""
    if not shutil.which("unshare"):
        return False
    try:
        return subprocess.run(["unshare", "-rn", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def scrubbed_env(home: Path, limits: Limits) -> dict[str, str]:
    """The kernel's whole environment: nothing of the grader's, a temporary home."""
    bin_dir = str(Path(sys.executable).parent)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.pathsep.join([bin_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home), "TMPDIR": str(tmp), "IPYTHONDIR": str(home / ".ipython"),
        "MPLCONFIGDIR": str(home / ".matplotlib"), "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
        # One thread per kernel: the grader runs several kernels side by side.
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "ATTNBOOK_STATIC_WIDGETS": "skip",  # widgets are not graded: don't precompute them
        "ATTNBOOK_GRADER_MEMORY": str(int(limits.memory_gib * 2**30)),
        "ATTNBOOK_GRADER_FILESIZE": str(int(limits.file_mib * 2**20)),
    }


class Kernel:
    """One kernel in a sandbox folder; use as a context manager.

    Args:
        folder: an empty folder; the kernel's home, working folder and sockets go inside.
        limits: its resource limits.
    """

    def __init__(self, folder: Path, limits: Limits = Limits()):
        self.folder, self.limits = folder, limits
        self.home, self.work = folder / "home", folder / "work"
        self.no_network = not limits.network and can_unshare_network()
        self.km: KernelManager | None = None
        self.kc = None

    def __enter__(self) -> Kernel:
        self.home.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, str(LAUNCHER), "-f", "{connection_file}"]
        if self.no_network:
            argv = ["unshare", "-rn", *argv]
        # Unix sockets, not TCP: they work inside an empty network namespace.
        self.km = KernelManager(transport="ipc", ip=str(self.folder / "kernel"),
                                connection_file=str(self.folder / "kernel.json"))
        self.km._kernel_spec = KernelSpec(argv=argv, display_name="Python 3 (graded)",
                                          language="python")
        env = scrubbed_env(self.home, self.limits)
        if self.no_network:
            env["ATTNBOOK_GRADER_LOOPBACK"] = "1"  # its own namespace's 127.0.0.1, nothing more
        self.km.start_kernel(env=env, cwd=str(self.work))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.kc is not None:
                self.kc.stop_channels()
        finally:
            if self.km is not None and self.km.has_kernel:
                self.km.shutdown_kernel(now=True)

    def alive(self) -> bool:
        return self.km is not None and self.km.is_alive()

    def run(self, code: str, timeout: float, silent: bool = False) -> Reply:
        """Run ``code``; past ``timeout`` seconds interrupt it (KeyboardInterrupt) and go on.

        Args:
            code: the cell's source.
            timeout: seconds it may take.
            silent: True for the grader's own code (no history, no ``_`` changed).

        Returns:
            The reply; status "dead" if the kernel died or could not be interrupted.
        """
        if not self.alive():
            return Reply("dead", "the kernel is not running")
        printed: list[str] = []
        error = [""]

        def keep(text: str) -> None:  # a cell that prints for ever must not fill our memory
            if sum(map(len, printed)) < PRINTED_LIMIT:
                printed.append(text[:PRINTED_LIMIT])

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                keep(content["text"])
            elif kind in ("execute_result", "display_data"):
                keep(content["data"].get("text/plain", ""))
            elif kind == "error":
                error[0] = f"{content['ename']}: {content['evalue']}".strip()

        start = time.monotonic()
        try:
            reply = self.kc.execute_interactive(code, silent=silent, store_history=not silent,
                                                allow_stdin=False, timeout=timeout,
                                                output_hook=hook)
        except TimeoutError:
            return self._interrupt(start)
        except RuntimeError as err:  # the kernel died while running the code
            return Reply("dead", str(err), "".join(printed), time.monotonic() - start)
        content = reply["content"]
        status = "ok" if content.get("status") == "ok" else "error"
        if status == "error" and not error[0]:
            error[0] = f"{content.get('ename', 'Error')}: {content.get('evalue', '')}".strip()
        if not self.alive():
            return Reply("dead", error[0] or "the kernel died", "".join(printed),
                         time.monotonic() - start)
        return Reply(status, error[0], "".join(printed), time.monotonic() - start)

    def _absorb_late_interrupt(self) -> None:
        """Run ``pass`` until it succeeds (twice at most): a SIGINT that reaches the kernel
        after the interrupted cell has replied raises KeyboardInterrupt in the next cell, which
        must not be the student's (seen once on a loaded CI machine)."""
        for _ in range(2):
            try:
                probe = self.kc.execute_interactive("pass", silent=True, store_history=False,
                                                    allow_stdin=False, timeout=PROBE_WAIT)
            except (TimeoutError, RuntimeError):
                return
            if probe["content"].get("status") == "ok":
                return

    def _interrupt(self, start: float) -> Reply:
        """Interrupt the running code and wait for its reply (an endless loop ends here)."""
        seconds = time.monotonic() - start
        if not self.alive():
            return Reply("dead", "the kernel died", "", seconds)
        self.km.interrupt_kernel()
        deadline = time.monotonic() + INTERRUPT_WAIT
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_shell_msg(timeout=1)
            except Exception:  # queue.Empty: no reply yet
                if not self.alive():
                    break
                continue
            if msg["msg_type"] == "execute_reply":
                self._absorb_late_interrupt()
                return Reply("timeout", "", "", seconds)
        # No reply: either the reply was lost (the kernel is idle and answers) or a loop inside
        # C code ignores SIGINT (it does not): then stop the kernel; what is left is not graded.
        try:
            probe = self.kc.execute_interactive("pass", silent=True, store_history=False,
                                                allow_stdin=False, timeout=PROBE_WAIT)
            if probe["content"].get("status") == "ok":
                return Reply("timeout", "", "", seconds)
        except (TimeoutError, RuntimeError):
            pass
        self.km.shutdown_kernel(now=True)
        return Reply("dead", "the kernel did not stop when interrupted", "", seconds)
