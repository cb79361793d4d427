"""Start an IPython kernel under resource limits (the grader's kernel command; not for import).

The limits come from the environment, because the kernel's argv belongs to ipykernel:
ATTNBOOK_GRADER_MEMORY (bytes of address space) and ATTNBOOK_GRADER_FILESIZE (bytes per file).
"""

import os
import resource


def _limit(name: str, which: int) -> None:
    value = os.environ.pop(name, "")
    if value:
        resource.setrlimit(which, (int(value), int(value)))


_limit("ATTNBOOK_GRADER_MEMORY", resource.RLIMIT_AS)
_limit("ATTNBOOK_GRADER_FILESIZE", resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file behind

from ipykernel import kernelapp  # noqa: E402  (after the limits, so they cover its imports)

kernelapp.launch_new_instance()
