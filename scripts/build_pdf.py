"""The book as one PDF (`make pdf`): Jupyter Book's single-page HTML, printed by Debian's Chromium.

1. ``jupyter-book build . --builder singlehtml -W -n --keep-going`` writes the whole book (the
   introduction, every chapter and lab with its stored outputs and widgets, the appendices) as one
   page, numbered as the site is: the same Sphinx environment gives the same chapter, section,
   figure, equation and exercise numbers. Right after a site build it reuses the site's
   ``_build/.doctrees`` and only writes the page.
2. The page is served on 127.0.0.1 and opened in Chromium through Playwright: Debian's
   ``/usr/bin/chromium`` (``ATTNBOOK_CHROMIUM`` names another, e.g. Google Chrome on GitHub's
   runners), never a browser that Playwright downloads. A request for any other host is refused
   and recorded: the PDF is made offline, from the vendored MathJax and widget manager.
3. Once every image has loaded, MathJax has typeset every formula and every widget is drawn, the
   collapsed parts (exercise solutions, hidden cells) are opened as sphinx-togglebutton opens them
   for printing, a title page, a contents page and a page for each part of the table of contents
   are added, and Chromium prints with the print style below: each chapter and lab starts a page,
   code wraps instead of running off the page, page numbers in the footer, PDF bookmarks from the
   headings, and the page's links to its own anchors (cross-references, equation and figure
   numbers, the contents) as links inside the PDF.

Writes ``_build/pdf/attention-step-by-step.pdf`` and, beside it, a ``.json`` of what the printed
page held (headings, images, formulas, widgets, links, MathJax errors, refused requests, timings),
which ``tests/test_pdf.py`` checks the PDF against. If ``_build/html`` exists, the PDF is copied
there too: the site's introduction links it there (the Pages workflow publishes that folder).

The full PDF is tagged (its structure readable by assistive technology) and has bookmarks;
``--quick`` leaves both out, which halves the printing (``make test`` checks that one).

Usage: python scripts/build_pdf.py [--all] [--no-sphinx] [--quick] [--paper A4|Letter]
"""

from __future__ import annotations

import argparse
import functools
import html
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
NAME = "attention-step-by-step"
CHROMIUM = os.environ.get("ATTNBOOK_CHROMIUM", "/usr/bin/chromium")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

# The print style, added to the page. The theme's own print rules hide the navigation; these
# undo the one that hides each page's first heading (in the single page every chapter's title is
# the first <h1> of its section) and lay the book out for paper.
PRINT_CSS = """
@media print {
  html { font-size: 9.5pt; }
  .bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer,
  .bd-footer-article, .bd-footer-content, .prev-next-area, #jb-print-docs-body, .headerlink,
  .copybtn, .toggle-button, .attnbook-report, .attnbook-pdf-skip, .skip-link,
  details > summary { display: none !important; }
  .bd-main .bd-content .bd-article h1:first-of-type { display: block !important; }
  /* One column as wide as the paper: the theme centres a flex column, which a wide code line
     or widget would push past both edges of the page. */
  .bd-container, .bd-container__inner, .bd-main, .bd-content, .bd-article-container,
  .bd-article { display: block !important; min-width: 0 !important; max-width: none !important;
    width: auto !important; margin: 0 !important; padding: 0 !important; }
  img, svg, .jupyter-widgets, .widget-box, .lm-Widget, table { max-width: 100% !important; }
  p, li, td, th, dd, dt, .caption, code { overflow-wrap: anywhere; }
  /* In the single page a chapter's title is an <h2> and a lab's an <h3>: size them as titles. */
  span[id^="document-"] + section > :is(h1, h2, h3) { font-size: 2em; margin-top: 0; }
  /* A chapter, a lab and a part each start a page. */
  span[id^="document-"] + section, .attnbook-pdf-part, .attnbook-pdf-contents {
    break-before: page; }
  .attnbook-pdf-part { padding-top: 30vh; text-align: center; }
  .attnbook-pdf-part h1 { font-size: 2.4em; }
  .attnbook-pdf-title { break-after: page; padding-top: 28vh; text-align: center; }
  .attnbook-pdf-title h1 { font-size: 3em; margin-bottom: 0.5em; }
  .attnbook-pdf-contents ul { list-style: none; padding-left: 1.2em; }
  .attnbook-pdf-contents a { text-decoration: none; }
  .attnbook-pdf-contents > ul > li > span { font-weight: 600; display: block; margin-top: .6em; }
  /* Code and outputs wrap on paper; nothing is cut off by a scroll box. */
  pre, .highlight pre, .output pre, div.cell_output pre {
    white-space: pre-wrap !important; word-break: break-word; overflow: visible !important;
    max-height: none !important; }
  .table-wrapper, .cell_output, .output, div.highlight, .pst-scrollable-table-container {
    overflow: visible !important; max-height: none !important; }
  img, figure, table, .cell_input, mjx-container[display="true"] { break-inside: avoid; }
  h1, h2, h3, h4, .caption { break-after: avoid; }
  a { color: inherit; }
  /* Chromium draws a shadow into the PDF as a picture (a blurred mask as wide as the box): the
     theme's admonitions gave the book a thousand. The theme's rule is !important, hence the
     selector that outranks it. */
  html body [class], html body [class]::before, html body [class]::after {
    box-shadow: none !important; text-shadow: none !important; }
}
"""

# JavaScript run once the page has loaded: wait for images and MathJax.
SETTLE_JS = """async () => {
  for (const img of document.images) img.loading = "eager";
  await Promise.all([...document.images].map(img => img.complete ? null :
      new Promise(r => { img.addEventListener("load", r); img.addEventListener("error", r); })));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
}"""

# Title page, contents and part pages; collapsed blocks opened as for printing.
PREPARE_JS = """({title, author, note, parts}) => {
  // sphinx-togglebutton opens its toggles for printing, on "beforeprint", which Chromium's PDF
  // printing does not send. Open them as its handler does, without a click each (every click
  // lays the whole book out again): shown, not hidden; every <details> (a lab's hidden cells) too.
  document.querySelectorAll(".toggle-hidden").forEach(e => e.classList.remove("toggle-hidden"));
  document.querySelectorAll(".toggle-button-hidden")
    .forEach(e => e.classList.remove("toggle-button-hidden"));
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const article = document.querySelector("article.bd-article") || document.querySelector("main");
  const first = article.firstElementChild;
  const page = document.createElement("div");
  page.className = "attnbook-pdf-title";
  const h = document.createElement("p");
  h.innerHTML = `<span style="font-size:3em;font-weight:600">${title}</span>`;
  const who = document.createElement("p");
  who.textContent = author;
  const what = document.createElement("p");
  what.style.marginTop = "30vh"; what.style.fontSize = "0.85em";
  what.textContent = note;
  page.append(h, who, what);
  article.insertBefore(page, first);
  // Contents: the parts, their chapters and labs, each a link to its page.
  const contents = document.createElement("nav");
  contents.className = "attnbook-pdf-contents";
  contents.setAttribute("aria-label", "Contents");
  const heading = document.createElement("h1");
  heading.textContent = "Contents";
  heading.id = "attnbook-pdf-contents";
  const list = document.createElement("ul");
  const missing = [];
  const titleOf = (doc, root) => {
    if (root) {  // the introduction opens the page: no "document-" anchor of its own
      const h = article.querySelector("section > h1");
      return h ? h.textContent.replace(/#$/, "") : null;
    }
    const anchor = document.getElementById("document-" + doc);
    const section = anchor && anchor.nextElementSibling;
    const h1 = section && section.querySelector("h1, h2, h3, h4");
    if (!h1) { missing.push(doc); return null; }
    const clone = h1.cloneNode(true);
    clone.querySelectorAll(".headerlink, mjx-assistive-mml").forEach(e => e.remove());
    return clone.innerHTML;
  };
  for (const part of parts) {
    const li = document.createElement("li");
    if (part.caption) {
      const span = document.createElement("span");
      span.textContent = part.caption;
      li.append(span);
    }
    const ul = document.createElement("ul");
    for (const entry of part.docs) {
      const item = document.createElement("li");
      const root = !part.caption && entry === part.docs[0];
      const inner = titleOf(entry.doc, root);
      if (inner === null) continue;
      const target = root ? article.querySelector("section").id : "document-" + entry.doc;
      item.innerHTML = `<a href="#${target}">${inner}</a>`;
      if (entry.level > 0) item.style.paddingLeft = "1.2em";
      ul.append(item);
    }
    li.append(ul);
    list.append(li);
  }
  contents.append(heading, list);
  article.insertBefore(contents, first);
  // A page for each part, before its first chapter.
  let pages = 0;
  for (const part of parts) {
    if (!part.caption || !part.docs.length) continue;
    const anchor = document.getElementById("document-" + part.docs[0].doc);
    if (!anchor) continue;
    const div = document.createElement("div");
    div.className = "attnbook-pdf-part";
    const h1 = document.createElement("h1");
    h1.textContent = part.caption;
    div.append(h1);
    anchor.parentElement.insertBefore(div, anchor);
    pages += 1;
  }
  return {missing, partPages: pages};
}"""

# What the printed page holds, for the test.
INSPECT_JS = """() => {
  // Shown in print, from styles alone (no layout: the print lays the book out again anyway).
  const visible = e => e.checkVisibility();
  const images = [...document.images].filter(visible);
  const links = [...document.querySelectorAll('a[href^="#"]')].filter(visible);
  const ids = new Set([...document.querySelectorAll("[id]")].map(e => e.id));
  return {
    headings: [...document.querySelectorAll(
        'span[id^="document-"] + section > :is(h1, h2, h3), .attnbook-pdf-part > h1')]
      .filter(visible).map(h => h.innerText.replace(/\\s+/g, " ").trim()),
    images: images.map(img => ({src: (img.currentSrc || img.src).startsWith("data:") ? "data:"
                                : new URL(img.currentSrc || img.src).pathname,
                                ok: img.complete && img.naturalWidth > 0})),
    documents: [...document.querySelectorAll('span[id^="document-"]')]
      .map(s => s.id.slice("document-".length)),
    formulas: document.querySelectorAll("mjx-container").length,
    math: document.querySelectorAll(".math").length,
    mathUntypeset: [...document.querySelectorAll(".math")]
      .filter(e => !e.querySelector("mjx-container")).length,
    mjxErrors: [...document.querySelectorAll("mjx-merror")]
      .map(e => e.getAttribute("data-mjx-error") || e.textContent),
    widgets: document.querySelectorAll(".attnbook-pdf-widget").length,
    widgetsNotDrawn: [...document.querySelectorAll(".attnbook-pdf-widget")]
      .filter(w => !w.children.length).map(w => (w.closest("section") || {}).id),
    internalLinks: links.length,
    brokenLinks: links.map(a => decodeURIComponent(a.getAttribute("href").slice(1)))
      .filter(id => id && !ids.has(id)),
  };
}"""

FOOTER = ('<div style="font-size:8px;width:100%;text-align:center;color:#555">'
          '<span class="pageNumber"></span></div>')


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def toc_parts(root: Path = ROOT) -> list[dict]:
    """The table of contents as parts: caption and documents (level 0 a chapter, 1 its lab)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    parts = [{"caption": None, "docs": [{"doc": toc["root"], "level": 0}]}]

    def walk(entries, level, out):
        for entry in entries or []:
            if "file" in entry:
                out.append({"doc": entry["file"], "level": level})
            walk(entry.get("sections"), level + 1, out)

    for part in toc.get("parts", []):
        docs: list[dict] = []
        walk(part.get("chapters"), 0, docs)
        parts.append({"caption": part.get("caption"), "docs": docs})
    return parts


def commit(root: Path = ROOT) -> str:
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def widget_view(state: dict, model_id: str) -> str:
    """A widget as paper shows it: each control with its value, then the view it selects.

    Walks the saved state from the widget's model: a box shows all its children, a stack (the
    stored views of attnbook.lab.static_widgets.static_interact) only the selected one, an output
    its images and text, a control its description and value.
    """
    parts: list[str] = []

    def walk(mid: str) -> None:
        model = state.get(mid)
        if model is None:
            return
        name, st = model["model_name"], model["state"]
        kids = [c.removeprefix("IPY_MODEL_") for c in st.get("children", [])]
        if name in ("StackModel", "TabModel", "AccordionModel"):
            if kids:
                walk(kids[st.get("selected_index") or 0])
        elif kids:
            for kid in kids:
                walk(kid)
        elif name == "OutputModel":
            for out in st.get("outputs", []):
                data = out.get("data", {})
                if "image/png" in data:
                    png = "".join(data["image/png"]).replace("\n", "")
                    parts.append(f'<img src="data:image/png;base64,{png}" '
                                 'alt="The stored view of the widget for the values above.">')
                elif "text/plain" in data or "text" in out:
                    text = "".join(data.get("text/plain", out.get("text", "")))
                    parts.append(f"<pre>{html.escape(text)}</pre>")
        elif "_options_labels" in st and st.get("index") is not None:
            label = st["_options_labels"][st["index"]]
            parts.append(f"<p>{html.escape(st.get('description', ''))} "
                         f"<b>{html.escape(str(label))}</b></p>")
        elif "value" in st and name.endswith(("SliderModel", "CheckboxModel", "TextModel")):
            parts.append(f"<p>{html.escape(st.get('description', ''))} "
                         f"<b>{html.escape(str(st['value']))}</b></p>")
        elif name in ("HTMLModel", "HTMLMathModel", "LabelModel"):
            parts.append(f"<p>{st.get('value', '')}</p>")

    walk(model_id)
    return '<div class="attnbook-pdf-widget">' + "\n".join(parts) + "</div>"


def print_page(site: Path) -> Path:
    """The single page, copied for printing to the build's top folder, its widgets drawn.

    The singlehtml builder writes the root document's page (``book/intro.html``) with links to
    ``_static/`` as if it were at the top (Sphinx gives it the name ``index``): there its
    MathJax, styles and scripts load, and its ``../_images/`` resolve to ``/_images/``.
    myst-nb puts a lab's saved widget state on the lab's own page, which the single page is not,
    and paper cannot move a slider: each widget is drawn here from the lab's saved state as its
    stored default view (:func:`widget_view`), the view the site shows before a control moves.
    """
    root = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))["root"]
    page = site / (root + ".html")
    if not page.exists():
        page = site / "index.html"
    state: dict = {}
    for doc in (d["doc"] for part in toc_parts() for d in part["docs"]):
        path = ROOT / (doc + ".ipynb")
        if path.exists():
            meta = json.loads(path.read_text(encoding="utf-8"))["metadata"].get("widgets", {})
            state.update(meta.get(WIDGET_STATE, {}).get("state", {}))
    text = page.read_text(encoding="utf-8")
    text = re.sub(rf'<script type="{re.escape(WIDGET_VIEW)}">(.*?)</script>',
                  lambda m: widget_view(state, json.loads(m.group(1))["model_id"]), text,
                  flags=re.S)
    text = text.replace('<script src="searchindex.js"></script>', "")  # none in a single page
    out = site / "print.html"
    out.write_text(text, encoding="utf-8")
    return out


def build_singlehtml(build: Path, fresh: bool, strict: bool = True) -> float:
    """Jupyter Book's singlehtml builder, warning-free; returns the seconds it took.

    Run in this process, with one fix that changes no page and no configuration (the site's
    doctrees stay valid; _ext/attnbook_labs.py lets a reused environment be numbered again): the
    singlehtml builder gets the html builder's visitors for nodes that have none of their own.
    Sphinx looks a builder's visitors up by its name and falls back to its format ("html") only
    when no extension registered any for that name; sphinx-exercise registers some for
    singlehtml, so sphinx-proof's algorithm boxes, the chapters' questions and the other
    extensions' html-only nodes would have none.
    """
    import jupyter_book.sphinx as jb_sphinx
    from jupyter_book.cli.main import build as jb_build

    base = jb_sphinx.Sphinx

    class SinglePageSphinx(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            handlers = self.registry.translation_handlers
            single = handlers.setdefault(self.builder.name, {})
            for node, visitors in handlers.get(self.builder.format, {}).items():
                single.setdefault(node, visitors)

    start = time.perf_counter()
    args = [str(ROOT), "--builder", "singlehtml", "-n", "--keep-going"] + ["-W"] * strict
    if build != BUILD:
        args += ["--path-output", str(build.parent)]
    if fresh:
        args.append("--all")
    jb_sphinx.Sphinx = SinglePageSphinx
    try:
        jb_build.main(args, standalone_mode=False)
    finally:
        jb_sphinx.Sphinx = base
    return time.perf_counter() - start


def print_pdf(site: Path, pdf: Path, paper: str, tagged: bool = True) -> dict:
    """Print site/index.html to ``pdf`` with Chromium; returns what the page held."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does), or set "
                 "ATTNBOOK_CHROMIUM to a Chromium or Chrome executable")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    page_path = print_page(site).relative_to(site).as_posix()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/{page_path}"
    blocked: list[str] = []
    times: dict[str, float] = {}

    def route(r):
        if urlsplit(r.request.url).hostname in ("127.0.0.1", None):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, headless=True,
                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                      "--disable-background-networking", "--disable-component-update",
                      "--disable-sync", "--no-first-run", "--disable-quic"])
            page = browser.new_page(viewport={"width": 1000, "height": 1400})
            page.route("**/*", route)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            t = time.perf_counter()
            page.goto(url, wait_until="load", timeout=300_000)
            page.emulate_media(media="print")
            page.evaluate(SETTLE_JS)
            times["load_s"] = round(time.perf_counter() - t, 1)
            note = (f"Built from commit {commit()} with Jupyter Book's singlehtml builder and "
                    f"Chromium, {time.strftime('%Y-%m-%d')}. Text and figures: CC BY 4.0; "
                    f"code: MIT. {config['repository']['url']}")
            t = time.perf_counter()
            prepared = page.evaluate(PREPARE_JS, {
                "title": config["title"], "author": config["author"], "note": note,
                "parts": toc_parts()})
            page.add_style_tag(content=PRINT_CSS)
            info = page.evaluate(INSPECT_JS)
            times["inspect_s"] = round(time.perf_counter() - t, 1)
            t = time.perf_counter()
            page.pdf(path=str(pdf), format=paper, print_background=True, outline=tagged,
                     tagged=tagged, display_header_footer=True, header_template="<span></span>",
                     footer_template=FOOTER,
                     margin={"top": "16mm", "bottom": "16mm", "left": "16mm", "right": "16mm"})
            times["print_s"] = round(time.perf_counter() - t, 1)
            # The page's main-thread work (script, layout, style) up to the print: what the load
            # costs on an idle machine, whatever else this one was doing.
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            times["renderer_busy_s"] = round(metrics.get("TaskDuration", 0.0), 1)
            info.update(chromium=browser.version, prepared=prepared,
                        page_errors=errors)
            browser.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
    info.update(blocked=blocked, times=times, paper=paper, tagged=tagged)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true",
                        help="re-read every page (default: reuse _build/.doctrees)")
    parser.add_argument("--no-sphinx", action="store_true",
                        help="print the existing _build/singlehtml without rebuilding it")
    parser.add_argument("--paper", default="A4", choices=["A4", "Letter"])
    parser.add_argument("--quick", action="store_true",
                        help="an untagged PDF without bookmarks: about half the printing time "
                             "(`make test` checks this one; `make pdf` makes the full one)")
    parser.add_argument("--build", type=Path, default=BUILD,
                        help="the _build folder (default: ./_build)")
    args = parser.parse_args(argv)
    build = args.build.resolve()
    out = build / "pdf"
    out.mkdir(parents=True, exist_ok=True)
    pdf = out / f"{NAME}.pdf"
    sphinx_s = 0.0 if args.no_sphinx else build_singlehtml(build, args.all)
    info = print_pdf(build / "singlehtml", pdf, args.paper, tagged=not args.quick)
    info["times"]["sphinx_s"] = round(sphinx_s, 1)
    (out / f"{NAME}.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    if (build / "html").is_dir():
        shutil.copyfile(pdf, build / "html" / pdf.name)
    problems = []
    if info["blocked"]:
        problems.append(f"requests to other hosts refused: {info['blocked'][:5]}")
    if info["mjxErrors"] or info["mathUntypeset"]:
        problems.append(f"MathJax: {info['mathUntypeset']} formulas untypeset, "
                        f"errors {info['mjxErrors'][:5]}")
    if info["widgetsNotDrawn"]:
        problems.append(f"widgets not drawn, in sections {info['widgetsNotDrawn']}")
    if info["prepared"]["missing"]:
        problems.append(f"toc documents not in the page: {info['prepared']['missing']}")
    print(f"{pdf.relative_to(ROOT) if pdf.is_relative_to(ROOT) else pdf}: "
          f"{pdf.stat().st_size / 2**20:.1f} MiB; {len(info['images'])} images, "
          f"{info['formulas']} formulas, {info['widgets']} widgets; times {info['times']}")
    for problem in problems:
        print("error:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
