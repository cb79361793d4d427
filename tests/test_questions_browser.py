"""The chapters' retrieval questions in a real browser, from the keyboard, without a kernel.

For every page that shows questions (the question files of book/questions name their pages):
each question is answered once wrong and once right, from the keyboard only (Tab-reachable
controls, Space to pick an option, Enter to check), and the feedback shown each time must be
the verdict and the explanation that the question file gives (for a wrong option, the
explanation of the misconception behind that option; for a wrong number, the named mistake or
the hint). Then axe-core audits the questions with their feedback showing, in light and in dark
mode, and must find no violation at all. Like tests/test_site_browser.py (whose fixtures it
uses), it serves _build/html on 127.0.0.1, blocks every other host and uses /usr/bin/chromium.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "tests"))
from attnbook_questions import answer_of, load_questions  # noqa: E402
from test_site_browser import AXE, CHROMIUM, SHOTS, SITE, _QuietHandler  # noqa: E402

QUESTIONS = ROOT / "book" / "questions"
FILES = sorted(p for p in QUESTIONS.glob("*.yaml"))


def _plain(markdown: str) -> str:
    """The words of a MyST snippet as the page shows them, without math and code markup, for
    a containment check (math is typeset, so it is dropped)."""
    text = re.sub(r"\$[^$]*\$", " ", markdown)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = text.replace("\\\\", "\\")
    return " ".join(text.split())


def _words(markdown: str) -> list[str]:
    """A few long words of the snippet's prose that the page's text must contain."""
    words = [w.strip(".,:;()\"'") for w in _plain(markdown).split()]
    return [w for w in words if len(w) >= 5 and re.fullmatch(r"[A-Za-z-]+", w)][:4]


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}: run `make book` (make test builds it first)")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(server):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"])
        yield chromium
        chromium.close()


_FEEDBACK = """(id) => {
  const form = document.getElementById(id);
  const shown = [...form.querySelectorAll(".attnbook-q-why")].filter(e => !e.hidden);
  const box = form.querySelector(".attnbook-q-feedback");
  return {state: form.dataset.state || null,
          verdict: form.querySelector(".attnbook-q-verdict").textContent,
          shown: shown.map(e => e.innerText),
          live: box.getAttribute("role"),
          visible: shown.every(e => e.getBoundingClientRect().height > 0)};
}"""


def _press_check(page, qid):
    button = page.locator(f"#{qid} button.attnbook-q-check")
    button.focus()
    assert page.evaluate("(id) => document.activeElement === "
                         "document.querySelector('#' + id + ' button.attnbook-q-check')", qid)
    page.keyboard.press("Enter")


def _pick(page, qid, k):
    radio = page.locator(f"#{qid}-o{k}")
    radio.focus()
    assert radio.evaluate("e => e.tabIndex >= 0 && !e.disabled")
    page.keyboard.press("Space")
    assert radio.is_checked(), f"Space did not select option {k} of {qid}"


def _type(page, qid, text):
    field = page.locator(f"#{qid}-input")
    field.focus()
    field.fill("")
    page.keyboard.type(text)


def _wrong_number(question, value):
    if question.get("mistakes"):
        return question["mistakes"][0]["value"], question["mistakes"][0]["explanation"]
    tol = question.get("tolerance", 0)
    return value + max(10 * tol, abs(value) * 0.5, 1.0), question["hint"]


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else repr(float(number))


def _answer_all(page, doc, slug):
    checked = 0
    for question in doc["questions"]:
        qid = f"q-{slug}-{question['id']}"
        assert page.locator(f"#{qid}").count() == 1, f"question {qid} is not on the page"
        if question["kind"] == "choice":
            right = next(k for k, o in enumerate(question["options"]) if o.get("correct"))
            wrong = next(k for k, o in enumerate(question["options"]) if not o.get("correct"))
            _pick(page, qid, wrong)
            _press_check(page, qid)
            got = page.evaluate(_FEEDBACK, qid)
            assert got["state"] == "wrong" and got["verdict"].startswith("Not quite"), got
            assert len(got["shown"]) == 1 and got["visible"], got
            for word in _words(question["options"][wrong]["explanation"]):
                assert word in got["shown"][0], (qid, word, got["shown"][0])
            _pick(page, qid, right)
            _press_check(page, qid)
            got = page.evaluate(_FEEDBACK, qid)
            assert got["state"] == "right" and got["verdict"] == "Correct.", got
            for word in _words(question["options"][right]["explanation"]):
                assert word in got["shown"][0], (qid, word, got["shown"][0])
        else:
            text, value = answer_of(question, doc)
            if value is None:
                wrong, wrong_why = text + "Error", question["hint"]
                right = text
            else:
                wrong_value, wrong_why = _wrong_number(question, value)
                wrong = _fmt(wrong_value)
                # Inside the tolerance but not the printed value, when there is a tolerance.
                tol = question.get("tolerance", 0)
                right = _fmt(value + tol / 2) if tol else text
            _type(page, qid, wrong)
            page.keyboard.press("Enter")  # Enter in the field checks too
            got = page.evaluate(_FEEDBACK, qid)
            assert got["state"] == "wrong" and got["verdict"].startswith("Not quite"), (qid, got)
            assert len(got["shown"]) == 1 and got["visible"], got
            for word in _words(wrong_why):
                assert word in got["shown"][0], (qid, word, got["shown"][0])
            _type(page, qid, right)
            _press_check(page, qid)
            got = page.evaluate(_FEEDBACK, qid)
            assert got["state"] == "right" and got["verdict"].startswith("Correct"), (qid, got)
            assert text in got["verdict"], (qid, text, got["verdict"])
            for word in _words(question["explanation"]):
                assert word in got["shown"][0], (qid, word, got["shown"][0])
            # Something that is not a number gets a request for one, not a verdict.
            if value is not None:
                _type(page, qid, "abc")
                page.keyboard.press("Enter")
                got = page.evaluate(_FEEDBACK, qid)
                assert got["state"] == "empty" and "number" in got["verdict"], got
                _type(page, qid, right)
                page.keyboard.press("Enter")
        assert got["live"] == "status"
        checked += 1
    return checked


_AXE_QUESTIONS = """async () => {
  const result = await axe.run({include: [".attnbook-questions"]}, {resultTypes: ["violations"]});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map(n => n.target.join(" ") + " " + (n.failureSummary || "").slice(0, 200))}));
}"""


@pytest.mark.browser
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_questions_answer_in_browser(path, server, browser):
    doc = load_questions(path)
    page_path = doc["page"].removesuffix(".md")
    slug = path.stem.split("_")[0]
    host = urlsplit(server).netloc
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  service_workers="block")
    page = context.new_page()
    blocked, errors = [], []

    def route(r):
        url = r.request.url
        if urlsplit(url).scheme in ("http", "https") and urlsplit(url).netloc != host:
            blocked.append(url)
            r.abort()
        else:
            r.continue_()

    context.route("**/*", route)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{server}/{page_path}.html", wait_until="load", timeout=60_000)
        page.wait_for_function("() => !window.MathJax || !MathJax.startup || "
                               "MathJax.startup.promise", timeout=30_000)
        page.evaluate("async () => { if (window.MathJax && MathJax.startup) "
                      "await MathJax.startup.promise; }")
        section = page.locator(".attnbook-questions")
        assert section.count() == 1, "the page shows no questions section"
        n = page.locator("form.attnbook-q").count()
        assert n == len(doc["questions"]), (
            f"{n} questions on the page, {len(doc['questions'])} in {path.name}")
        # Math in the questions is typeset like the rest of the page.
        untypeset = page.evaluate("() => [...document.querySelectorAll('.attnbook-questions "
                                  ".math')].filter(e => !e.querySelector('mjx-container')).length")
        assert untypeset == 0, f"{untypeset} formulas in the questions not typeset"
        checked = _answer_all(page, doc, slug)
        assert checked == len(doc["questions"])
        if not AXE.exists():
            pytest.fail(f"{AXE} is missing: run `make assets`")
        page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
        light = page.evaluate(_AXE_QUESTIONS)
        page.evaluate("() => { document.documentElement.dataset.theme = 'dark'; "
                      "document.documentElement.dataset.mode = 'dark'; }")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => "
                      "requestAnimationFrame(r)))")
        dark = page.evaluate(_AXE_QUESTIONS)
        SHOTS.mkdir(parents=True, exist_ok=True)
        section.screenshot(path=str(SHOTS / f"questions_{path.stem}_dark.png"))
        page.evaluate("() => { document.documentElement.dataset.theme = 'light'; "
                      "document.documentElement.dataset.mode = 'light'; }")
        section.screenshot(path=str(SHOTS / f"questions_{path.stem}_light.png"))
    finally:
        context.close()
    assert not blocked, f"requests to other hosts: {blocked}"
    assert not errors, f"uncaught errors in the page: {errors}"
    assert not light, f"axe-core (light mode) on the questions: {light}"
    assert not dark, f"axe-core (dark mode) on the questions: {dark}"
