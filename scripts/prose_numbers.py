"""List the literal numbers left in the book's prose, and count the glued ones.

A number a chapter quotes from a lab (a weight, a variance, a time, a ratio, a percentage) must
be pasted from the lab with myst-nb's glue, ``{glue:text}`../notebooks/NN_lab.ipynb::key:s```,
never typed. This script strips what is not prose (code, math, directive options, roles,
comments, link targets) and reports what still looks like a measurement: a decimal (0.97, 3.1),
a percentage (74%), a number in scientific notation (4.9e-5) or a multiplier (4000 times, 1.5×).

Constants and definitions may stay literal. A page allows them in an HTML comment,
``<!-- literal numbers: 65504, 0.5 -->``, and :data:`ALLOWED_EVERYWHERE` holds the few that
every page may use. Usage: ``python scripts/prose_numbers.py`` prints a table per page and exits
1 when a page has a literal number it does not allow.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "book").glob("*.md"))

# Version numbers and similar names, not measurements.
ALLOWED_PATTERNS = [
    r"(?:PyTorch|torch|Python|Triton|triton|Jupyter Book|ipywidgets|html-manager|CUDA|MathJax"
    r"|sm|version|v|Attribution|BY)\s*\d+(?:\.\d+)+",
]
ALLOWED_EVERYWHERE: set[str] = set()

GLUE = re.compile(r"\{glue(?::\w+)?\}`([^`]*)`")
ALLOW_COMMENT = re.compile(r"<!--\s*literal numbers:(.*?)-->", re.S)
NUMBER = re.compile(
    r"(?<![\w.\-])(?:"
    r"\d+(?:\.\d+)?(?:e|E)[-+−]?\d+"  # 4.9e-5
    r"|\d+(?:\.\d+)?\s?(?:%|×|times\b)"  # 74%, 1.5×, 4000 times
    r"|\d+\.\d+"  # 0.97
    r")(?![\w])"
)


def allowed_in(text: str) -> set[str]:
    """The numbers a page allows in its ``<!-- literal numbers: ... -->`` comments."""
    found: set[str] = set()
    for block in ALLOW_COMMENT.findall(text):
        found.update(item.strip() for item in block.split(",") if item.strip())
    return found


def prose_only(text: str) -> str:
    """The page with code, math, directive options, roles, comments and URLs blanked out."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    # fenced blocks whose body is not prose: code and math
    text = re.sub(r"^(```+|~~~+)\s*(?:\{(?:code-block|code|literalinclude|math)\}|python|bash|"
                  r"text|console|yaml)?[^\n]*\n(?:.*?\n)??\1\s*$",
                  lambda m: "\n" if not _is_prose_fence(m.group(0)) else m.group(0),
                  text, flags=re.S | re.M)
    text = re.sub(r"^:[\w-]+:.*$", " ", text, flags=re.M)  # directive options
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)  # display math
    text = re.sub(r"(?<!\\)\$[^$\n]+?(?<!\\)\$", " ", text)  # inline math
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", text)  # roles: glue, ref, doc, cite, math
    text = re.sub(r"`[^`\n]*`", " ", text)  # inline code
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    text = re.sub(r"https?://\S+", " ", text)
    return text


def _is_prose_fence(block: str) -> bool:
    """Admonitions, exercises, figures and the like hold prose (their captions are checked)."""
    first = block.split("\n", 1)[0]
    return bool(re.match(r"^(```+|~~~+)\s*\{(?!code-block|code|literalinclude|math)", first))


def literal_numbers(path: Path) -> list[str]:
    """The literal numbers in a page's prose that the page does not allow."""
    text = path.read_text(encoding="utf-8")
    prose = prose_only(text)
    for pattern in ALLOWED_PATTERNS:
        prose = re.sub(pattern, " ", prose)
    allowed = allowed_in(text) | ALLOWED_EVERYWHERE
    return [m.group(0) for m in NUMBER.finditer(prose)
            if m.group(0) not in allowed and re.sub(r"\s?(%|×|times)$", "", m.group(0))
            not in allowed]


def glued_count(path: Path) -> int:
    """How many numbers a page pastes from a lab with glue."""
    return len(GLUE.findall(path.read_text(encoding="utf-8")))


def report(pages: list[Path] = PAGES) -> dict[str, tuple[int, list[str], int]]:
    """Per page: (glued, literal numbers not allowed, literal numbers allowed)."""
    out = {}
    for path in pages:
        text = path.read_text(encoding="utf-8")
        out[path.name] = (glued_count(path), literal_numbers(path), len(allowed_in(text)))
    return out


def main() -> int:
    rows = report()
    print(f"{'page':28} {'glued':>6} {'literal':>8} {'allowed':>8}")
    bad = 0
    for name, (glued, literal, allowed) in rows.items():
        print(f"{name:28} {glued:6d} {len(literal):8d} {allowed:8d}"
              + (f"   {', '.join(literal)}" if literal else ""))
        bad += len(literal)
    print(f"{'total':28} {sum(r[0] for r in rows.values()):6d} {bad:8d}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
