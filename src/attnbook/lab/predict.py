"""Predict first, then run: a lab's guess printed beside what the lab measured.

A lab asks a question before the cell that measures ("Predict first: how much larger is ...?")
and gives the reader a variable to write a guess into (``guess_ratio = None``). The measuring
cell then calls :func:`compare_prediction`, which prints the guess beside the result and says
how far apart they are. Nothing is graded: the student editions keep these cells, their outputs
cleared (the stored output states the result).

A lab stored with ``None`` (as the site shows it) prints the result and how to take part, so the
page reads well before anyone has guessed.
"""

from __future__ import annotations

import math
import numbers

import torch

_NO_GUESS = "no guess yet: write one in the cell above and run both cells again"


def _as_number(value) -> int | float | None:
    """A real number from an int, a float or a one-element tensor (not a bool), else None."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
            return None
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def compare_prediction(guess, measured, *, what: str, fmt: str = ".3g",
                       rel_tol: float = 0.1, choices: tuple[str, ...] | None = None) -> None:
    """Print the reader's guess beside the measured result.

    Numbers are compared by their ratio: within ``rel_tol`` reads "close", otherwise the line
    says how many times larger or smaller the result is, so a guess that is off by a factor of
    ten learns that it was. Anything else (a shape, a bool, a word) is compared for equality.
    A guess of another kind than the prompt asks for (a word where a number is asked, a number
    for "up or down?") is not compared: the line says what kind of guess to write instead.

    Args:
        guess: the reader's prediction, or ``None`` when there is none yet.
        measured: what the lab computed: a number (int, float, one-element tensor), a
            ``torch.Size``/tuple, a bool or a string.
        what: a short name of the quantity ("the ratio of the two times").
        fmt: format of numbers in the printed line (the stored output must not depend on the
            CPU: round to what the lab can promise).
        rel_tol: relative distance below which a numeric guess is "close", in (0, 1).
        choices: the words a guess may be, for a question such as "up or down?" (``measured``
            is then one of them); any other guess gets a line naming them.

    Returns:
        None (a returned line would be shown twice as a cell's last expression).

    Raises:
        TypeError: ``what`` not a non-empty string.
        ValueError: ``rel_tol`` outside (0, 1), or ``measured`` not one of ``choices``.
    """
    if not isinstance(what, str) or not what.strip():
        raise TypeError(f"what must name the quantity as a non-empty string, got {what!r}")
    if not isinstance(rel_tol, float | int) or not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol must be a number in (0, 1), got {rel_tol!r}")
    if choices is not None and _normalise(measured) not in [_normalise(c) for c in choices]:
        raise ValueError(f"measured must be one of the choices {choices}, got {measured!r}")
    number = _as_number(measured)
    shown = _format(number, fmt) if number is not None else _show(measured)
    if guess is None:
        print(f"{what}: measured {shown} ({_NO_GUESS})")
        return
    if choices is not None:
        if not isinstance(guess, str) or _normalise(guess) not in [_normalise(c) for c in choices]:
            words = " or ".join(repr(c) for c in choices)
            print(f"{what}: your guess {guess!r} is not one of {words}: write one of them "
                  "in the cell above and run both cells again")
            return
    if number is not None:
        g = _as_number(guess)
        if g is None:
            print(f"{what}: your guess should be a number like the result, got "
                  f"{type(guess).__name__} {guess!r}: write a number in the cell above and "
                  "run both cells again")
            return
        if math.isnan(g):
            print(f"{what}: your guess is NaN: write a number in the cell above and run both "
                  "cells again")
            return
        verdict = _numeric_verdict(g, number, rel_tol)
        line = f"{what}: you guessed {_format(g, fmt)}, measured {shown}: {verdict}"
    else:
        if _kind(guess) != _kind(measured):
            print(f"{what}: your guess should be {_kind(measured)} like the result, got "
                  f"{type(guess).__name__} {guess!r}: write one in the cell above and run "
                  "both cells again")
            return
        same = _normalise(guess) == _normalise(measured)
        line = (f"{what}: you guessed {_show(guess)}, measured {shown}: "
                + ("right" if same else "not this time: look at why before reading on"))
    print(line)


def _numeric_verdict(guess: float, measured: float, rel_tol: float) -> str:
    if guess == measured:
        return "right"
    if math.isclose(guess, measured, rel_tol=rel_tol, abs_tol=1e-12):
        return "close"
    if measured == 0 or guess == 0 or (guess < 0) != (measured < 0):
        return f"off by {abs(measured - guess):.3g}"
    factor = measured / guess
    if factor > 1:
        return f"the result is {factor:.2g} times your guess"
    return f"your guess is {1 / factor:.2g} times the result"


def _format(number: int | float, fmt: str) -> str:
    """``number`` in ``fmt``; a float guess for an integer format is shown as a float."""
    try:
        return format(number, fmt)
    except ValueError:
        return format(number, ".6g")


def _kind(value) -> str:
    if isinstance(value, bool):
        return "True or False"
    if isinstance(value, str):
        return "a word"
    if isinstance(value, tuple | list | torch.Size):
        return "a shape (a tuple of sizes)"
    return type(value).__name__


def _normalise(value):
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, tuple | list | torch.Size):
        return tuple(value)
    return value


def _show(value) -> str:
    if isinstance(value, torch.Size):
        return str(tuple(value))
    return repr(value) if isinstance(value, str) else str(value)
