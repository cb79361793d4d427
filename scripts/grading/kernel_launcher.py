"""Start an IPython kernel under resource limits (the grader's kernel command; not for import).

The limits come from the environment, because the kernel's argv belongs to ipykernel:
ATTNBOOK_GRADER_MEMORY (bytes of address space) and ATTNBOOK_GRADER_FILESIZE (bytes per file).
"""

import os
import resource


def _limit(which: int, value: str) -> None:
    if not value:
        return
    try:
        resource.setrlimit(which, (int(value), int(value)))
    except (ValueError, OSError):  # macOS refuses some limits: run without rather than fail
        pass


_limit(resource.RLIMIT_AS, os.environ.pop("ATTNBOOK_GRADER_MEMORY", ""))
_limit(resource.RLIMIT_FSIZE, os.environ.pop("ATTNBOOK_GRADER_FILESIZE", ""))
_limit(resource.RLIMIT_CORE, "0")  # a crash leaves no core file behind

from ipykernel import kernelapp  # noqa: E402  (after the limits, so they cover its imports)

kernelapp.launch_new_instance()
