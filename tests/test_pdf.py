"""The book as one PDF (issue 47, section 4), checked on the PDF that ``make pdf`` printed.

``make test`` prints it after the site build, beside its ``colab`` stage (``test-pdf``), and then
runs this file; without a PDF the PDF checks skip (run ``make pdf``). The PDF's text, pages,
images and links are read with poppler-utils (``pdftotext``, ``pdfinfo``, ``pdfimages``;
``.ci/run`` installs them) and from its own bytes; ``scripts/build_pdf.py`` writes beside it a
record of what the printed page held.

- Every page of the table of contents is in it, in reading order: each chapter, lab and appendix
  opens a page with its heading as the site shows it, number included ("3. Scaling by √d",
  "Lab 3 — ..."), and there is a page for each part.
- No raw TeX: no command that the book's math uses (``\\frac``, ``\\sqrt``, the macros of
  ``_config.yml``, ...) and no ``$...$``, ``\\(`` or ``\\[`` in the text; MathJax typeset every
  formula of the page, with no error.
- Numbers as on the site: every figure number ("Fig. 3.1") and equation number ("(3.2)") that the
  site's pages show is in the PDF.
- Every figure embedded: each picture the site's pages show (``_images/``) was loaded by the
  printed page, and the PDF draws as many images as the printed page showed (widgets' included).
- Its length is within :data:`PAGES`.
- Working internal links: cross-references, the contents and figure, equation and exercise
  numbers are links to places inside the PDF (named destinations, each of them defined), and the
  PDF has bookmarks.
- Made offline: the page requested nothing from another host, raised no error, drew every widget.

The site is ``_build/html`` (or ATTNBOOK_SITE_DIR), the PDF ``_build/pdf/`` (or ATTNBOOK_PDF).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import toc_pages  # noqa: E402

SITE = Path(os.environ.get("ATTNBOOK_SITE_DIR", ROOT / "_build" / "html"))
NAME = "attention-step-by-step.pdf"
PDF = Path(os.environ.get("ATTNBOOK_PDF", ROOT / "_build" / "pdf" / NAME))
RECORD = PDF.with_suffix(".json")
# The A4 PDF of this book had 700 pages when this range was set (2026-12, chapters 0-22); a page
# count outside it means pages went missing or the layout broke (a page a line, ...). A new
# chapter with its lab adds about 30.
PAGES = (550, 950)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: apt-get install -y poppler-utils (.ci/run does)")
    return path


@pytest.fixture(scope="module")
def pdf() -> Path:
    if not PDF.exists():
        pytest.skip(f"no PDF at {PDF}: run `make pdf` (make test builds it first)")
    return PDF


@pytest.fixture(scope="module")
def record(pdf) -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def pages(pdf) -> list[str]:
    """The text of each page (pdftotext, reading order)."""
    out = subprocess.run([_tool("pdftotext"), "-enc", "UTF-8", str(pdf), "-"],
                         capture_output=True, text=True, check=True).stdout
    return out.split("\f")[:-1] if out.endswith("\f") else out.split("\f")


@pytest.fixture(scope="module")
def text(pages) -> str:
    return _norm("\n".join(pages))


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}: run `make book` (make test builds it first)")
    return SITE


def _norm(text: str) -> str:
    """One space for any run of white space; typographic quotes and dashes as the site has them."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"')
    text = text.replace("\u201d", '"').replace("\ufb01", "fi").replace("\ufb02", "fl")
    return " ".join(text.split())


def _plain(fragment: str) -> str:
    """The text of an HTML fragment, without its math and header links."""
    fragment = re.sub(r'<span class="math[^"]*">.*?</span>', " ", fragment, flags=re.S)
    fragment = re.sub(r'<a class="headerlink".*?</a>', "", fragment, flags=re.S)
    return _norm(html.unescape(re.sub(r"<[^>]+>", "", fragment)))


def site_heading(site: Path, page: str) -> str:
    """A toc page's heading on the site ("3. Scaling by √d", "Lab 3 — ..."), math left out."""
    text = (site / (page + ".html")).read_text(encoding="utf-8")
    # The page's own heading (with its anchor), not the theme's print header above it.
    return _plain(next(h for h in re.findall(r"<h1[^>]*>(.*?)</h1>", text, re.S)
                       if "headerlink" in h))


def source_title(page: str) -> str:
    for suffix in (".md", ".ipynb"):
        path = ROOT / (page + suffix)
        if path.exists():
            source = path.read_text(encoding="utf-8")
            if suffix == ".ipynb":
                source = "\n".join("".join(c["source"]) for c in json.loads(source)["cells"]
                                   if c["cell_type"] == "markdown")
            return _norm(re.search(r"^# (.+)$", source, re.M).group(1))
    raise FileNotFoundError(page)


def site_pages(site: Path) -> list[str]:
    return [(site / (p + ".html")).read_text(encoding="utf-8") for p in toc_pages()]


def math_commands() -> set[str]:
    """The TeX commands the book's math uses (in $...$, $$...$$, {math} and amsmath blocks)."""
    found: set[str] = set()
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    found.update(macros)
    for page in toc_pages():
        for suffix in (".md", ".ipynb"):
            path = ROOT / (page + suffix)
            if not path.exists():
                continue
            source = path.read_text(encoding="utf-8")
            if suffix == ".ipynb":
                source = "\n".join("".join(c["source"]) for c in json.loads(source)["cells"]
                                   if c["cell_type"] == "markdown")
            source = re.sub(r"(`{3,})(?!\{math\})[^\n]*\n.*?\n\1", "", source, flags=re.S)
            math = re.findall(r"\$\$.*?\$\$|\$[^$\n]+\$|```\{math\}.*?```"
                              r"|\\begin\{(?:equation|align|gather)\*?\}.*?\\end\{", source, re.S)
            for block in math:
                found.update(re.findall(r"\\([a-zA-Z]{2,})", block))
    return found - {"n", "t"}


# What the PDF must hold.


def test_every_toc_page_opens_a_page_in_reading_order(pages, site):
    """Each chapter, lab and appendix starts a page with its heading as the site numbers it."""
    openings = [_norm(" ".join(p.split("\n")[:6])) for p in pages]
    at = 0
    for page in toc_pages():
        heading = site_heading(site, page)
        assert source_title(page).split()[-1] in heading, (page, heading)
        found = next((i for i in range(at, len(pages)) if openings[i].startswith(heading)), None)
        assert found is not None, f"no page after page {at + 1} opens with {heading!r} ({page})"
        at = found + 1


def test_each_part_has_a_page(pages):
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    captions = [_norm(part["caption"]) for part in toc["parts"]]
    alone = {re.sub(r" \d+$", "", _norm(p)) for p in pages}  # the page number left out
    assert [c for c in captions if c not in alone] == []


def test_no_raw_tex(text, record):
    commands = math_commands()
    assert {"frac", "sqrt", "softmax"} <= commands  # the book's math is where we looked
    raw = sorted({m for m in re.findall(r"\\([a-zA-Z]{2,})", text) if m in commands})
    assert not raw, f"TeX commands in the PDF's text: {raw}"
    assert not re.findall(r"\$[^$\s][^$]{0,80}?\$", text), "unrendered $...$ in the PDF"
    # (The course guide names Moodle's delimiters, \\(...\\), in code: a TeX command must follow.)
    assert not re.findall(r"\\[(\[][^)\]]{0,40}?\\[a-zA-Z]", text), "unrendered \\( or \\["
    assert record["math"] > 0 and record["mathUntypeset"] == 0, record["mathUntypeset"]
    assert not record["mjxErrors"], record["mjxErrors"]


def test_figure_and_equation_numbers_as_on_the_site(text, site):
    figures, equations = set(), set()
    for page in site_pages(site):
        figures.update(_norm(html.unescape(n)) for n in re.findall(
            r'<span class="caption-number">((?:Fig\.|Table) [\d.]+) </span>', page))
        equations.update(re.findall(r'<span class="eqno">(\([\d.]+\))', page))
    assert len(figures) > 20 and len(equations) > 20, (len(figures), len(equations))
    assert sorted(n for n in figures if n not in text) == []
    assert sorted(n for n in equations if n not in text) == []


def test_every_figure_is_embedded(pdf, record, site):
    shown = [img for img in record["images"]]
    assert all(img["ok"] for img in shown), [img["src"] for img in shown if not img["ok"]]
    printed = {img["src"].rsplit("/", 1)[-1] for img in shown}
    figures = set()
    for page in site_pages(site):
        figures.update(src.rsplit("/", 1)[-1] for src in re.findall(
            r'<img[^>]* src="[^"]*_images/([^"]+)"', page))
    assert figures, "no figure found on the site"
    assert sorted(figures - printed) == []
    listed = subprocess.run([_tool("pdfimages"), "-list", str(pdf)], capture_output=True,
                            text=True, check=True).stdout.splitlines()[2:]
    drawn = [line.split() for line in listed]
    images = [row for row in drawn if row[2] == "image"]
    assert len(images) == len(shown), (len(images), len(shown))


def test_page_count_in_range(pdf):
    info = subprocess.run([_tool("pdfinfo"), str(pdf)], capture_output=True, text=True,
                          check=True).stdout
    count = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))
    assert PAGES[0] <= count <= PAGES[1], count


def test_internal_links_work(pdf, record):
    data = pdf.read_bytes()
    links = re.findall(rb"/Subtype\s*/Link", data)
    internal = re.findall(rb"/Dest\s*/([^\s/>\]]+)", data)
    assert record["internalLinks"] > 100 and not record["brokenLinks"], record["brokenLinks"]
    assert len(internal) > 100, (len(links), len(internal))
    dests = subprocess.run([_tool("pdfinfo"), "-dests", str(pdf)], capture_output=True,
                           text=True, check=True).stdout
    defined = {line.split('"')[1] for line in dests.splitlines() if line.count('"') >= 2}
    targets = {re.sub(r"#([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), name.decode())
               for name in internal}
    assert len(defined) > 100
    assert sorted(targets - defined) == [], "links to destinations the PDF does not define"
    if record.get("tagged"):  # `make pdf`'s full PDF; make test's --quick one has none
        assert b"/Outlines" in data, "the PDF has no bookmarks"


def test_made_offline_and_complete(record):
    assert record["blocked"] == [], record["blocked"]
    assert record["page_errors"] == [], record["page_errors"]
    assert record["widgets"] > 0 and record["widgetsNotDrawn"] == []
    assert record["prepared"]["missing"] == []
    assert record["documents"] == toc_pages()[1:] or record["documents"] == toc_pages()


# How it is built and published (no PDF needed).


def test_make_pdf_and_make_test_build_it():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^pdf:.*\n\t.*scripts/build_pdf\.py", makefile, re.M)
    test = re.search(r"^test:\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert re.search(r"-j2 .*\bcolab test-pdf\b", test)  # beside the one-lab-at-a-time stage
    recipe = re.search(r"^test-pdf:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "build_pdf.py --quick" in recipe and "tests/test_pdf.py" in recipe
    assert "pdftotext" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_site_and_readme_link_the_pdf():
    name = NAME
    assert name in (ROOT / "README.md").read_text(encoding="utf-8")
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert f'href="../{name}"' in intro


def test_workflow_publishes_the_pdf():
    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    runs = " ".join(s.get("run", "") for job in flow["jobs"].values() for s in job["steps"])
    assert "poppler-utils" in runs
    assert f"_build/html/{NAME}" in runs
