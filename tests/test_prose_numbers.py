"""Numbers in the prose come from the labs: no literal measurement is typed into a chapter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from prose_numbers import PAGES, glued_count, literal_numbers  # noqa: E402


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_hand_copied_numbers(path):
    found = literal_numbers(path)
    assert not found, (
        f"{path.name} types these numbers: {found}. Paste measured values from the lab with "
        "{glue:text}`../notebooks/<lab>.ipynb::<key>:s`, or allow a constant in the page with "
        "<!-- literal numbers: ... -->"
    )


def test_the_checker_catches_a_typed_measurement(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("The variance is 0.97 and 74% of rows saturate, 4000 times smaller.\n",
                    encoding="utf-8")
    assert literal_numbers(page) == ["0.97", "74%", "4000 times"]


def test_the_checker_ignores_math_code_glue_and_allowed_constants(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- literal numbers: 65504 -->\n"
        "Inline $x = 0.5$ and `y = 0.25`, fp16 tops out at 65504.0 and 65504, torch 2.13,\n"
        "glued {glue:text}`../notebooks/a.ipynb::k:s`.\n\n"
        "$$\ns = 1.5\n$$\n\n```python\nz = 3.75\n```\n\n```{math}\n:label: eq\nw = 2.5\n```\n",
        encoding="utf-8")
    assert literal_numbers(page) == ["65504.0"]
    assert glued_count(page) == 1
