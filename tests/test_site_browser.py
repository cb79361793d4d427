"""The built site in a real browser: every page in the toc loads from its own host and renders.

Serves _build/html on 127.0.0.1 and opens each toc page in Chromium (Playwright, Debian's
/usr/bin/chromium, never a downloaded browser). For every page: each request answers 200, no
request leaves for another host (they are blocked and recorded), no uncaught page error, MathJax
typeset every formula (and none failed), every image loaded, every widget shows its controls and
figure, and each lab links to itself in Colab. Widgets made by attnbook.lab.static_widgets move
without a kernel: each of their controls is changed, and the view shown must change and be the
stored view for the new values; every control is moved from the keyboard alone (Tab-reachable,
arrows or Space). Every image, widget figures included, must have alternative text. Every page
is also audited for accessibility with axe-core (vendored
from npm by scripts/vendor_assets.py, injected from disk, so nothing is fetched): no critical or
serious violation may remain unless :data:`AXE_ALLOWED` lists it with the reason it cannot be
fixed. Screenshots go to _build/screenshots/, with a summary.json of what was checked and an
axe.json of every violation per page. `make test` builds the site first, then runs this file.

Set ATTNBOOK_SITE_DIR to check a build elsewhere (e.g. one made with --path-output).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import toc_pages  # noqa: E402

SITE = Path(os.environ.get("ATTNBOOK_SITE_DIR", ROOT / "_build" / "html"))
SHOTS = SITE.parent / "screenshots"
CHROMIUM = os.environ.get("ATTNBOOK_CHROMIUM", "/usr/bin/chromium")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
AXE = Path(os.environ.get("ATTNBOOK_AXE",
                          ROOT / "_assets" / "third_party" / "axe-core" / "axe.min.js"))
# Impacts that fail the audit (WCAG 2.1 AA is the bar for course material).
AXE_FAILING = ("critical", "serious")
# Violations that stay, each with why it cannot be fixed here: rule id, a regular expression
# matched against the CSS selector of the offending element, and the reason. An entry that no
# page needs any more fails test_axe_allowances_are_all_needed, so the list cannot go stale.
AXE_ALLOWED: list[dict] = []


def source_of(page: str) -> Path:
    for suffix in (".md", ".ipynb"):
        if (ROOT / (page + suffix)).exists():
            return ROOT / (page + suffix)
    raise FileNotFoundError(page)


def _prose(path: Path) -> str:
    """The text of a page's source that is prose (math lives there), without code."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    # Drop fenced code (but keep {math} fences) and inline code.
    text = re.sub(r"(`{3,}|~{3,})(?!\{math\})[^\n]*\n.*?\n\1", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def source_has_math(path: Path) -> bool:
    text = _prose(path)
    return bool(re.search(r"\{math\}|\$\$|\$[^$\n]+\$|\\begin\{(equation|align|gather)", text))


def colab_url_for(page: str) -> str:
    """The Colab link the site must show for a lab, from the repository block of _config.yml."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]
    owner_repo = repo["url"].split("github.com/", 1)[1].strip("/")
    prefix = (repo.get("path_to_book") or "").strip("/")
    path = "/".join(p for p in (prefix, page + ".ipynb") if p)
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    return f"{colab}/github/{owner_repo}/blob/{repo['branch']}/{path}"


_CONTAINERS = re.compile(r"^(Box|VBox|HBox|GridBox|Accordion|Tab|Stack|Output)Model$")
_CONTROLS = re.compile(
    r"Slider|Dropdown|Checkbox|ToggleButton|RadioButtons|Select|Text|Button|Combobox|Picker|Play")


def widget_expectations(html: str) -> list[dict]:
    """For each widget view on a page, from its saved state: how many leaf widgets it draws
    (controls, labels, progress bars), whether any is a control, and whether it holds a figure."""
    state_match = re.search(
        rf'<script type="{re.escape(WIDGET_STATE)}">(.*?)</script>', html, re.S)
    state = json.loads(state_match.group(1))["state"] if state_match else {}

    def subtree(model_id, seen):
        if model_id in seen or model_id not in state:
            return
        seen.add(model_id)
        for ref in re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state[model_id]["state"])):
            subtree(ref, seen)

    views = re.findall(rf'<script type="{re.escape(WIDGET_VIEW)}">(.*?)</script>', html, re.S)
    out = []
    for view in views:
        model_id = json.loads(view)["model_id"]
        models = set()
        subtree(model_id, models)
        names = [state[m]["model_name"] for m in models]
        leaves = [n for n in names
                  if not re.search(r"Style|Layout", n) and not _CONTAINERS.match(n)]
        image = any(mime in out_.get("data", {}) for m in models
                    for out_ in state[m]["state"].get("outputs", [])
                    for mime in ("image/png", "image/svg+xml"))
        out.append({"model_id": model_id, "in_state": model_id in state, "leaves": len(leaves),
                    "controls": any(_CONTROLS.search(n) for n in leaves), "image": image})
    return out


STATIC_CLASS = "attnbook-static-interact"


def _saved_state(html: str) -> dict:
    match = re.search(rf'<script type="{re.escape(WIDGET_STATE)}">(.*?)</script>', html, re.S)
    return json.loads(match.group(1))["state"] if match else {}


def _view_signature(state: dict, model_id: str) -> list[str]:
    """What an Output view shows: its images (base64) and texts, in order."""
    shown = []
    for out in state[model_id]["state"].get("outputs", []):
        data = out.get("data", {})
        if "image/png" in data:
            shown.append("png:" + re.sub(r"\s", "", "".join(data["image/png"])))
        elif "text" in out:
            shown.append("text:" + "".join(out["text"]).strip())
    return shown


def static_widgets(html: str) -> list[dict]:
    """Each static_interact widget on a page, from its saved state: its controls (kind, number
    of values, initial index) and the stored view for every combination of indices."""
    state = _saved_state(html)
    found = []
    for model_id, model in state.items():
        if STATIC_CLASS not in model["state"].get("_dom_classes", []):
            continue
        children = [c.removeprefix("IPY_MODEL_") for c in model["state"]["children"]]
        controls = [{"id": c, "kind": state[c]["model_name"].removesuffix("Model"),
                     "n": len(state[c]["state"]["_options_labels"]),
                     "index": state[c]["state"]["index"]} for c in children[:-1]]
        views = {}

        def walk(stack_id, chosen, views=views):
            kids = [c.removeprefix("IPY_MODEL_") for c in state[stack_id]["state"]["children"]]
            for i, kid in enumerate(kids):
                if state[kid]["model_name"] == "StackModel":
                    walk(kid, (*chosen, i), views)
                else:
                    views[(*chosen, i)] = _view_signature(state, kid)

        walk(children[-1], ())
        links = [m["state"] for m in state.values() if m["model_name"] == "LinkModel"]
        found.append({"model_id": model_id, "controls": controls, "views": views,
                      "links": links})
    return found


PAGES = toc_pages()
SUMMARY: dict = {"pages": 0, "requests": 0, "resources": 0, "blocked": [], "page_errors": 0,
                 "bad_responses": 0, "math_pages": 0, "formulas": 0, "images": 0, "widgets": 0,
                 "colab_links": 0, "per_page": {}}
AXE_RESULTS: dict = {}  # page -> violations (written to axe.json)
AXE_VERSION: list[str] = []
AXE_ALLOWED_USED: set[int] = set()
# Under pytest-xdist (`make browser` spreads the pages over two workers, --dist load) each worker
# records what it checked in a part of its own; test_axe_allowances_are_all_needed, run after
# them (the Makefile's second step), merges the parts of the latest run into summary.json and
# axe.json and checks the allowances against every page.
PARTS = SHOTS / "parts"


def write_reports(summary: dict, axe_results: dict, axe_version: str | None) -> None:
    """summary.json and (if any page was audited) axe.json in _build/screenshots."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if axe_results:
        counts = {page: axe_counts(found) for page, found in axe_results.items()}
        (SHOTS / "axe.json").write_text(json.dumps(
            {"axe_version": axe_version, "counts": counts, "violations": axe_results},
            indent=2) + "\n")


def merged_parts() -> dict | None:
    """The workers' parts of the latest xdist run, merged; None if there are none."""
    parts = [json.loads(f.read_text(encoding="utf-8")) for f in PARTS.glob("*.json")]
    if not parts:
        return None
    latest = max(parts, key=lambda part: part["written"])["run"]
    parts = [part for part in parts if part["run"] == latest]
    summary: dict = {}
    for part in parts:
        for key, value in part["summary"].items():
            if isinstance(value, dict):
                summary.setdefault(key, {}).update(value)
            elif isinstance(value, list):
                summary[key] = summary.get(key, []) + value
            else:
                summary[key] = summary.get(key, 0) + value
    return {"summary": summary,
            "axe": {page: v for part in parts for page, v in part["axe"].items()},
            "axe_version": next((p["axe_version"] for p in parts if p["axe_version"]), None),
            "allowed_used": {k for part in parts for k in part["allowed_used"]},
            "workers": len(parts)}


def axe_counts(violations: list[dict]) -> dict:
    """Violated rules and offending elements per impact, as the closing notes quote them."""
    out = {"rules": len(violations), "nodes": sum(len(v["nodes"]) for v in violations)}
    for impact in ("critical", "serious", "moderate", "minor"):
        out[impact] = sum(len(v["nodes"]) for v in violations if v["impact"] == impact)
    return out


def axe_failures(violations: list[dict], page: str) -> list[str]:
    """The critical and serious violations that AXE_ALLOWED does not excuse, one line each."""
    failures = []
    for v in violations:
        if v["impact"] not in AXE_FAILING:
            continue
        for node in v["nodes"]:
            target = " ".join(node["target"])
            excused = [k for k, a in enumerate(AXE_ALLOWED)
                       if a["rule"] == v["id"] and re.search(a["target"], target)]
            if excused:
                AXE_ALLOWED_USED.update(excused)
                continue
            failures.append(f"{v['impact']} {v['id']} ({v['help']}) at {target}: "
                            f"{node['html'][:160]} -- {node['summary'][:200]}")
    return failures


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output readable
        pass


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}: run `make book` (make test builds it first)")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(server):
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):  # pages no longer in the toc (not the questions' shots)
        if old.stem.startswith("questions_"):
            continue
        if old.stem.replace("__", "/") not in PAGES:
            old.unlink()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-quic"])
        yield browser
        browser.close()
    version = AXE_VERSION[0] if AXE_VERSION else None
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        write_reports(SUMMARY, AXE_RESULTS, version)
        return
    PARTS.mkdir(parents=True, exist_ok=True)  # the module's last teardown in a worker wins
    (PARTS / f"{worker}.json").write_text(json.dumps(
        {"run": os.environ.get("PYTEST_XDIST_TESTRUNUID", ""), "written": time.time(),
         "summary": SUMMARY, "axe": AXE_RESULTS, "axe_version": version,
         "allowed_used": sorted(AXE_ALLOWED_USED)}) + "\n")


# Fast checks of the configuration (the unit step runs these; no browser needed).


def _sphinx_config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["sphinx"]["config"]


def test_site_assets_are_served_locally():
    config = _sphinx_config()
    local = [config["mathjax_path"], *config["nb_ipywidgets_js"]]
    assert all("://" not in path and not path.startswith("//") for path in local), local
    # A root _static/ folder makes Jupyter Book inject every .js in it into every page.
    assert "_static" not in config.get("html_static_path", [])
    assert not (ROOT / "_static").exists()
    for path in [*local, *config.get("html_css_files", [])]:
        generated = path.startswith("third_party/")
        if not generated or (ROOT / "_assets" / "third_party").exists():
            assert (ROOT / "_assets" / path).exists(), f"_assets/{path} is missing"
    order = list(config["nb_ipywidgets_js"])
    assert order.index("attnbook-widgets.js") == 1, "the shim runs after require.js, before embed"


def test_thebe_is_off():
    assert "sphinx_thebe" not in _sphinx_config()["extensions"]


def test_npm_packages_are_pinned():
    package = json.loads((ROOT / "package.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())
    for name, version in package["dependencies"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} is not pinned: {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


def test_book_figures_have_alt_text():
    """Every figure a book page shows says what it shows (the browser check sees only the
    attribute; this one sees that the text is a description, not a stub)."""
    missing = []
    for path in sorted((ROOT / "book").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^(`{3,}|:{3,})\{(figure|image)\}\s*(\S+)\n(.*?)^\1",
                                 text, re.S | re.M):
            alt = re.search(r"^:alt:\s*(.*)$", match.group(4), re.M)
            if not alt or len(alt.group(1).split()) < 6:
                missing.append(f"{path.name}: {match.group(3)}")
    assert not missing, f"figures without a descriptive :alt: (six words or more): {missing}"


def test_theme_markup_is_repaired():
    """_ext/attnbook_a11y.py names the theme's unnamed controls, idempotently."""
    import sys
    sys.path.insert(0, str(ROOT / "_ext"))
    from attnbook_a11y import fix_html

    page = ('<li class="toctree-l1 has-children"><a class="reference internal" href="a.html">'
            'Scores &amp; masks</a><details><summary><span class="toctree-toggle" '
            'role="presentation"></span></summary>'
            '<a class="current reference internal" href="#">Lab 2</a><details open="open">'
            '<summary><span class="toctree-toggle" role="presentation"></span></summary>'
            '<button class="btn search-button-field search-button__button pst-js-only" '
            'title="Search" aria-label="Search" data-x="1">'
            '<summary aria-label="Toggle hidden content"><p>Show code cell source</p>'
            '<div class="citation" id="id3" role="doc-biblioentry">'
            '<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar">')
    fixed = fix_html(page)
    assert '<summary aria-label="Sections of Scores &amp; masks">' in fixed
    assert '<details open="open"><summary aria-label="Sections of Lab 2">' in fixed
    assert 'aria-label="Search"' not in fixed and 'title="Search"' in fixed
    assert "Toggle hidden content" not in fixed
    assert 'role="listitem"' in fixed and "doc-biblioentry" not in fixed
    assert 'bd-sidebar" role="navigation" aria-label="Book">' in fixed
    assert fix_html(fixed) == fixed
    # An Output's tooltip (which the HTML manager cannot draw) becomes its figure's alt text.
    state = {"state": {"m1": {"model_name": "OutputModel", "state": {
        "tooltip": "Weights </b>", "outputs": [{"data": {"image/png": "AA=="}, "metadata": {}}]}}}}
    page = ('<script type="application/vnd.jupyter.widget-state+json">'
            + json.dumps(state).replace("</", "<\\/") + "</script>")
    fixed = fix_html(page)
    body = re.search(r"json\">(.*)</script>", fixed).group(1)
    model = json.loads(body)["state"]["m1"]["state"]
    assert model["tooltip"] is None and "</b" not in body
    assert model["outputs"][0]["metadata"]["image/png"]["alt"] == "Weights </b>"
    assert fix_html(fixed) == fixed


@pytest.mark.browser
def test_toc_pages_are_built():
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}")
    missing = [p for p in PAGES if not (SITE / (p + ".html")).exists()]
    assert not missing, f"toc pages missing from the build: {missing}"


@pytest.mark.browser
def test_labs_carry_their_own_number():
    """A lab reads "Lab 3 — ..." in its heading, its <title> and the sidebar, not "3.1. Lab 3"."""
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}")
    labs = [p for p in PAGES if p.startswith("notebooks/")]
    assert labs
    for page in labs:
        html = (SITE / (page + ".html")).read_text(encoding="utf-8")
        title = re.search(r"<title>(.*?)</title>", html, re.S).group(1)
        h1 = re.search(r"<h1[^>]*>(.*?)</h1>", html, re.S).group(1)
        assert re.match(r"Lab \d+ — ", title), (page, title)
        assert "section-number" not in h1 and re.match(r"Lab \d+ — ", h1), (page, h1)
        name = page.split("/")[-1]
        for link in re.findall(rf'href="{re.escape(name)}\.html">([^<]*)<', html):
            assert link.startswith("Lab "), (page, link)


@pytest.mark.browser
def test_chapter_zero_is_numbered_zero():
    """Chapter 0 sits in an unnumbered part, yet reads as chapter 0 (_ext/attnbook_labs.py): its
    title, sections, figures and references to them are 0, 0.1, ... and no later chapter moves."""
    if not (SITE / "index.html").exists():
        pytest.skip(f"no built site at {SITE}")
    zero = (SITE / "book" / "00_at_a_glance.html").read_text(encoding="utf-8")
    assert re.search(r'<h1><span class="section-number">0\. </span>', zero)  # the page's heading
    assert re.search(r'section-number">0\.1\. ', zero)
    assert set(re.findall(r"Fig\. [\d.]+", zero)) == {"Fig. 0.1"}
    assert re.search(r"<title>0\. ", zero)
    four = (SITE / "book" / "04_causal_mask.html").read_text(encoding="utf-8")
    assert "Fig. 0.1" in four and "Fig. 4.1" in four  # its reference to chapter 0, its own
    one = (SITE / "book" / "01_projections.html").read_text(encoding="utf-8")
    assert re.search(r"<title>1\. ", one)
    # The introduction keeps its own count, no longer shared with chapter 0.
    intro = (SITE / "book" / "intro.html").read_text(encoding="utf-8")
    assert set(re.findall(r"Fig\. [\d.]+", intro)) == {"Fig. 1"}


# JavaScript run in the page once it has loaded.
_SETTLE = """async () => {
  // Images: load lazy ones too, then wait for every image to finish.
  for (const img of document.images) img.loading = "eager";
  await Promise.all([...document.images].map(img => img.complete ? null :
      new Promise(r => { img.addEventListener("load", r); img.addEventListener("error", r); })));
  // MathJax: wait for start-up and the first typeset.
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
    if (MathJax.typesetPromise) await MathJax.typesetPromise();
  }
}"""

_INSPECT = r"""() => {
  const prose = document.querySelector("main") || document.body;
  const clone = prose.cloneNode(true);
  clone.querySelectorAll("pre, code, script, style, mjx-container, .highlight")
       .forEach(e => e.remove());
  const maths = [...document.querySelectorAll(".math")];
  return {
    text: clone.innerText,
    math: maths.length,
    mathTypeset: maths.filter(e => e.querySelector("mjx-container")).length,
    mjx: document.querySelectorAll("mjx-container").length,
    mjxErrors: [...document.querySelectorAll("mjx-merror")]
        .map(e => e.getAttribute("data-mjx-error") || e.textContent),
    // MathJax's noundefined package draws an unknown macro (a typo) as red text.
    undefinedMacros: [...document.querySelectorAll('mjx-assistive-mml mtext[mathcolor="red"]')]
        .map(e => e.textContent).filter(t => t.startsWith("\\")),
    mathjaxLoaded: !!(window.MathJax && window.MathJax.version),
    images: [...document.images].map(img => ({src: img.currentSrc || img.src,
                                              ok: img.complete && img.naturalWidth > 0,
                                              alt: img.getAttribute("alt")})),
    colab: [...document.querySelectorAll('a[href^="https://colab.research.google.com/"]')]
        .map(a => a.href),
  };
}"""

_WIDGET = """(modelId) => {
  const views = document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]');
  const script = [...views].find(s => JSON.parse(s.textContent).model_id === modelId);
  if (!script) return null;
  const output = script.closest(".cell_output") || script.parentElement;
  const view = output.querySelector(".jupyter-widgets");
  // Leaf widget views (controls, labels, progress bars): drawn, not containers, with a size.
  // (Some views, the SelectionSlider's, lack the jupyter-widgets class: look for widget-*.)
  const leaves = [...output.querySelectorAll(".lm-Widget")].filter(e => {
    const cls = [...e.classList];
    return cls.some(c => c.startsWith("widget-")) && !cls.includes("widget-box")
        && !cls.includes("widget-output") && !cls.includes("widget-container")
        && e.getBoundingClientRect().width > 0;
  });
  const imgs = [...output.querySelectorAll("img")];
  const note = output.nextElementSibling;
  return {
    rendered: !!view,
    errorView: !!output.querySelector(".jupyter-widgets-error-widget, .widget-error"),
    leaves: leaves.length,
    images: imgs.length,
    imagesLoaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    note: note && note.classList.contains("attnbook-widget-note") ? note.innerText : null,
    noteLink: note && note.querySelector("a") ? note.querySelector("a").href : null,
  };
}"""


# A static widget's root element (the VBox has the class), its controls and its shown view.
_STATIC_ROOT = """(modelId) => {
  const views = document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]');
  const script = [...views].find(s => JSON.parse(s.textContent).model_id === modelId);
  const output = script ? (script.closest(".cell_output") || script.parentElement) : null;
  return !!(output && output.querySelector(".attnbook-static-interact"));
}"""

_STATIC_SHOWN = r"""(args) => {
  const [modelId] = args;
  const views = document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]');
  const script = [...views].find(s => JSON.parse(s.textContent).model_id === modelId);
  const output = script.closest(".cell_output") || script.parentElement;
  const box = output.querySelector(".attnbook-static-interact");
  const stack = box.lastElementChild;
  const shown = [];
  for (const el of stack.querySelectorAll("img, .jp-OutputArea-output pre")) {
    if (el.getBoundingClientRect().width === 0) continue;
    if (el.tagName === "IMG") {
      shown.push("png:" + el.getAttribute("src").replace(/^data:image\/png;base64,/, ""));
    } else {
      shown.push("text:" + el.textContent.trim());
    }
  }
  return shown;
}"""

# Marks the element of control k that the keyboard will operate (data-attnbook-key): the
# <select> of a drop-down, the button to press of toggle buttons, the handle of a slider. Every
# control must be reachable with Tab (a tabIndex of 0 or more).
_STATIC_SET = """(args) => {
  const [modelId, k, index] = args;
  const views = document.querySelectorAll(
      'script[type="application/vnd.jupyter.widget-view+json"]');
  const script = [...views].find(s => JSON.parse(s.textContent).model_id === modelId);
  const output = script.closest(".cell_output") || script.parentElement;
  const box = output.querySelector(".attnbook-static-interact");
  const control = box.children[k];
  document.querySelectorAll("[data-attnbook-key]").forEach(
      e => e.removeAttribute("data-attnbook-key"));
  const mark = (el, how) => {
    if (el.tabIndex < 0 || el.disabled) return "unreachable: " + how;
    el.setAttribute("data-attnbook-key", "1");
    return how;
  };
  const select = control.querySelector("select");
  if (select) return mark(select, "select");
  const buttons = control.querySelectorAll("button");
  if (buttons.length) return mark(buttons[index], "buttons");
  const handle = control.querySelector(".noUi-handle");
  if (!handle) return "unknown: " + control.className;
  return mark(handle, "slider");
}"""


# axe-core on the whole page as it is drawn (widgets rendered, math typeset), all its rules
# except the experimental ones; only what the report needs comes back.
_AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return {
    version: axe.version,
    violations: result.violations.map(v => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map(n => ({
        target: n.target.map(t => Array.isArray(t) ? t.join(" >> ") : String(t)),
        html: n.html, summary: n.failureSummary || "",
      })),
    })),
  };
}"""


def run_axe(page) -> list[dict]:
    """axe-core's violations on the page, injected from the vendored copy (no request)."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `make assets` (npm ci + scripts/vendor_assets.py)")
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    result = page.evaluate(_AXE_RUN)
    if not AXE_VERSION:
        AXE_VERSION.append(result["version"])
    return result["violations"]


def _move_static_widgets(page, widgets: list[dict]) -> list[dict]:
    """Change each control of each static widget; return what was seen after each change."""
    moves = []
    for widget in widgets:
        current = tuple(c["index"] for c in widget["controls"])
        shown = page.evaluate(_STATIC_SHOWN, [widget["model_id"]])
        moves.append({"control": None, "want": widget["views"][current], "got": shown})
        for k, control in enumerate(widget["controls"]):
            # The farthest value whose stored view differs from the one shown now.
            targets = [i for i in sorted(range(control["n"]), key=lambda i: -abs(i - current[k]))
                       if widget["views"][(*current[:k], i, *current[k + 1:])]
                       != widget["views"][current]]
            if not targets:
                moves.append({"control": k, "want": None, "got": None, "kind": control["kind"]})
                continue
            index = targets[0]
            how = page.evaluate(_STATIC_SET, [widget["model_id"], k, index])
            assert how in ("select", "buttons", "slider"), f"cannot move control {k}: {how}"
            # From the keyboard only: arrows on a slider's handle or a drop-down, Space on a
            # toggle button.
            element = page.locator("[data-attnbook-key]")
            element.focus()
            if how == "buttons":
                element.press("Space")
            else:
                forward = "ArrowRight" if how == "slider" else "ArrowDown"
                backward = "ArrowLeft" if how == "slider" else "ArrowUp"
                for _ in range(abs(index - current[k])):
                    element.press(forward if index > current[k] else backward)
            current = (*current[:k], index, *current[k + 1:])
            want = widget["views"][current]
            # Compared element by element in the page: a JSON string built here would differ
            # from JSON.stringify's (", " separators, \u escapes) for any view of more than
            # one output, and the wait would run out its 10 s before the assertion passed.
            try:
                page.wait_for_function(
                    f"([id, want]) => {{ const shown = ({_STATIC_SHOWN})([id]); "
                    "return shown.length === want.length && "
                    "shown.every((s, i) => s === want[i]); }",
                    arg=[widget["model_id"], list(want)], timeout=10_000)
            except Exception:  # the assertion below reports what was shown instead
                pass
            moves.append({"control": k, "kind": control["kind"], "index": index, "want": want,
                          "got": page.evaluate(_STATIC_SHOWN, [widget["model_id"]])})
    return moves


def _full_page_png(context, page, path: Path) -> None:
    """What ``page.screenshot(path=path, full_page=True)`` saves, encoded faster.

    The same call Playwright makes (Chromium's Page.captureScreenshot of the whole content,
    beyond the viewport) with ``optimizeForSpeed``: pixel for pixel the same image (checked on
    ch. 20's 22,533 px page), a larger file, 2.0-2.5 s instead of 3.1-3.5 s under load. PNG, not
    JPEG: the file viewer we check pages with opens PNG only.
    """
    import base64
    cdp = context.new_cdp_session(page)
    try:
        size = cdp.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = cdp.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True, "optimizeForSpeed": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                     "scale": 1}})
    finally:
        cdp.detach()
    path.write_bytes(base64.b64decode(shot["data"]))


@pytest.mark.browser
@pytest.mark.parametrize("page_path", PAGES)
def test_page_in_browser(page_path, server, browser):
    from playwright import sync_api
    host = urlsplit(server).netloc
    source = source_of(page_path)
    html = (SITE / (page_path + ".html")).read_text(encoding="utf-8")

    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  service_workers="block")
    page = context.new_page()
    requests, blocked, bad, errors, failed = [], [], [], [], []

    def route(r):
        url = r.request.url
        if urlsplit(url).scheme in ("http", "https") and urlsplit(url).netloc != host:
            blocked.append(url)
            r.abort()
        else:
            r.continue_()

    context.route("**/*", route)
    page.on("request", lambda req: requests.append(req.url))
    page.on("response", lambda res: res.status != 200 and bad.append(f"{res.status} {res.url}"))
    page.on("requestfailed", lambda req: urlsplit(req.url).netloc == host
            and failed.append(f"{req.failure} {req.url}"))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{server}/{page_path}.html", wait_until="load", timeout=60_000)
        page.evaluate(_SETTLE)
        widgets = widget_expectations(html)
        if widgets:  # the manager renders on "load"; give it time to draw every view
            try:
                page.wait_for_function(
                    f"document.querySelectorAll('.cell_output .jupyter-widgets').length >= "
                    f"{len(widgets)}", timeout=30_000)
            except sync_api.TimeoutError:
                pass  # the widget checks below say which view is missing
        page.wait_for_load_state("networkidle", timeout=30_000)
        page.evaluate(_SETTLE)
        info = page.evaluate(_INSPECT)
        widget_info = [(w, page.evaluate(_WIDGET, w["model_id"])) for w in widgets]
        # Two frames: the site's accessibility script names what the widgets drew.
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => "
                      "requestAnimationFrame(r)))")
        info = page.evaluate(_INSPECT)
        violations = run_axe(page)
        statics = static_widgets(html)
        moves = _move_static_widgets(page, statics)
        # Views drawn by the moves are named too.
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => "
                      "requestAnimationFrame(r)))")
        unnamed_after_moves = page.evaluate(
            "() => [...document.images].filter(i => !(i.getAttribute('alt') || '').trim())"
            ".map(i => (i.currentSrc || i.src).slice(0, 60))")
        shot = SHOTS / (page_path.replace("/", "__") + ".png")
        _full_page_png(context, page, shot)
    finally:
        context.close()

    local = [u for u in requests if urlsplit(u).netloc == host]
    SUMMARY["pages"] += 1
    SUMMARY["requests"] += len(requests)
    SUMMARY["resources"] += len(set(local))
    SUMMARY["blocked"] += blocked
    SUMMARY["page_errors"] += len(errors)
    SUMMARY["bad_responses"] += len(bad) + len(failed)
    SUMMARY["math_pages"] += bool(info["math"])
    SUMMARY["formulas"] += info["math"]
    SUMMARY["images"] += len(info["images"])
    SUMMARY["widgets"] += len(widgets)
    SUMMARY["per_page"][page_path] = {
        "requests": len(requests), "blocked": len(blocked), "errors": len(errors),
        "formulas": info["math"], "images": len(info["images"]), "widgets": len(widgets),
        "axe": axe_counts(violations)}
    AXE_RESULTS[page_path] = violations

    assert not blocked, f"requests to other hosts: {blocked}"
    assert not bad and not failed, f"resources that did not answer 200: {bad + failed}"
    assert not errors, f"uncaught errors in the page: {errors}"

    # Math: where the source has math, MathJax typeset all of it, with no error and no raw TeX.
    if source_has_math(source):
        assert info["math"], "the source has math but the page has no math element"
    if info["math"]:
        assert info["mathjaxLoaded"], "the page has math but MathJax did not load"
        assert info["mathTypeset"] == info["math"], (
            f"{info['math'] - info['mathTypeset']} of {info['math']} formulas not typeset")
        assert not info["mjxErrors"], f"MathJax errors: {info['mjxErrors']}"
        assert not info["undefinedMacros"], f"undefined TeX macros: {info['undefinedMacros']}"
        for raw in ("\\(", "\\)", "\\[", "\\]", "$$"):
            assert raw not in info["text"], f"raw TeX {raw!r} left in the page text"

    broken = [i["src"] for i in info["images"] if not i["ok"]]
    assert not broken, f"images that did not load: {broken}"
    # Alternative text that says something: not missing, not empty, not a file name.
    unnamed = [(i["src"][:60], i["alt"]) for i in info["images"]
               if not (i["alt"] or "").strip()
               or re.search(r"(\.(png|svg|jpe?g|gif)|_images/\S*)$", i["alt"].strip())]
    assert not unnamed, f"images without alternative text: {unnamed}"
    assert not unnamed_after_moves, (
        f"widget views drawn by moving a control lack alternative text: {unnamed_after_moves}")

    for expected, got in widget_info:
        assert expected["in_state"], f"widget {expected['model_id']} has no saved state"
        assert got and got["rendered"] and not got["errorView"], f"widget not rendered: {got}"
        assert got["leaves"] >= max(1, expected["leaves"]), (
            f"a widget shows {got['leaves']} of its {expected['leaves']} controls")
        if expected["image"]:
            assert got["imagesLoaded"] >= 1, f"a widget's saved figure is not shown: {got}"
        static = any(s["model_id"] == expected["model_id"] for s in statics)
        if expected["controls"] and not static:
            assert got["note"] and "live" in got["note"], "no static-site note under the widget"
            assert got["noteLink"] == colab_url_for(page_path), got["noteLink"]
        if static:
            assert not got["note"], "a static widget needs no live-kernel note"

    # Static widgets: every control switches to the stored view of its new value.
    for move in moves:
        if move["control"] is None:
            assert move["got"] == move["want"], "the first view shown is not the stored one"
            continue
        assert move["want"] is not None, (
            f"control {move['control']} ({move['kind']}) never changes the view")
        assert move["got"] == move["want"], (
            f"after moving control {move['control']} ({move['kind']}) to {move['index']}, "
            f"the page shows {[g[:40] for g in move['got']]}, not the stored view "
            f"{[w[:40] for w in move['want']]}")
    SUMMARY.setdefault("static_widgets", 0)
    SUMMARY.setdefault("static_moves", 0)
    SUMMARY["static_widgets"] += len(statics)
    SUMMARY["static_moves"] += sum(m["control"] is not None for m in moves)

    if source.suffix == ".ipynb":
        want = colab_url_for(page_path)
        assert want in info["colab"], f"no Colab link to {want}; found {info['colab']}"
        SUMMARY["colab_links"] += 1

    # Accessibility: no critical or serious axe-core violation that AXE_ALLOWED does not excuse.
    failures = axe_failures(violations, page_path)
    assert not failures, (f"{len(failures)} critical/serious accessibility violations "
                          "(axe-core; details in _build/screenshots/axe.json):\n"
                          + "\n".join(failures[:20]))


@pytest.mark.browser
def test_axe_allowances_are_all_needed():
    """Runs after every page: each excused violation still occurs somewhere (or is removed)."""
    results, used = AXE_RESULTS, AXE_ALLOWED_USED
    merged = None
    if len(results) < len(PAGES) and "PYTEST_XDIST_WORKER" not in os.environ:
        merged = merged_parts()  # the workers' run just before this one (make browser)
    if merged is not None:
        results, used = merged["axe"], merged["allowed_used"]
        write_reports(merged["summary"], results, merged["axe_version"])
    missing = sorted(set(PAGES) - set(results))
    if missing and merged is not None:
        pytest.fail(f"the workers' parts in {PARTS} audited {len(results)} of {len(PAGES)} "
                    f"pages; missing: {missing[:5]} (did their tests fail?)")
    if missing:
        pytest.skip(f"not every page was audited in this run ({len(missing)} missing)")
    unused = [a for k, a in enumerate(AXE_ALLOWED) if k not in used]
    assert not unused, f"AXE_ALLOWED entries no page needs any more: {unused}"
