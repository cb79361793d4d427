"""Export the chapters' retrieval questions to Moodle XML, for a course's quiz or question bank.

Usage: python scripts/export_questions.py [--format moodle] [--out _build/lms] [--chapters 4 6]

Writes ``OUT/moodle/NN_name.xml`` for each chapter (one question category per chapter) and
``OUT/moodle/all_chapters.xml`` with all of them. The questions come from their one source,
``book/questions/NN_name.yaml``, read with the site's own loader (_ext/attnbook_questions.py):

- a ``choice`` question becomes a Moodle ``multichoice`` (one right answer, shuffled), each
  option carrying its explanation as that answer's feedback;
- a ``numeric`` question becomes a ``numerical`` question with its tolerance; each named mistake
  becomes a 0-mark answer with its explanation, and any other number gets the hint;
- a ``predict`` question is numerical too, its answer the value the lab glues (read from the
  lab's stored outputs, as the site reads it), or a case-sensitive ``shortanswer`` when the lab
  prints a name rather than a number.

Prose is the book's MyST Markdown, rendered to HTML; math becomes ``\\( ... \\)`` and
``\\[ ... \\]``, which Moodle's MathJax filter typesets, with the book's own TeX macros
(``\\Q``, ``\\vq``, ``\\Wq``: _config.yml's ``mathjax3_config``) replaced by plain TeX, since
Moodle does not know them. Cross-references (``{eq}``, ``{ref}``) name what they point to in
words. Every question is tagged ``attnbook``, ``chapter-NN``, its kind, and ``revisits-chapter-N``
for each earlier chapter it goes back to, so a quiz can draw spaced-review questions by tag.

The element structure follows what Moodle's own XML exporter writes (tests/test_lms_export.py
compares it with the expected output of Moodle's format tests).
"""

from __future__ import annotations

import argparse
import html
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "_ext"))
from attnbook_questions import (  # noqa: E402
    QUESTIONS,
    _fmt,
    _tolerance_words,
    answer_of,
    load_questions,
)
from attnbook_report import site_commit  # noqa: E402

BOOK = "Attention, Step by Step"
FORMATS = ("moodle",)
ROLE = re.compile(r"\{(?P<role>[a-z:-]+)\}`(?P<target>[^`]+)`")


def book_macros(root: Path = ROOT) -> dict[str, str]:
    """The TeX macros the site's MathJax defines (_config.yml), name -> replacement."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    macros = config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    for name, body in macros.items():
        if not isinstance(body, str):
            raise ValueError(f"macro \\{name} takes arguments ({body!r}); the export expands "
                             "only macros without arguments")
    return dict(macros)


def expand_macros(tex: str, macros: dict[str, str]) -> str:
    """``tex`` with every book macro replaced by its definition (repeatedly, for nested ones).

    ``\\vq_i`` becomes ``\\mathbf{q}_i``; ``\\vqx`` (another command) is left alone.
    """
    if not macros:
        return tex
    names = sorted(macros, key=len, reverse=True)
    pattern = re.compile(r"\\(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z])")
    for _ in range(10):
        new = pattern.sub(lambda m: macros[m.group(1)], tex)
        if new == tex:
            return tex
        tex = new
    raise ValueError(f"the book's macros expand without end in {tex!r}")


def _chapter_of(path: Path) -> str:
    number = re.match(r"(\d+)_", path.name)
    return f"chapter {int(number.group(1))}" if number else path.stem.replace("_", " ")


def describe_label(label: str, root: Path = ROOT) -> str:
    """What a cross-reference target is, in words: "an exercise of chapter 10", "an equation of
    chapter 13", or a section's heading. Raises ValueError for a label no page defines."""
    for page in sorted((root / "book").glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for k, line in enumerate(lines):
            if line.strip() == f":label: {label}":
                opener = lines[k - 1] if k else ""
                kind = re.search(r"\{(\w+)\}", opener)
                kind = kind.group(1) if kind else "item"
                word = {"math": "an equation", "exercise": "an exercise",
                        "figure": "a figure", "prf:theorem": "a theorem"}.get(kind, f"a {kind}")
                return f"{word} of {_chapter_of(page)}"
            if line.strip() == f"({label})=":
                heading = next((x for x in lines[k + 1:] if x.startswith("#")), "")
                return f"“{heading.lstrip('#').strip()}” ({_chapter_of(page)})"
    raise ValueError(f"no page of book/ defines the label {label!r}")


def _resolve_roles(text: str, where: str) -> str:
    def one(m: re.Match) -> str:
        role, target = m.group("role"), m.group("target")
        explicit = re.match(r"(.+?)\s*<([^>]+)>$", target)
        if role == "ref" and explicit:
            return explicit.group(1)
        if role in ("ref", "eq", "numref"):
            return describe_label(target)
        raise ValueError(f"{where}: the role {{{role}}} has no LMS form; expected one of "
                         "{ref}, {eq}, {numref}")
    return ROLE.sub(one, text)


class Renderer:
    """MyST prose of a question file -> HTML that Moodle shows, math for its MathJax filter."""

    def __init__(self, root: Path = ROOT):
        self.macros = book_macros(root)
        self.md = MarkdownIt("commonmark", {"html": False})
        dollarmath_plugin(self.md, allow_space=True, allow_digits=True,
                          renderer=self._math)

    def _math(self, content: str, options: dict) -> str:
        tex = html.escape(expand_macros(content.strip(), self.macros), quote=False)
        return f"\\[{tex}\\]" if options.get("display_mode") else f"\\({tex}\\)"

    def block(self, text: str, where: str = "") -> str:
        """Prose (one or more paragraphs, code fences) as HTML."""
        return self.md.render(_resolve_roles(str(text), where)).strip()

    def inline(self, text: str, where: str = "") -> str:
        """One paragraph of prose without its ``<p>`` (for an answer option)."""
        out = self.block(text, where)
        single = re.fullmatch(r"<p>(.*)</p>", out, re.S)
        return single.group(1) if single and "<p>" not in single.group(1) else out


def _text(parent: ET.Element, tag: str, value: str, fmt: str | None = None) -> ET.Element:
    """``<tag format="fmt"><text>value</text></tag>``, Moodle's wrapper for every text field."""
    el = ET.SubElement(parent, tag, {"format": fmt} if fmt else {})
    ET.SubElement(el, "text").text = value
    return el


def _simple(parent: ET.Element, tag: str, value: str) -> None:
    ET.SubElement(parent, tag).text = value


def _header(q_el: ET.Element, name: str, text: str, idnumber: str, penalty: str) -> None:
    _text(q_el, "name", name)
    _text(q_el, "questiontext", text, "html")
    _text(q_el, "generalfeedback", "", "html")
    _simple(q_el, "defaultgrade", "1")
    _simple(q_el, "penalty", penalty)
    _simple(q_el, "hidden", "0")
    _simple(q_el, "idnumber", idnumber)


def _answer(q_el: ET.Element, fraction: int, text: str, feedback: str, fmt: str,
            tolerance: str | None = None) -> None:
    el = ET.SubElement(q_el, "answer", {"fraction": str(fraction), "format": fmt})
    ET.SubElement(el, "text").text = text
    _text(el, "feedback", feedback, "html")
    if tolerance is not None:
        _simple(el, "tolerance", tolerance)


def _tags(q_el: ET.Element, names: list[str]) -> None:
    tags = ET.SubElement(q_el, "tags")
    for name in names:
        _text(tags, "tag", name)


def chapter_title(chapter: dict, root: Path = ROOT) -> str:
    """The chapter's heading, read from its page ("The causal mask")."""
    page = (root / chapter["page"]).read_text(encoding="utf-8")
    heading = re.search(r"^# (.+)$", page, re.M)
    return heading.group(1).strip() if heading else Path(chapter["page"]).stem


def category_path(chapter: dict, root: Path = ROOT) -> str:
    """Moodle's category path for a chapter's questions (a ``/`` in a name would nest)."""
    title = chapter_title(chapter, root).replace("/", "-")
    return f"$course$/{BOOK}/{int(chapter['chapter']):02d} {title}"


def moodle_questions(path: Path, quiz: ET.Element, render: Renderer, commit: str,
                     root: Path = ROOT) -> int:
    """Append one chapter's category and questions to ``quiz``; returns the number of questions.

    Args:
        path: the chapter's question file (book/questions/NN_name.yaml).
        quiz: the ``<quiz>`` element to append to.
        render: the prose renderer.
        commit: the commit the questions were exported from (named in the category's info).
        root: the repository (for the labs whose glued values answer predict questions).

    Returns:
        How many questions were written.
    """
    chapter = load_questions(path)
    number = int(chapter["chapter"])
    cat = ET.SubElement(quiz, "question", {"type": "category"})
    _text(cat, "category", category_path(chapter, root))
    _text(cat, "info", f"Retrieval questions of chapter {number} of {BOOK} "
                       f"({chapter['page']}), exported from commit {commit}.", "plain_text")
    _simple(cat, "idnumber", "")
    for k, q in enumerate(chapter["questions"], start=1):
        where = f"{path.name}, question {q['id']!r}"
        name = f"{number:02d}.{k} {q['id']}"
        idnumber = f"attnbook-{number:02d}-{q['id']}"
        tags = ["attnbook", f"chapter-{number:02d}", q["kind"]]
        tags += [f"revisits-chapter-{int(c):02d}" for c in q.get("revisits", [])]
        prompt = render.block(q["prompt"], where)
        if q.get("revisits"):
            back = ", ".join(str(c) for c in q["revisits"])
            s = "s" if len(q["revisits"]) > 1 else ""
            prompt += f"\n<p><em>Goes back to chapter{s} {back}.</em></p>"
        if q["kind"] == "choice":
            q_el = ET.SubElement(quiz, "question", {"type": "multichoice"})
            _header(q_el, name, prompt, idnumber, "0.3333333")
            _simple(q_el, "single", "true")
            _simple(q_el, "shuffleanswers", "true")
            _simple(q_el, "answernumbering", "abc")
            _simple(q_el, "showstandardinstruction", "0")
            _text(q_el, "correctfeedback", "", "html")
            _text(q_el, "partiallycorrectfeedback", "", "html")
            _text(q_el, "incorrectfeedback", "", "html")
            for option in q["options"]:
                _answer(q_el, 100 if option.get("correct") else 0,
                        render.inline(option["text"], where),
                        render.block(option["explanation"], where), "html")
            _tags(q_el, tags)
            continue
        text, value = answer_of(q, chapter, root)
        lead = "<p><strong>Predict the output.</strong></p>\n" if q["kind"] == "predict" else ""
        unit = q.get("unit", "")
        if value is None:  # the lab prints a name: compared exactly
            q_el = ET.SubElement(quiz, "question", {"type": "shortanswer"})
            _header(q_el, name, lead + prompt + "\n<p><em>Your answer: a name, compared "
                    "exactly (capitals count).</em></p>", idnumber, "0.3333333")
            _simple(q_el, "usecase", "1")
            _answer(q_el, 100, text, render.block(q["explanation"], where), "plain_text")
            _answer(q_el, 0, "*", render.block(q["hint"], where), "plain_text")
            _tags(q_el, tags)
            continue
        tolerance = _fmt(q.get("tolerance", 0))
        words = _tolerance_words(q) + ("; type the number only" if unit else "")
        q_el = ET.SubElement(quiz, "question", {"type": "numerical"})
        _header(q_el, name, lead + prompt + f"\n<p><em>Your answer: {html.escape(words)}."
                "</em></p>", idnumber, "0.3333333")
        _answer(q_el, 100, repr(value) if not value.is_integer() else str(int(value)),
                render.block(q["explanation"], where), "plain_text", tolerance)
        for mistake in q.get("mistakes", []):
            _answer(q_el, 0, _fmt(mistake["value"]), render.block(mistake["explanation"], where),
                    "plain_text", tolerance)
        _answer(q_el, 0, "*", render.block(q["hint"], where), "plain_text", "0")
        _tags(q_el, tags)
    return len(chapter["questions"])


def to_xml(quiz: ET.Element) -> str:
    ET.indent(quiz, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(quiz, encoding="unicode",
                                                                  short_empty_elements=False) + "\n"


def question_files(chapters: list[int] | None = None) -> list[Path]:
    files = sorted(p for p in QUESTIONS.glob("*.yaml"))
    if chapters is not None:
        wanted = set(chapters)
        files = [p for p in files if int(p.name.split("_")[0]) in wanted]
        missing = wanted - {int(p.name.split("_")[0]) for p in files}
        if missing:
            raise ValueError(f"no question file for chapter(s) {sorted(missing)} in {QUESTIONS}")
    return files


def export_moodle(out: Path, chapters: list[int] | None = None, root: Path = ROOT) -> list[Path]:
    """Write one Moodle XML file per chapter and one with every chapter into ``out``.

    Args:
        out: the folder to write into (created).
        chapters: the chapter numbers to export; all by default.
        root: the repository.

    Returns:
        The files written, the all-chapters file last.
    """
    out.mkdir(parents=True, exist_ok=True)
    render = Renderer(root)
    commit = site_commit(root)
    written = []
    everything = ET.Element("quiz")
    for path in question_files(chapters):
        quiz = ET.Element("quiz")
        moodle_questions(path, quiz, render, commit, root)
        everything.extend(list(quiz))
        target = out / f"{path.stem}.xml"
        target.write_text(to_xml(quiz), encoding="utf-8")
        written.append(target)
    target = out / "all_chapters.xml"
    target.write_text(to_xml(everything), encoding="utf-8")
    written.append(target)
    return written


def review_table(files: list[Path] | None = None) -> str:
    """The course guide's spaced-review table: for each chapter that later questions go back
    to, those questions, as "chapter (question number)" in the order the pages show them."""
    back: dict[int, list[str]] = {}
    pages: dict[int, str] = {}
    for path in files or question_files():
        chapter = load_questions(path)
        pages[int(chapter["chapter"])] = Path(chapter["page"]).stem
        for k, q in enumerate(chapter["questions"], start=1):
            for earlier in q.get("revisits", []):
                back.setdefault(int(earlier), []).append(f"{chapter['chapter']} (Q{k})")
    rows = ["| chapter | questions of later chapters that go back to it |", "|---|---|"]
    rows += [f"| {{doc}}`{pages[c]}` | {', '.join(back[c])} |" for c in sorted(back)]
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--format", choices=FORMATS, default="moodle")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "lms")
    parser.add_argument("--chapters", type=int, nargs="+", help="chapter numbers (default all)")
    parser.add_argument("--review-table", action="store_true",
                        help="print the course guide's spaced-review table instead")
    args = parser.parse_args(argv)
    if args.review_table:
        print(review_table(), end="")
        return
    try:
        written = export_moodle(args.out / args.format, args.chapters)
    except (ValueError, KeyError) as err:
        sys.exit(f"export_questions: {err}")
    for path in written:
        print(f"wrote {path}")

