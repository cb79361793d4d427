"""The Moodle XML export of the chapters' questions (scripts/export_questions.py).

Moodle's question XML has no official schema. What Moodle writes and reads is pinned by its own
format tests instead, so the export is compared with their published examples: every element
and attribute the export writes must appear, with the same parent, in the XML that Moodle's
exporter produces for the same question type (the expected output of
``question/format/xml/tests/xmlformat_test.php``: ``test_export_multichoice``,
``test_export_numerical``, ``test_export_shortanswer``; tags from ``test_import_description``;
the category from the fixture ``question/format/xml/tests/fixtures/
nested_categories_with_questions.xml``; moodle/moodle at commits 894ee17f53 and 00e93a9939).
tests/moodle_structure.xml holds the element structure of those examples, written out with their
texts left out (the element and attribute names and the type/format/fraction values). The
children of each question must also come in the order Moodle writes them.

Then the content: every question of every chapter is exported once, with the right kind, the
right answer (the same value the site checks against: the lab's glued value for predictions),
its tolerance, feedback on every answer, the book's TeX macros expanded, and tags for the
chapters it goes back to; the course guide's spaced-review table agrees with the files.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "_ext"))
from attnbook_questions import answer_of, load_questions  # noqa: E402
from grading import export_questions  # noqa: E402

FILES = export_questions.question_files()

# The structure of Moodle's published examples (texts left out; sources in the docstring).
MOODLE_EXAMPLES = (ROOT / "tests" / "moodle_structure.xml").read_text(encoding="utf-8")

# Values of the format attribute that Moodle's examples use (plain_text, html, markdown and
# moodle_auto_format appear in the fixtures; html is the one the question text uses).
MOODLE_FORMATS = {"html", "plain_text", "markdown", "moodle_auto_format"}


def _shapes(el: ET.Element, path: str, into: set) -> None:
    """Every (parent path, element, attribute names) below ``el``."""
    for child in el:
        into.add((path, child.tag, frozenset(child.attrib)))
        _shapes(child, f"{path}/{child.tag}", into)


def reference_shapes() -> dict[str, set]:
    """Per question type, the shapes Moodle's examples have; tags may go on any type."""
    quiz = ET.fromstring(MOODLE_EXAMPLES)
    out: dict[str, set] = {}
    for q in quiz:
        _shapes(q, "question", out.setdefault(q.get("type"), set()))
    tags = {s for s in out["description"] if s[0].startswith("question/tags") or s[1] == "tags"}
    for kind in out:
        out[kind] |= tags
    return out


def reference_order() -> dict[str, list[str]]:
    quiz = ET.fromstring(MOODLE_EXAMPLES)
    return {q.get("type"): list(dict.fromkeys(c.tag for c in q)) for q in quiz}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lms")
    export_questions.export_moodle(out)
    return out


@pytest.fixture(scope="module")
def everything(exported) -> ET.Element:
    return ET.parse(exported / "all_chapters.xml").getroot()


def _questions(root: ET.Element) -> list[ET.Element]:
    return [q for q in root if q.get("type") != "category"]


def test_reference_examples_parse():
    shapes = reference_shapes()
    assert set(shapes) == {"category", "multichoice", "numerical", "shortanswer", "description"}
    assert ("question/answer", "tolerance", frozenset()) in shapes["numerical"]


def unknown_shapes(q: ET.Element, shapes: dict[str, set]) -> set:
    """What a question has that Moodle's example of its type has not (all of it, for a type
    no example shows)."""
    ours: set = set()
    _shapes(q, "question", ours)
    return ours - shapes.get(q.get("type"), set())


def test_every_element_and_attribute_appears_in_moodles_examples(everything):
    """The structure check: nothing the export writes is unknown to Moodle's own exporter."""
    shapes = reference_shapes()
    assert everything.tag == "quiz"
    for q in everything:
        kind = q.get("type")
        assert kind in shapes, f"question type {kind!r} is in none of Moodle's examples"
        unknown = unknown_shapes(q, shapes)
        assert not unknown, f"{kind} {q.findtext('name/text')}: not in Moodle's example: {unknown}"
        for el in q.iter():
            if "format" in el.attrib:
                assert el.get("format") in MOODLE_FORMATS
            if "fraction" in el.attrib:
                assert el.get("fraction") in ("0", "100")


def test_the_structure_check_catches_what_moodle_does_not_write():
    shapes = reference_shapes()
    good = ET.fromstring('<question type="numerical"><answer fraction="100" format="plain_text">'
                         '<text>1</text><tolerance>0</tolerance></answer></question>')
    assert not unknown_shapes(good, shapes)
    nested = ET.fromstring('<question type="numerical"><answer fraction="100" format="html">'
                           '<text>1</text>'
                           '</answer><tolerance>0</tolerance></question>')  # wrong parent
    assert unknown_shapes(nested, shapes) == {("question", "tolerance", frozenset())}
    attr = ET.fromstring('<question type="multichoice"><answer fraction="100" weight="1">'
                         '<text>1</text></answer></question>')
    assert unknown_shapes(attr, shapes)


def test_children_come_in_moodles_order(everything):
    order = reference_order()
    for q in everything:
        ours = [t for t in dict.fromkeys(c.tag for c in q) if t != "tags"]
        ref = [t for t in order[q.get("type")] if t in ours]
        assert ours == ref, f"{q.findtext('name/text')}: {ours} is not in Moodle's order {ref}"


def test_a_file_per_chapter_and_one_with_all(exported, everything):
    files = sorted(p.name for p in exported.glob("*.xml"))
    assert files == sorted([p.stem + ".xml" for p in FILES] + ["all_chapters.xml"])
    total = sum(len(load_questions(p)["questions"]) for p in FILES)
    assert len(_questions(everything)) == total
    categories = [q.findtext("category/text") for q in everything if q.get("type") == "category"]
    assert len(categories) == len(FILES) == len(set(categories))
    assert all(c.startswith("$course$/Attention, Step by Step/") for c in categories)
    ids = [q.findtext("idnumber") for q in _questions(everything)]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_question_keeps_its_answer_and_feedback(exported, path):
    chapter = load_questions(path)
    root = ET.parse(exported / f"{path.stem}.xml").getroot()
    questions = _questions(root)
    assert len(questions) == len(chapter["questions"])
    for q, el in zip(chapter["questions"], questions):
        where = f"{path.name}:{q['id']}"
        assert el.findtext("idnumber") == f"attnbook-{chapter['chapter']:02d}-{q['id']}"
        answers = el.findall("answer")
        for a in answers:  # every answer, right or wrong, says why
            assert (a.findtext("feedback/text") or "").strip(), f"{where}: an answer lacks feedback"
        tags = {t.text for t in el.findall("tags/tag/text")}
        assert {f"revisits-chapter-{c:02d}" for c in q.get("revisits", [])} <= tags
        assert {"attnbook", f"chapter-{chapter['chapter']:02d}", q["kind"]} <= tags
        if q["kind"] == "choice":
            assert el.get("type") == "multichoice"
            assert el.findtext("single") == "true"
            assert len(answers) == len(q["options"])
            right = [k for k, a in enumerate(answers) if a.get("fraction") == "100"]
            assert right == [k for k, o in enumerate(q["options"]) if o.get("correct")], where
            continue
        text, value = answer_of(q, chapter, ROOT)
        if value is None:
            assert el.get("type") == "shortanswer" and el.findtext("usecase") == "1"
            assert answers[0].findtext("text") == text
            assert answers[-1].findtext("text") == "*"
            continue
        assert el.get("type") == "numerical", where
        assert answers[0].get("fraction") == "100"
        assert math.isclose(float(answers[0].findtext("text")), value, rel_tol=1e-12)
        assert float(answers[0].findtext("tolerance")) == float(q.get("tolerance", 0))
        mistakes = [float(a.findtext("text")) for a in answers[1:-1]]
        assert mistakes == [float(m["value"]) for m in q.get("mistakes", [])]
        assert answers[-1].findtext("text") == "*" and answers[-1].get("fraction") == "0"
        if q["kind"] == "predict":
            assert "Predict the output." in el.findtext("questiontext/text")


def test_math_is_plain_tex_in_moodles_delimiters(everything):
    macros = export_questions.book_macros()
    pattern = re.compile(r"\\(" + "|".join(map(re.escape, macros)) + r")(?![A-Za-z])")
    texts = [el.text or "" for el in everything.iter("text")]
    maths = [m for t in texts for m in re.findall(r"\\\((.*?)\\\)|\\\[(.*?)\\\]", t, re.S)]
    assert len(maths) > 100  # the questions are full of formulas
    for t in texts:
        assert not pattern.search(t), f"a book macro left in: {t[:200]}"
        assert t.count("\\(") == t.count("\\)") and t.count("\\[") == t.count("\\]")
        assert not re.search(r"\{(eq|ref|numref|doc)\}`", t), f"a MyST role left in: {t[:200]}"
    # the HTML of each field is well-formed (Moodle's editor keeps it as given)
    for t in texts:
        if "<" in t:
            ET.fromstring(f"<div>{t}</div>")


def test_macros_expand_to_plain_tex():
    macros = export_questions.book_macros()
    got = export_questions.expand_macros(r"\Q\K^\top \vq_i \Wq x \vqx", macros)
    assert got == r"\mathbf{Q}\mathbf{K}^\top \mathbf{q}_i \mathbf{W}_{\!q} x \vqx"


def test_cross_references_name_their_target():
    assert export_questions.describe_label("ex-online-merge") == "an exercise of chapter 10"
    assert export_questions.describe_label("eq-mha-sum-scores") == "an equation of chapter 13"
    with pytest.raises(ValueError, match="no page of book/ defines the label 'no-such'"):
        export_questions.describe_label("no-such")
    with pytest.raises(ValueError, match=r"the role \{cite\} has no LMS form"):
        export_questions.Renderer().block("see {cite}`x`", "here")


def test_command_line_writes_the_chapters_asked_for(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_questions.py"),
                          "--format", "moodle", "--out", str(tmp_path), "--chapters", "4", "6"],
                         capture_output=True, text=True, check=True)
    assert "04_causal_mask.xml" in out.stdout
    names = sorted(p.name for p in (tmp_path / "moodle").glob("*.xml"))
    assert names == ["04_causal_mask.xml", "06_softmax.xml", "all_chapters.xml"]
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_questions.py"),
                          "--out", str(tmp_path), "--chapters", "99"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "no question file for chapter(s) [99]" in bad.stderr


def test_course_guide_lists_the_spaced_review_questions():
    """The guide's spaced-review table is what the question files' ``revisits`` say."""
    guide = (ROOT / "book" / "course_guide.md").read_text(encoding="utf-8")
    start = guide.index("<!-- spaced review: begin -->")
    end = guide.index("<!-- spaced review: end -->")
    assert guide[start:end].split("-->", 1)[1].strip() == export_questions.review_table().strip(), (
        "the spaced-review table of book/course_guide.md is stale: paste the output of "
        "`python scripts/export_questions.py --review-table` between its markers")
