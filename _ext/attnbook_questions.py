"""Sphinx extension: retrieval questions with feedback on the static site, without a kernel.

Each chapter's questions have one source, ``book/questions/<chapter>.yaml`` (schema:
``book/questions/schema.json``). A chapter shows them with one directive::

    ```{questions} questions/04_causal_mask.yaml
    ```

Three kinds of question:

- ``choice``: one correct option among several; every wrong option carries the explanation of the
  misconception behind it, shown when a reader picks it;
- ``numeric``: a number within a stated tolerance (``answer``, ``tolerance``); ``check`` is the
  Python expression tests/test_questions.py evaluates against the library, so the answer cannot
  go stale; ``mistakes`` name the misconception behind a likely wrong number;
- ``predict``: "what does this print?": the answer is a value a lab glues (``glue``, in the lab
  ``lab``), read here at build time from the executed notebook's stored glue outputs, so the
  question and the lab cannot drift apart.

Why not jupyterquiz (the library of the field)? Measured with its 2.9.6.4 sources and axe-core
4.14: its numeric input has no label (axe ``label``, critical), its feedback is not announced (no
live region), its MathJax fallback loads from cdn.jsdelivr.net, and on a static MyST page it only
renders from an executed code cell. Here the markup is plain HTML: a fieldset with a legend around
each radio group, a labelled text input, a Check button (Enter works too), and a ``role="status"``
feedback region; ``_assets/attnbook-questions.js`` marks the answer in the browser, offline.
"""

from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.statemachine import StringList

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "book" / "questions"
SCHEMA = QUESTIONS / "schema.json"
GLUE_MIME = "application/papermill.record/text/plain"


def load_questions(path: Path) -> dict:
    """One chapter's question file, parsed (YAML or JSON)."""
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def glue_values(notebook: Path) -> dict[str, str]:
    """Every value a lab glued, as the text myst-nb pastes (the scrapbook outputs of its cells)."""
    data = json.loads(Path(notebook).read_text(encoding="utf-8"))
    found = {}
    for cell in data.get("cells", []):
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook")
            if not scrap:
                continue
            mime = scrap.get("mime_prefix", "") + "text/plain"
            text = output.get("data", {}).get(mime)
            if text is None:
                continue
            text = "".join(text) if isinstance(text, list) else text
            try:  # stored as the repr of the formatted string
                text = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                pass
            found[scrap["name"]] = str(text)
    return found


def parse_number(text: str) -> float:
    """A glued number as a float: "1,769,472" -> 1769472, "16.5%" -> 16.5, "2.4e-07"."""
    cleaned = text.strip().replace(",", "").rstrip("%").strip()
    return float(cleaned)


def predicted_answer(question: dict, chapter: dict, root: Path = ROOT) -> str:
    """The answer of a predict-the-output question: the glued text (or the part ``extract``
    selects), read from the lab's stored outputs. Raises KeyError naming a missing key."""
    lab = question.get("lab", chapter.get("lab"))
    values = glue_values(root / lab)
    key = question["glue"]
    if key not in values:
        raise KeyError(f"{lab} glues no key {key!r} (question {question['id']!r})")
    text = values[key]
    if "extract" in question:
        match = re.search(question["extract"], text)
        if not match:
            raise KeyError(f"{question['extract']!r} does not match {key}={text!r}")
        text = match.group(1)
    return text


def answer_of(question: dict, chapter: dict, root: Path = ROOT) -> tuple[str, float | None]:
    """(answer as text, answer as a number or None for text answers) of a numeric or predict
    question."""
    if question["kind"] == "numeric":
        return _fmt(question["answer"]), float(question["answer"])
    text = predicted_answer(question, chapter, root)
    if question.get("answer_type", "number") == "text":
        return text, None
    return text, parse_number(text)


def _fmt(value) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _tolerance_words(question: dict) -> str:
    tol = question.get("tolerance", 0)
    unit = question.get("unit", "")
    if question.get("answer_type") == "text":
        return "text, compared exactly"
    if not tol:
        return f"a number, exact{', in ' + unit if unit else ''}"
    return f"a number, within ±{_fmt(tol)}{' ' + unit if unit else ''}"


class questions_block(nodes.General, nodes.Element):
    """Container for a chapter's questions (rendered as raw HTML around parsed prose)."""


def _raw(text: str) -> nodes.raw:
    return nodes.raw("", text, format="html")


class QuestionsDirective(Directive):
    required_arguments = 1
    has_content = False
    option_spec = {"title": directives.unchanged}

    def _parse_block(self, text: str) -> list[nodes.Node]:
        box = nodes.container()
        self.state.nested_parse(StringList(str(text).splitlines(), source="questions"),
                                self.content_offset, box)
        return list(box.children)

    def _parse_inline(self, text: str) -> list[nodes.Node]:
        """Prose without its paragraph (for a legend or a label: phrasing content only)."""
        parsed = self._parse_block(text)
        if len(parsed) == 1 and isinstance(parsed[0], nodes.paragraph):
            return list(parsed[0].children)
        return [nodes.inline("", "", *parsed)]

    def run(self):
        env = self.state.document.settings.env
        rel, path = env.relfn2path(self.arguments[0], env.docname)
        path = Path(path)
        env.note_dependency(rel)
        chapter = load_questions(path)
        slug = path.stem.split("_")[0]
        labs = {q.get("lab", chapter.get("lab")) for q in chapter["questions"]
                if q["kind"] == "predict"}
        for lab in labs:
            env.note_dependency(str(Path(env.srcdir) / lab))
        root = Path(env.srcdir)
        title = self.options.get("title", chapter.get("title", "Check your understanding"))
        block = questions_block()
        head = f"qs-{slug}"
        block += _raw(
            f'<section class="attnbook-questions" aria-labelledby="{head}" '
            f'data-chapter="{html.escape(str(chapter["chapter"]))}">'
            f'<h2 id="{head}">{html.escape(title)}</h2>'
            '<p class="attnbook-questions-intro">Answer each question, then press '
            '<em>Check</em> (or Enter). The feedback appears below the question; '
            'nothing is sent anywhere.</p>')
        for number, question in enumerate(chapter["questions"], start=1):
            block += self._question(question, chapter, slug, number, root)
        block += _raw("</section>")
        return [block]

    def _revisit_tag(self, question: dict) -> str:
        back = question.get("revisits") or []
        if not back:
            return ""
        words = ", ".join(str(c) for c in back)
        return (f'<p class="attnbook-q-revisit">Goes back to chapter'
                f'{"s" if len(back) > 1 else ""} {words}.</p>')

    def _question(self, q: dict, chapter: dict, slug: str, number: int, root: Path):
        qid = f"q-{slug}-{q['id']}"
        out: list[nodes.Node] = []
        kind = q["kind"]
        if kind == "choice":
            correct = [k for k, o in enumerate(q["options"]) if o.get("correct")]
            out.append(_raw(
                f'<form class="attnbook-q" id="{qid}" data-kind="choice" '
                f'data-correct="{correct[0]}" novalidate><fieldset>'
                f'<legend><span class="attnbook-q-num">Question {number}.</span> '))
            out.extend(self._parse_inline(q["prompt"]))
            out.append(_raw("</legend>" + self._revisit_tag(q)))
            for k, option in enumerate(q["options"]):
                out.append(_raw(
                    f'<div class="attnbook-q-option"><input type="radio" name="{qid}" '
                    f'id="{qid}-o{k}" value="{k}"><label for="{qid}-o{k}">'))
                out.extend(self._parse_inline(option["text"]))
                out.append(_raw("</label></div>"))
            out.append(_raw('</fieldset><button type="submit" class="attnbook-q-check">Check'
                            '</button><div class="attnbook-q-feedback" role="status">'
                            '<p class="attnbook-q-verdict"></p>'))
            for k, option in enumerate(q["options"]):
                why = option.get("explanation", "")
                out.append(_raw(f'<div class="attnbook-q-why" data-option="{k}" hidden>'))
                out.extend(self._parse_block(why))
                out.append(_raw("</div>"))
            out.append(_raw("</div></form>"))
            return out

        text, value = answer_of(q, chapter, root)
        answer_type = "text" if value is None else "number"
        data = (f'data-answer="{html.escape(text, quote=True)}" '
                f'data-answer-type="{answer_type}" '
                f'data-tolerance="{html.escape(_fmt(q.get("tolerance", 0)))}" '
                f'data-unit="{html.escape(q.get("unit", ""), quote=True)}"')
        if value is not None:
            data += f' data-value="{value!r}"'
        out.append(_raw(
            f'<form class="attnbook-q" id="{qid}" data-kind="{kind}" {data} novalidate>'
            f'<div class="attnbook-q-prompt" id="{qid}-prompt">'
            f'<p class="attnbook-q-lead"><span class="attnbook-q-num">Question {number}.</span>'
            f'{" Predict the output." if kind == "predict" else ""}</p>'))
        out.extend(self._parse_block(q["prompt"]))
        out.append(_raw("</div>" + self._revisit_tag(q)))
        label = "What the lab prints" if kind == "predict" else "Your answer"
        out.append(_raw(
            f'<div class="attnbook-q-entry"><label for="{qid}-input">{label} '
            f'<span class="attnbook-q-format">({html.escape(_tolerance_words(q))})</span>'
            f'</label> <input type="text" id="{qid}-input" name="{qid}" autocomplete="off" '
            f'spellcheck="false" aria-describedby="{qid}-prompt"'
            f'{" inputmode=" + chr(34) + "decimal" + chr(34) if answer_type == "number" else ""}>'
            f'<button type="submit" class="attnbook-q-check">Check</button></div>'
            '<div class="attnbook-q-feedback" role="status"><p class="attnbook-q-verdict"></p>'
            '<div class="attnbook-q-why" data-when="right" hidden>'))
        out.extend(self._parse_block(q["explanation"]))
        out.append(_raw('</div><div class="attnbook-q-why" data-when="wrong" hidden>'))
        out.extend(self._parse_block(q["hint"]))
        out.append(_raw("</div>"))
        for mistake in q.get("mistakes", []):
            out.append(_raw(
                f'<div class="attnbook-q-why" data-when="mistake" '
                f'data-mistake="{html.escape(_fmt(mistake["value"]))}" hidden>'))
            out.extend(self._parse_block(mistake["explanation"]))
            out.append(_raw("</div>"))
        out.append(_raw("</div></form>"))
        return out


def visit_block(self, node):
    pass


def depart_block(self, node):
    pass


def setup(app):
    app.add_node(questions_block, html=(visit_block, depart_block),
                 latex=(visit_block, depart_block), text=(visit_block, depart_block))
    app.add_directive("questions", QuestionsDirective)
    app.add_css_file("attnbook-questions.css")
    app.add_js_file("attnbook-questions.js", loading_method="defer")
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
