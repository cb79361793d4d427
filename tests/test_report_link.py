"""Every page's "Report a problem" link (_ext/attnbook_report.py): a GitHub new-issue URL that
names the page, the section and the commit the site was built from, pointed at a fork by
scripts/set_repository.py.

A tiny Sphinx build (the book's theme, two pages, in a fresh git repository) checks the link as a
page carries it; the scroll-following section is checked in a browser on a built page when one
is there (``-m browser``, like tests/test_site_browser.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))
from attnbook_report import UNKNOWN, issue_url, site_commit  # noqa: E402

SPHINX = [sys.executable, "-m", "sphinx"]
LINK = re.compile(r'<a href="([^"]*)"[^>]*class="btn btn-sm btn-report-problem"[^>]*>(.*?)</a>',
                  re.S)

CONF = """
import sys
sys.path.insert(0, {ext!r})
project = "Tiny"
extensions = ["attnbook_report"]
html_theme = "sphinx_book_theme"
html_theme_options = {{"repository_url": {repo!r}, "use_repository_button": True}}
"""
INDEX = """Tiny book
=========

.. toctree::

   chapter

Intro text.
"""
CHAPTER = """The causal mask
===============

Some text.

Building the mask
-----------------

More text.
"""


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _build(src: Path, repo: str = "https://github.com/attnbook/attention-step-by-step") -> Path:
    src.mkdir(parents=True, exist_ok=True)
    (src / "conf.py").write_text(CONF.format(ext=str(ROOT / "_ext"), repo=repo), encoding="utf-8")
    (src / "index.rst").write_text(INDEX, encoding="utf-8")
    (src / "chapter.rst").write_text(CHAPTER, encoding="utf-8")
    out = src / "_build"
    subprocess.run([*SPHINX, "-q", "-b", "html", str(src), str(out)], check=True,
                   capture_output=True, text=True)
    return out


def _link(page: Path) -> tuple[str, str]:
    found = LINK.findall(page.read_text(encoding="utf-8"))
    assert len(found) == 1, f"expected one report link on {page.name}, found {len(found)}"
    href, inner = found[0]
    return unescape(href), re.sub(r"<[^>]+>", " ", inner)


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    src = tmp_path_factory.mktemp("tiny") / "src"
    src.mkdir()
    _git(src, "init", "-q")
    (src / "README").write_text("tiny\n", encoding="utf-8")
    _git(src, "add", "README")
    _git(src, "commit", "-q", "-m", "first")
    return _build(src), _git(src, "rev-parse", "HEAD")


def test_the_link_names_page_section_and_commit(built):
    out, commit = built
    href, text = _link(out / "chapter.html")
    parts = urlsplit(href)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == (
        "https://github.com/attnbook/attention-step-by-step/issues/new")
    query = _query(href)
    assert query["title"] == "chapter.rst: The causal mask"
    assert "**Page:** chapter.rst" in query["body"]
    assert "**Section:** The causal mask" in query["body"]
    assert f"**Site version:** {commit} (" in query["body"]
    assert f"/commit/{commit})" in query["body"]
    assert "Report a problem" in text  # a real link with words, not an icon alone
    page = (out / "chapter.html").read_text(encoding="utf-8")
    assert "_static/attnbook-report.js" in page  # the script that follows the section
    assert (out / "_static" / "attnbook-report.js").exists()


def test_every_page_has_one_link(built):
    out, _ = built
    for name in ("index.html", "chapter.html"):
        href, _ = _link(out / name)
        assert _query(href)["title"].startswith(name.replace(".html", ".rst") + ": ")


def test_the_commit_is_unknown_outside_git(tmp_path):
    assert site_commit(tmp_path) == UNKNOWN
    out = _build(tmp_path / "src")
    body = _query(_link(out / "chapter.html")[0])["body"]
    assert "**Site version:** unknown\n" in body


def test_site_commit_reads_this_checkout():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    commit = site_commit(ROOT)
    assert re.fullmatch(r"[0-9a-f]{40}", commit)


def test_url_function_names_the_section_and_its_anchor():
    url = issue_url("https://github.com/o/r/", "book/04_causal_mask.md", "4.2. Building the mask",
                    "a" * 40, anchor="building-the-mask")
    assert url.startswith("https://github.com/o/r/issues/new?")
    query = _query(url)
    assert query["title"] == "book/04_causal_mask.md: 4.2. Building the mask"
    assert "**Section:** 4.2. Building the mask (#building-the-mask)" in query["body"]


@pytest.mark.parametrize("bad", ["https://gitlab.com/o/r", "https://github.com/o", "o/r"])
def test_a_repository_that_is_not_github_is_refused(bad):
    with pytest.raises(ValueError, match="https://github.com/OWNER/REPO"):
        issue_url(bad, "p.md", "s", UNKNOWN)


def test_set_repository_points_the_link_at_a_fork(tmp_path):
    """set_repository.py rewrites _config.yml's repository block, which Jupyter Book hands to
    the theme as repository_url, where the extension reads it."""
    from jupyter_book.config import get_final_config
    from set_repository import set_repository

    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    set_repository("https://github.com/a-course/a-fork", root=tmp_path)
    config, _ = get_final_config(user_yaml=tmp_path / "_config.yml", sourcedir=tmp_path,
                                 cli_config={"latex_individualpages": False},
                                 validate=False)
    repo = config["html_theme_options"]["repository_url"]
    assert repo == "https://github.com/a-course/a-fork"
    assert "attnbook_report" in config["extensions"]
    out = _build(tmp_path / "site", repo=repo)
    assert _link(out / "chapter.html")[0].startswith(
        "https://github.com/a-course/a-fork/issues/new?")


BUILT = Path(os.environ.get("ATTNBOOK_SITE_DIR", ROOT / "_build" / "html"))
CHROMIUM = os.environ.get("ATTNBOOK_CHROMIUM", "/usr/bin/chromium")


@pytest.mark.browser
def test_the_section_follows_the_reader():
    """On a built chapter page, scrolling to a section puts its heading in the link."""
    page = BUILT / "book" / "04_causal_mask.html"
    if not page.exists():
        pytest.skip(f"no built site at {BUILT}")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        tab = browser.new_page()
        tab.route(re.compile(r"^https?://"), lambda route: route.abort())
        tab.goto(page.as_uri())
        heading = tab.locator("article.bd-article section section h2").nth(1)
        anchor = heading.evaluate("h => h.closest('section').id")
        tab.evaluate("id => document.getElementById(id).scrollIntoView()", anchor)
        tab.wait_for_timeout(200)
        href = tab.locator("a.btn-report-problem").get_attribute("href")
        browser.close()
    query = _query(href)
    assert query["title"].startswith("book/04_causal_mask.md: ")
    assert f"(#{anchor})" in query["body"]
