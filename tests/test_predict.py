"""Predict first, then run (issue #30 §3): the helper, and the prompts in the labs.

Each lab in PREDICT_DONE asks at least two questions before cells that measure: a markdown
prompt, a code cell holding the reader's guess (stored as None), and right after it the
measuring cell, which prints the guess beside the result with attnbook.lab.predict. The student
editions keep the prompts and grade none of them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from attnbook.lab.predict import compare_prediction

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from grading import handouts, labs  # noqa: E402

# Every lab asks its questions (issue #30 §3): a new lab fails here until it has its prompts.
PREDICT_DONE = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PROMPT = "**Predict first.**"
GUESS = re.compile(r"^(guess_\w+) = None  # your guess: \S", re.M)


def _said(capsys, *args, **kwargs) -> str:
    compare_prediction(*args, **kwargs)
    return capsys.readouterr().out.strip()


def test_no_guess_prints_the_result_and_how_to_take_part(capsys):
    line = _said(capsys, None, 0.70710678, what="the spread")
    assert line == ("the spread: measured 0.707 (no guess yet: write one in the cell above "
                    "and run both cells again)")


def test_numeric_guesses_are_judged_by_their_ratio(capsys):
    assert _said(capsys, 3072, 3072, what="n", fmt="d").endswith("measured 3072: right")
    assert _said(capsys, 0.7, 0.707, what="s").endswith(": close")
    assert _said(capsys, 1000, 3072, what="n", fmt="d").endswith(
        "the result is 3.1 times your guess")
    assert _said(capsys, 10.0, 1.0, what="r").endswith("your guess is 10 times the result")
    assert _said(capsys, -1, 2.0, what="x").endswith("off by 3")
    # A one-element tensor is a number; a float guess for an integer format still prints.
    assert "you guessed 3072.5, measured 3072" in _said(capsys, 3072.5, torch.tensor(3072),
                                                        what="n", fmt="d")


def test_other_guesses_are_compared_for_equality(capsys):
    assert _said(capsys, (1, 6, 6), torch.Size([1, 6, 6]), what="shape").endswith(": right")
    assert "not this time" in _said(capsys, (1, 6, 8), (1, 6, 6), what="shape")
    assert _said(capsys, True, True, what="NaN?").endswith(": right")
    assert _said(capsys, " Sinusoidal", "sinusoidal", what="best").endswith(": right")


@pytest.mark.parametrize("guess, measured, words", [
    ("3", 3.0, "should be a number like the result, got str '3'"),
    (3, (1, 2), "should be a shape (a tuple of sizes) like the result, got int 3"),
    (1, True, "should be True or False like the result, got int 1"),
    (float("nan"), 1.0, "is NaN"),
])
def test_a_guess_of_the_wrong_kind_gets_a_message_with_both_kinds_named(capsys, guess,
                                                                        measured, words):
    """Issue 48: a wrong kind of guess is a line saying what to write, not a traceback."""
    said = _said(capsys, guess, measured, what="x")
    assert words in said and "run both cells again" in said


def test_a_question_with_choices_takes_its_words(capsys):
    """Issue 48: "up or down?" takes "up" or "down" (any case), and says so to anything else."""
    up_down = {"what": "acc", "choices": ("up", "down")}
    assert _said(capsys, " Down", "down", **up_down).endswith(": right")
    assert "not this time" in _said(capsys, "up", "down", **up_down)
    for guess in (0.3, "lower"):
        assert "is not one of 'up' or 'down'" in _said(capsys, guess, "down", **up_down)
    assert "measured 'down' (no guess yet" in _said(capsys, None, "down", **up_down)
    with pytest.raises(ValueError, match="one of the choices"):
        compare_prediction("up", 0.1, **up_down)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="what must name"):
        compare_prediction(None, 1.0, what="")
    with pytest.raises(ValueError, match="rel_tol"):
        compare_prediction(None, 1.0, what="x", rel_tol=1.5)


def _prompts(nb) -> list[tuple[int, str]]:
    """(index of the measuring cell, guess variable) for every prompt of a lab."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or not cell.source.startswith(PROMPT):
            continue
        guess_cell, measure = nb.cells[i + 1], nb.cells[i + 2]
        match = GUESS.search(guess_cell.source)
        assert guess_cell.cell_type == "code" and match, (
            f"cell {i + 1} should hold the guess: `guess_x = None  # your guess: ...`")
        name = match.group(1)
        assert name in cell.source, f"prompt {i} does not name its variable {name}"
        assert measure.cell_type == "code" and f"compare_prediction({name}" in measure.source, (
            f"cell {i + 2}, right after the guess, should measure and print {name} beside it")
        found.append((i + 2, name))
    return found


@pytest.mark.parametrize("lab", PREDICT_DONE)
def test_lab_asks_at_least_two_questions_before_measuring(lab):
    nb = nbformat.read(ROOT / "notebooks" / f"{lab}.ipynb", as_version=4)
    prompts = _prompts(nb)
    assert len(prompts) >= 2, f"{lab}: {len(prompts)} predict-first prompts, want 2 or more"
    assert len({name for _, name in prompts}) == len(prompts), f"{lab}: a guess name reused"
    for index, _ in prompts:
        printed = handouts._printed(nb.cells[index])
        # Stored as the site shows it: no guess, the measured result and how to take part.
        assert "(no guess yet:" in printed, f"{lab} cell {index}: stored without its line"


@pytest.mark.parametrize("lab", PREDICT_DONE)
def test_student_edition_keeps_the_prompts_and_grades_none(lab):
    nb = nbformat.read(ROOT / "notebooks" / f"{lab}.ipynb", as_version=4)
    exercises = labs.find_exercises(nb)
    student = handouts.student_edition(nb, exercises)
    assert len(_prompts(student)) == len(_prompts(nb))
    graded = {ex.check for ex in exercises}
    assert not any("compare_prediction" in check for check in graded)
