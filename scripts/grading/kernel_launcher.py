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


def _loopback_up() -> None:
    """Bring up ``lo`` in the kernel's own, empty network namespace (``unshare -rn`` leaves it
    down): 127.0.0.1 then works for the lab's own processes and reaches nothing outside."""
    import fcntl
    import socket
    import struct

    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            request = struct.pack("16sh", b"lo", 0)
            flags = struct.unpack("16sh", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
    except OSError:  # not Linux, or not allowed: the lab's loopback cells fail, nothing else
        pass


if os.environ.pop("ATTNBOOK_GRADER_LOOPBACK", ""):
    _loopback_up()
_limit(resource.RLIMIT_AS, os.environ.pop("ATTNBOOK_GRADER_MEMORY", ""))
_limit(resource.RLIMIT_FSIZE, os.environ.pop("ATTNBOOK_GRADER_FILESIZE", ""))
_limit(resource.RLIMIT_CORE, "0")  # a crash leaves no core file behind

from ipykernel import kernelapp  # noqa: E402  (after the limits, so they cover its imports)

kernelapp.launch_new_instance()
