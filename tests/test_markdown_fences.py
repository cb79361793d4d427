"""Directives that open with a backtick fence keep their captions free of backticks.

CommonMark ends a backtick fence's info string at a backtick, so a directive opened with ```
whose caption holds a role or inline code ({glue:text}`...`) is not a directive at all: the
site shows its source, and everything after it on the page (found on chapters 17, 18 and 20).
Such directives need a colon fence (:::{table} ...).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "book").glob("*.md"))


def backtick_captions(text: str) -> list[str]:
    """The opening lines of backtick fences whose info string holds a backtick."""
    return [line for line in text.splitlines()
            if re.match(r"^\s*`{3,}\{", line) and "`" in re.sub(r"^\s*`{3,}", "", line)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_no_backtick_fence_has_a_backtick_in_its_info_string(page):
    assert backtick_captions(page.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_caption_with_a_role():
    bad = "```{list-table} Chance is {glue:text}`lab.ipynb::chance:s`.\n:name: t\n```"
    good = ":::{list-table} Chance is {glue:text}`lab.ipynb::chance:s`.\n:name: t\n:::"
    assert backtick_captions(bad) and not backtick_captions(good)
