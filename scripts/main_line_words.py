"""Count the words of a chapter's main line: the prose a reader meets without opening anything.

Usage:
    python scripts/main_line_words.py book/03_scaling.md book/08_whole_module.md
    python scripts/main_line_words.py --rev c5c0bc7 book/03_scaling.md   # a file as committed

For each page it prints three counts:

- **main line**: prose from the top of the page to its ``## Exercises`` heading, outside
  collapsed blocks (any directive with ``:class: dropdown``, ``{dropdown}``, ``{solution}``) and
  outside code (fenced code, ``{literalinclude}``, ``{math}``, ``$$`` and ``$...$`` math,
  ``{list-table}``, ``{questions}``); the text of theorems, proofs, algorithm boxes, admonitions
  and figure captions counts, their ``:option:`` lines do not;
- **visible**: the same rule over the whole page (exercises, summary and references included);
- **collapsed**: the prose inside collapsed blocks, which a reader opens on demand.

A word is a run of letters (apostrophes and hyphens inside it allowed); inline code counts as one
word, a glued value, a cross-reference or a citation as none, ``{term}`text <target>``` as its
text. The rule is deliberately simple, so that a count is reproducible and a before/after
comparison fair. The course guide's reading times (``scripts/classroom_guide.py``) count
visible + collapsed words by the same rule.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^\s*(`{3,}|:{3,})\s*(\{[^}]*\})?(.*)$")
CODE_DIRECTIVES = {"literalinclude", "code", "code-block", "code-cell", "math", "list-table",
                   "questions", "glue:figure", "glue", "raw", "bibliography", "include"}
COLLAPSED_DIRECTIVES = {"dropdown", "solution", "toggle"}
WORD = re.compile(r"[^\W\d_][\w'’-]*")
ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")


@dataclass
class Counts:
    main: int = 0
    visible: int = 0
    collapsed: int = 0


def _inline_words(line: str) -> int:
    def role(match: re.Match) -> str:
        name, body = match.group(1), match.group(2)
        if name == "term":  # {term}`text <target>` reads as its text
            return body.split("<", 1)[0]
        return " "  # glue, ref, numref, eq, doc, cite, prf:ref: a number or a label
    line = ROLE.sub(role, line)
    n_code = len(re.findall(r"`[^`]+`", line))
    line = re.sub(r"`[^`]+`", " ", line)
    line = re.sub(r"\$[^$]+\$", " ", line)  # inline math
    line = re.sub(r"<!--.*?-->", " ", line)
    line = re.sub(r"\]\([^)]*\)", "] ", line)  # a link's target
    return n_code + len(WORD.findall(line))


def count(text: str) -> Counts:
    """Main-line, visible and collapsed word counts of one MyST Markdown page."""
    counts = Counts()
    stack: list[tuple[str, int, str, bool]] = []  # (fence char, length, kind, collapsed)
    in_dollar_math = False
    in_comment = False
    exercises = False
    pending: int | None = None  # words of the title of a block whose options are being read
    for raw in text.splitlines():
        line = raw.rstrip()
        if in_comment:
            in_comment = "-->" not in line
            continue
        if line.lstrip().startswith("<!--") and "-->" not in line:
            in_comment = True
            continue
        fence = FENCE.match(line)
        if fence:
            char, length = fence.group(1)[0], len(fence.group(1))
            closes = (stack and stack[-1][0] == char and length >= stack[-1][1]
                      and not fence.group(2) and not fence.group(3).strip())
            if closes:
                if pending is not None:
                    _add(counts, pending, stack, exercises)
                stack.pop()
                pending = None
                continue
            name = (fence.group(2) or "{}")[1:-1]
            kind = "code" if (not name or name in CODE_DIRECTIVES) else name
            collapsed = name in COLLAPSED_DIRECTIVES
            if pending is not None:  # the enclosing block had no options left to read
                _add(counts, pending, stack, exercises)
            stack.append((char, length, kind, collapsed))
            # a directive's argument is prose when it is a title, not when it is a path;
            # it is counted once the options have said whether the block is collapsed
            title = fence.group(3).strip()
            pending = _inline_words(title) if kind not in ("code", "figure") and title else 0
            continue
        if pending is not None:
            if re.match(r"^\s*:[\w-]+:", line):
                if re.match(r"^\s*:class:.*\bdropdown\b", line):
                    char, length, kind, _ = stack[-1]
                    stack[-1] = (char, length, kind, True)
                continue
            _add(counts, pending, stack, exercises)
            pending = None
        if any(kind == "code" for _, _, kind, _ in stack):
            continue
        if line.strip() == "$$":
            in_dollar_math = not in_dollar_math
            continue
        if in_dollar_math or re.match(r"^\s*\(.*\)=\s*$", line):
            continue
        if not stack and re.match(r"^##\s+Exercises\b", line):
            exercises = True
        _add(counts, _inline_words(line), stack, exercises)
    return counts


def _add(counts: Counts, n: int, stack, exercises: bool) -> None:
    if any(collapsed for _, _, _, collapsed in stack):
        counts.collapsed += n
        return
    counts.visible += n
    if not exercises:
        counts.main += n


def read(path: str, rev: str | None) -> str:
    if rev is None:
        return (ROOT / path).read_text(encoding="utf-8")
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", help="book pages, relative to the repository root")
    parser.add_argument("--rev", help="count the pages as committed at this git revision")
    args = parser.parse_args(argv)
    print(f"| page ({args.rev or 'working tree'}) | main line | visible | collapsed |")
    print("|---|---|---|---|")
    for page in args.pages:
        c = count(read(page, args.rev))
        print(f"| {page} | {c.main} | {c.visible} | {c.collapsed} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
