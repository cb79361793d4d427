"""Sphinx extension: the accessibility fixes that the pages need and the theme does not make.

The browser test audits every page with axe-core (tests/test_site_browser.py). What it found in
the theme's own markup is repaired here, after the build, in every written HTML file:

- the sidebar's expand buttons (``<details><summary>`` with only a chevron icon) get a name,
  "Sections of <chapter>";
- the primary sidebar becomes a navigation landmark ("Book"), so that the book's title and the
  search button at its top are inside a landmark like the rest of the page;
- the search buttons and the hidden-code toggles lose an ``aria-label`` that hid their visible
  text ("Search Ctrl+K", "Show code cell source"), and the colour-mode button's label names the
  modes its icons show;
- the bibliography's entries use the ARIA role ``listitem`` (``doc-biblioentry`` is deprecated and
  not a list item, so the list had no items);
- in the saved widget state, an Output widget's ``tooltip`` becomes the alt text of its figures
  (output metadata): the HTML manager fails to draw an Output that has a tooltip.

A figure that a lab cell draws gets the alternative text its cell gives (myst-nb's
``mystnb.image.alt`` metadata); without one, Sphinx would write the image's file name. Here it
gets the lab's own words instead: the heading of its section and the first sentence the lab
wrote before the cell ("The weights as a picture: Rows are queries ...").

``attnbook-a11y.css`` darkens links in light mode to a 4.5:1 contrast on the tinted backgrounds of
exercises and theorems, and ``attnbook-a11y.js`` names what the ipywidgets HTML manager draws
without a name: each widget's figure gets alternative text (the description the lab stored with it
through ``attnbook.lab.static_widgets``, else the values of the controls that select it), each
slider and drop-down gets the label of its control. The rewrites are idempotent.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from docutils import nodes

STATIC = Path(__file__).parent / "static"

_SIDEBAR_TOGGLE = re.compile(
    r'(<a class="(?:current )?reference internal" href="[^"]*">(?P<title>[^<]*)</a>'
    r'<details[^>]*>)<summary>'
    r'(?=<span class="toctree-toggle")')


_STATE = re.compile(
    r'(<script type="application/vnd\.jupyter\.widget-state\+json">)(.*?)(</script>)', re.S)


def _fix_state(match: re.Match) -> str:
    try:
        data = json.loads(match.group(2))
    except ValueError:
        return match.group(0)
    changed = False
    for model in data.get("state", {}).values():
        state = model.get("state", {})
        if model.get("model_name") != "OutputModel" or not state.get("tooltip"):
            continue
        for output in state.get("outputs", []):
            if "image/png" in output.get("data", {}):
                meta = output.setdefault("metadata", {}).setdefault("image/png", {})
                meta.setdefault("alt", state["tooltip"])
        state["tooltip"] = None
        changed = True
    if not changed:
        return match.group(0)
    body = json.dumps(data).replace("</", "<\\/")
    return match.group(1) + body + match.group(3)


def fix_html(text: str) -> str:
    """The page with the theme's unnamed or misnamed controls repaired."""
    text = _SIDEBAR_TOGGLE.sub(
        lambda m: f'{m.group(1)}<summary aria-label="Sections of '
                  f'{html.escape(html.unescape(m.group("title")), quote=True)}">', text)
    text = text.replace('<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar">',
                        '<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar" '
                        'role="navigation" aria-label="Book">')
    text = re.sub(r'(<button class="btn search-button-field search-button__button[^"]*"'
                  r' title="Search") aria-label="Search"', r"\1", text)
    text = text.replace('theme-switch-button pst-js-only" aria-label="Color mode"',
                        'theme-switch-button pst-js-only" aria-label="Color mode: Light, Dark or'
                        ' System Settings"')
    text = text.replace('<summary aria-label="Toggle hidden content">', "<summary>")
    text = re.sub(r'(<div class="citation" id="[^"]*") role="doc-biblioentry"',
                  r'\1 role="listitem"', text)
    return _STATE.sub(_fix_state, text)


def _plain(text: str) -> str:
    """Prose as a screen reader should hear it: TeX commands and braces dropped, spaces joined."""
    text = re.sub(r"\\[a-zA-Z]+", " ", text)
    text = re.sub(r"[{}$^_]", "", text)
    return " ".join(text.split())


def _first_sentence(text: str, limit: int = 200) -> str:
    match = re.match(r"(.+?[.!?:])(\s|$)", text)
    sentence = match.group(1) if match else text
    return sentence if len(sentence) <= limit else sentence[:limit].rsplit(" ", 1)[0] + "…"


def _in_cell(node) -> bool:
    while node is not None:
        if isinstance(node, nodes.container) and any(
                c.startswith("cell") for c in node.get("classes", [])):
            return True
        node = node.parent
    return False


def describe_cell_images(app, doctree, docname: str) -> None:
    """Alt text for the figures of notebook cells that have none: section heading and the first
    sentence before the cell."""
    if not docname.startswith("notebooks/"):
        return
    heading, sentence = "", ""
    for node in doctree.findall():
        if isinstance(node, nodes.title) and isinstance(node.parent, nodes.section):
            heading, sentence = _plain(node.astext()), ""
        elif isinstance(node, nodes.paragraph) and not _in_cell(node):
            text = _plain(node.astext())
            if text:
                sentence = _first_sentence(text)
        elif isinstance(node, nodes.image) and not node.get("alt") and _in_cell(node):
            parts = [p for p in (heading, sentence) if p]
            node["alt"] = ": ".join(parts) if parts else "Figure drawn by this lab's code"


def rewrite_pages(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for path in Path(app.outdir).rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        fixed = fix_html(text)
        if fixed != text:
            path.write_text(fixed, encoding="utf-8")


def add_static(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app):
    app.connect("config-inited", add_static)
    app.add_css_file("attnbook-a11y.css")
    app.add_js_file("attnbook-a11y.js", loading_method="defer")
    app.connect("doctree-resolved", describe_cell_images)
    app.connect("build-finished", rewrite_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
