"""The introduction's first path: its reading time is the script's count, not a typed guess.

book/intro.md (section "The first path") names chapters 0 to 8 on their core paths and gives
their main-line words and reading time. This test recounts them with
scripts/main_line_words.py and the course guide's rate, so an edit of those chapters that moves
either rounded number fails here until the introduction says the new one.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import main_line_words  # noqa: E402

try:  # the course guide's rate, where the instructor's package keeps the guide
    from grading.classroom_guide import WORDS_PER_MINUTE
except ImportError:  # before the guide moved into scripts/grading/
    from classroom_guide import WORDS_PER_MINUTE

FIRST_PATH = [f"{n:02d}" for n in range(9)]  # chapters 0 to 8: Getting started, Parts I and II
INTRO = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")


def first_path_words() -> int:
    pages = [next((ROOT / "book").glob(f"{n}_*.md")) for n in FIRST_PATH]
    return sum(main_line_words.count(p.read_text(encoding="utf-8")).main for p in pages)


def section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_intro_states_the_counted_reading_time_of_the_first_path():
    words = first_path_words()
    # the course guide's rounding: up to the next five minutes
    minutes = max(5, math.ceil(words / WORDS_PER_MINUTE / 5) * 5)
    path = section(INTRO, "## The first path")
    assert "**chapters 0 to 8**" in path
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
    assert chapters == FIRST_PATH
