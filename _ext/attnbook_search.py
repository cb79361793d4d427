"""Sphinx extension: readable titles in the search results (issue 47, section 3).

Sphinx's search index stores each section title and caption as the text of its node, so a title
with math in it reaches the search results as raw TeX ("Why \\sqrt{d} and not d"). After the
build, the titles in ``searchindex.js`` that hold a TeX command are rewritten as plain text
("Why √d and not d", "Filling with −∞"): the book's MathJax macros are expanded, the commands it
uses become their characters, and braces go. The rewrite is idempotent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SYMBOLS = {
    "infty": "∞", "theta": "θ", "alpha": "α", "beta": "β", "gamma": "γ", "lambda": "λ",
    "mu": "μ", "sigma": "σ", "tau": "τ", "ell": "ℓ", "dots": "…", "ldots": "…", "cdots": "⋯",
    "cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠",
    "neq": "≠", "approx": "≈", "to": "→", "rightarrow": "→", "in": "∈", "sum": "∑", "max": "max",
    "min": "min", "exp": "exp", "log": "log", "softmax": "softmax", "top": "ᵀ", "prime": "′",
}
# Commands whose argument is shown as it is (font and text commands).
TEXT_COMMANDS = ("text", "mathbf", "mathrm", "mathit", "mathcal", "mathbb", "operatorname",
                 "boldsymbol", "textrm", "texttt")
SPACES = re.compile(r"\\[,;:! ]|\\quad|\\qquad")


def _arg(text: str, start: int) -> tuple[str, int]:
    """The braced (or single-character) argument at ``start`` and the index after it."""
    if start < len(text) and text[start] == "{":
        depth = 0
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start + 1:i], i + 1
        return text[start + 1:], len(text)
    return text[start:start + 1], start + 1


def tex_to_text(text: str, macros: dict[str, str] | None = None) -> str:
    """A title with TeX in it as plain text; text without a backslash comes back unchanged."""
    if "\\" not in text:
        return text
    for _ in range(3):  # macros may use macros
        for name, body in (macros or {}).items():
            text = re.sub(r"\\" + name + r"(?![a-zA-Z])", lambda _m, b=body: b, text)
    text = SPACES.sub(lambda m: " " if m.group(0).startswith("\\q") else "", text)
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            match = re.match(r"\\([a-zA-Z]+)\s*", text[i:])
            if not match:
                out.append(text[i + 1:i + 2])
                i += 2
                continue
            name, i = match.group(1), i + match.end()
            if name == "sqrt":
                arg, i = _arg(text, i)
                arg = tex_to_text(arg, macros)
                out.append("√" + (arg if len(arg) == 1 else f"({arg})"))
            elif name in TEXT_COMMANDS:
                arg, i = _arg(text, i)
                out.append(tex_to_text(arg, macros))
            elif name == "frac":
                num, i = _arg(text, i)
                den, i = _arg(text, i)
                out.append(f"{tex_to_text(num, macros)}/{tex_to_text(den, macros)}")
            else:
                out.append(SYMBOLS.get(name, name))
        elif char in "^_" and i + 1 < len(text) and text[i + 1] == "{":
            arg, i = _arg(text, i + 1)
            arg = tex_to_text(arg, macros)
            out.append(char + (arg if len(arg) == 1 else f"({arg})"))
        elif char in "{}":
            i += 1
        else:
            out.append(char)
            i += 1
    plain = "".join(out)
    # A minus sign before a number, a letter of a formula or a symbol; hyphens between words stay.
    plain = re.sub(r"(^|[\s(=^])-(?=[\d∞(a-zA-Zα-ω√])", "\\1−", plain)
    return " ".join(plain.split())


def _macros(app) -> dict[str, str]:
    config = getattr(app.config, "mathjax3_config", None) or {}
    macros = config.get("tex", {}).get("macros", {})
    return {k: v for k, v in macros.items() if isinstance(v, str)}


def rewrite_index(path: Path, macros: dict[str, str] | None = None) -> bool:
    """Rewrite the titles in a built ``searchindex.js``; whether anything changed."""
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition("(")
    body, _, tail = rest.rpartition(")")
    index = json.loads(body)
    changed = False
    titles = index.get("titles", [])
    for n, title in enumerate(titles):
        if "\\" in title:
            titles[n], changed = tex_to_text(title, macros), True
    alltitles = {}
    for title, places in index.get("alltitles", {}).items():
        plain = tex_to_text(title, macros)
        changed |= plain != title
        alltitles.setdefault(plain, []).extend(places)
    index["alltitles"] = alltitles
    if changed:
        body = json.dumps(index, separators=(",", ":"), sort_keys=True)
        path.write_text(f"{head}({body}){tail}", encoding="utf-8")
    return changed


def rewrite_search_index(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    path = Path(app.outdir) / "searchindex.js"
    if path.exists():
        rewrite_index(path, _macros(app))


def drop_stale_domain_indices(app, exception) -> None:
    """Domain indices are off (html_domain_indices: false); a build over an older output folder
    would still serve the Proof Index an earlier build wrote (prf-prf.html): remove it."""
    if exception is None and app.builder.format == "html" and not app.config.html_domain_indices:
        for stale in Path(app.outdir).glob("*-*.html"):
            if stale.name in ("prf-prf.html", "py-modindex.html"):
                stale.unlink()


def setup(app):
    app.connect("build-finished", rewrite_search_index)
    app.connect("build-finished", drop_stale_domain_indices)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
