"""The site's loose ends (issue 47, section 3), checked on the built site.

- Search results show titles as text: no title in ``searchindex.js`` (page titles, section
  titles, captions) holds a TeX command (a backslash followed by letters); _ext/attnbook_search.py
  rewrites them ("Why √d and not d").
- No page that nothing links: sphinx-proof's proof index (``prf-prf.html``, raw labels such as
  ``alg-causal``) is not built, and no page links a domain index.
- Captions read as sentences: no table or figure caption has a colon followed by a comma (Table
  17.1 once read "After Triton 3.6.0:, what ...").
- Every figure says what it shows. A figure is an ``<img>`` whose picture the book or a lab made
  (its ``src`` is in ``_images/``; the theme's icons in ``_static/`` are left out). Its alt text
  must be non-empty and not a file name, must not end in a colon (a sentence that introduces
  something, cut off), must have at least :data:`MIN_WORDS` words, and its last sentence (the
  text after the last ``. ``, ``: ``, ``? `` or ``! ``) must have at least :data:`MIN_LAST_WORDS`
  words, so that a lab's "Load balance: Predict first." does not pass for a description.

The site is ``_build/html`` (``make test`` builds it before the unit tests), or the folder in
ATTNBOOK_SITE_DIR (a build made with ``--path-output``). Without a built site the site tests skip.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("ATTNBOOK_SITE_DIR", ROOT / "_build" / "html"))
sys.path.insert(0, str(ROOT / "_ext"))

from attnbook_search import tex_to_text  # noqa: E402

MIN_WORDS = 6
MIN_LAST_WORDS = 4
TEX_COMMAND = re.compile(r"\\[a-zA-Z]+")


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}: run `make book` (make test builds it first)")
    return SITE


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts)


def search_index(site: Path) -> dict:
    text = (site / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


# --- the TeX-to-text rewrite, without a site --------------------------------------------------

@pytest.mark.parametrize("tex, text", [
    (r"Why \sqrt{d} and not d", "Why √d and not d"),
    (r"Filling with -\infty", "Filling with −∞"),
    (r"the book’s \mathbf{W}_q from a packed weight", "the book’s W_q from a packed weight"),
    (r"\theta_c = \text{base}^{-2c/d_h}, c = 0, \dots", "θ_c = base^(−2c/d_h), c = 0, …"),
    ("A title with a well-known hyphen", "A title with a well-known hyphen"),
])
def test_tex_to_text(tex, text):
    assert tex_to_text(tex) == text


def test_tex_to_text_expands_macros():
    assert tex_to_text(r"projection \Wo", {"Wo": r"\mathbf{W}_{\!o}"}) == "projection W_o"


# --- the built site ---------------------------------------------------------------------------

def test_search_titles_are_text(site):
    index = search_index(site)
    titles = list(index["titles"]) + list(index["alltitles"])
    raw = [t for t in titles if TEX_COMMAND.search(t)]
    assert not raw, f"titles in searchindex.js with TeX in them: {raw}"
    assert "Why √d and not d" in index["alltitles"]


def test_no_unlinked_proof_index(site):
    assert not (site / "prf-prf.html").exists(), "sphinx-proof's index is built again"
    linking = [p.relative_to(site).as_posix() for p in pages(site)
               if re.search(r'href="[^"]*(prf-prf|-modindex)\.html', p.read_text(encoding="utf-8"))]
    assert not linking, f"pages linking a domain index: {linking}"


def test_captions_read_as_sentences(site):
    bad = []
    for page in pages(site):
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"<(caption|figcaption)\b.*?</\1>", text, re.S):
            caption = match.group(0)
            plain = _text(caption)
            if re.search(r":\s*,", plain):
                bad.append(f"{page.relative_to(site)}: {plain[:120]}")
    assert not bad, "captions with a colon before a comma:\n" + "\n".join(bad)


def alt_problem(alt: str | None) -> str | None:
    """Why an alt text does not describe its figure, or None."""
    if alt is None or not alt.strip():
        return "no alt text"
    alt = " ".join(alt.split())
    if re.fullmatch(r"[\w./-]+\.(png|jpe?g|svg|gif)", alt, re.I):
        return "a file name"
    if alt.endswith(":"):
        return "ends in a colon"
    if len(alt.split()) < MIN_WORDS:
        return f"fewer than {MIN_WORDS} words"
    last = re.split(r"[.:?!]\s+", alt.rstrip(".!?"))[-1]
    if len(last.split()) < MIN_LAST_WORDS:
        return f"its last sentence ({last!r}) has fewer than {MIN_LAST_WORDS} words"
    return None


@pytest.mark.parametrize("alt, ok", [
    ("Load balance: Predict first.", False),
    ("Every output lies in the convex hull of the values: The picture:", False),
    ("scale_rows.png", False),
    ("", False),
    ("Bar chart of the scores each of four ranks computes, for two layouts.", True),
])
def test_alt_rule(alt, ok):
    assert (alt_problem(alt) is None) == ok


def test_figures_say_what_they_show(site):
    bad = []
    for page in pages(site):
        for tag in re.findall(r"<img\b[^>]*>", page.read_text(encoding="utf-8")):
            src = re.search(r'\bsrc="([^"]*)"', tag)
            if not src or "_images/" not in src.group(1):
                continue
            alt = re.search(r'\balt="([^"]*)"', tag)
            problem = alt_problem(html.unescape(alt.group(1)) if alt else None)
            if problem:
                bad.append(f"{page.relative_to(site)} {src.group(1)}: {problem}")
    assert not bad, "figures whose alt text does not say what they show:\n" + "\n".join(bad)
