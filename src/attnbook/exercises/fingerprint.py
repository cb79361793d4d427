"""A fingerprint of a checker's code, so that a grader can tell whether a notebook replaced it."""

from __future__ import annotations

import hashlib
import types


def code_hash(function) -> str:
    """SHA-256 of a function's bytecode, constants and names (the same on one Python version).

    Args:
        function: a Python function.

    Returns:
        A hex digest; it changes when the function's code is replaced (``__code__`` swapped,
        or the name bound to another function), not when it is merely imported again.
    """
    code = function.__code__
    consts = tuple(c for c in code.co_consts if not isinstance(c, types.CodeType))
    return hashlib.sha256(code.co_code + repr((consts, code.co_names)).encode()).hexdigest()
