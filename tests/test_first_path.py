"""The introduction's first path: its reading time is the script's count, not a typed guess.

book/intro.md (section "The first path") names chapters 0 to 8 on their core paths and gives
their main-line words and reading time. The course guide's generator
(scripts/grading/classroom_guide.py) holds the path (``FIRST_PATH``), counts it with
scripts/main_line_words.py and writes the same time under its table; this test recounts it, so
an edit of those chapters that moves either rounded number fails here until the introduction
says the new one.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from grading.classroom_guide import (  # noqa: E402
    FIRST_PATH,
    WORDS_PER_MINUTE,
    first_path_words,
    reading_minutes,
)

INTRO = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_intro_states_the_counted_reading_time_of_the_first_path():
    words = first_path_words()
    minutes = reading_minutes(words)
    path = section(INTRO, "## The first path")
    assert f"**chapters {int(FIRST_PATH[0])} to {int(FIRST_PATH[-1])}**" in path
    assert f"about {round(words, -3):,} words, **{minutes} minutes**" in path, (
        f"chapters 0 to 8 now have {words} main-line words: say 'about {round(words, -3):,} "
        f"words, **{minutes} minutes**' in book/intro.md")
    assert f"at {WORDS_PER_MINUTE} words a minute" in path
    assert "`scripts/main_line_words.py`" in path


def test_the_first_path_is_every_chapter_of_getting_started_and_parts_one_and_two():
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    parts = re.split(r"\n  - caption: ", toc)
    first = [p for p in parts if p.startswith(("Getting started", '"Part I:', '"Part II:'))]
    chapters = [m for p in first for m in re.findall(r"- file: book/(\d\d)_", p)]
    assert tuple(chapters) == FIRST_PATH


def test_the_first_path_counts_main_lines_only():
    """Collapsed blocks and exercises are not on the path; visible prose before them is."""
    import main_line_words

    page = ("# A\n\nFour words of prose.\n\n```{admonition} Deeper: more\n:class: dropdown\n\n"
            "Hidden words here.\n```\n\n## Exercises\n\nLater words.\n")
    assert main_line_words.count(page).main == 5  # "A" and the four words
    assert reading_minutes(1) == 5 and reading_minutes(WORDS_PER_MINUTE * 6) == 10
