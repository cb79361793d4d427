"""The chapters' retrieval questions: valid, complete, and with answers that cannot go stale.

Every question file (book/questions/*.yaml) is validated by book/questions/schema.json: a choice
question needs exactly one correct option and an explanation for every option, numeric and
predict questions a stated tolerance, an explanation and a hint. Every numeric answer is
recomputed from the library (its ``check`` expression); every predict-the-output answer is read
from its lab's stored glue output, exactly as the site's directive reads it, and recomputed too
where it has a ``check``. The browser side is tests/test_questions_browser.py.

The explanations are prose, so they are reviewed rather than computed. How to review (for
anyone who writes or edits a question):

1. ``python scripts/review_questions.py`` prints each chapter's state: ``ok``, ``UNSTAMPED`` or
   how many texts are stale (changed since their review) or new.
2. ``python scripts/review_questions.py show NN`` prints the chapter's stale and new texts in
   their context (prompt, option, whether it is the correct one, the answer). Read each as a
   sceptical expert: is it true as written, for every case the prompt allows? Fix what is not.
   Where a text states a checkable fact (a number, a PyTorch behaviour), add a ``check:`` field
   to its option or mistake: Python that this file runs (``test_explanation_checks_hold``).
3. ``python scripts/review_questions.py stamp NN --reviewer NAME --note "what you checked"``
   records a hash of each reviewed text with your note in ``book/questions/reviewed/NN.json``
   (one file per chapter). Commit it with the question file.

``test_reviewed_explanations_are_current`` then fails for a chapter whose stamp has a stale,
new or vanished entry (editing a text, its option, its prompt or its answer makes it stale);
``test_every_chapter_is_reviewed`` fails while a chapter has no stamp file at all, and names them.
"""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

import attnbook
import attnbook.masks
import attnbook.softmax

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
from attnbook_questions import (  # noqa: E402
    SCHEMA,
    answer_of,
    glue_values,
    load_questions,
    parse_number,
    predicted_answer,
)

QUESTIONS = ROOT / "book" / "questions"
FILES = sorted(p for p in QUESTIONS.iterdir() if p.suffix in (".yaml", ".yml", ".json")
               and p.name != SCHEMA.name)
# Chapters whose questions are written: every chapter, 0 to 22 (issue #30; chapter 22: issue #45).
# Each must have a file, and each file must belong to a chapter page.
DONE = range(0, 23)


def _validator():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _all():
    return [(path, load_questions(path)) for path in FILES]


def _ids(path_and_doc):
    return path_and_doc[0].stem


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_question_file_matches_schema(path):
    errors = sorted(_validator().iter_errors(load_questions(path)), key=lambda e: e.path)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message[:200]}" for e in errors)


def _choice_doc():
    return {"chapter": 4, "page": "book/04_causal_mask.md", "questions": [
        {"id": f"q{k}", "kind": "choice", "prompt": "Which?", "options": [
            {"text": "a", "correct": True, "explanation": "Right, because of the mask's rule."},
            {"text": "b", "explanation": "No: tril marks what is allowed, not blocked."},
            {"text": "c", "explanation": "No: padding is a separate mask of its own."}]}
        for k in range(4)]}


def test_schema_rejects_a_wrong_option_without_explanation():
    validator = _validator()
    good = _choice_doc()
    assert not list(validator.iter_errors(good))
    bad = copy.deepcopy(good)
    del bad["questions"][2]["options"][1]["explanation"]
    assert list(validator.iter_errors(bad)), "a wrong option without explanation passed"
    short = copy.deepcopy(good)
    short["questions"][0]["options"][2]["explanation"] = "No."
    assert list(validator.iter_errors(short)), "a one-word explanation passed"


def test_schema_rejects_zero_or_two_correct_options_and_numbers_without_tolerance():
    validator = _validator()
    two = _choice_doc()
    two["questions"][0]["options"][1]["correct"] = True
    assert list(validator.iter_errors(two))
    none = _choice_doc()
    del none["questions"][0]["options"][0]["correct"]
    assert list(validator.iter_errors(none))
    numeric = _choice_doc()
    numeric["questions"][0] = {"id": "n", "kind": "numeric", "prompt": "How many?", "answer": 15,
                               "check": "15", "explanation": "Because the triangle has 15.",
                               "hint": "Count the entries above the diagonal."}
    assert list(validator.iter_errors(numeric)), "a numeric answer without tolerance passed"
    numeric["questions"][0]["tolerance"] = 0
    assert not list(validator.iter_errors(numeric))


def test_every_done_chapter_has_its_questions_on_its_page():
    by_chapter = {doc["chapter"]: (path, doc) for path, doc in _all()}
    missing = [c for c in DONE if c not in by_chapter]
    assert not missing, f"chapters without a question file: {missing}"
    for path, doc in by_chapter.values():
        page = ROOT / doc["page"]
        assert page.exists(), f"{path.name}: no page {doc['page']}"
        assert page.stem == path.stem, f"{path.name} belongs to {page.name}: name it the same"
        text = page.read_text(encoding="utf-8")
        directive = f"```{{questions}} questions/{path.name}\n```"
        assert text.count(directive) == 1, f"{page.name} does not show {path.name} once"


@pytest.mark.parametrize("path_doc", _all(), ids=_ids)
def test_chapter_mixes_kinds_and_goes_back(path_doc):
    path, doc = path_doc
    kinds = {q["kind"] for q in doc["questions"]}
    assert kinds == {"choice", "numeric", "predict"}, f"{path.name} has only {sorted(kinds)}"
    ids = [q["id"] for q in doc["questions"]]
    assert len(ids) == len(set(ids)), f"{path.name}: repeated question ids"
    back = [c for q in doc["questions"] for c in q.get("revisits", [])]
    assert all(c < doc["chapter"] for c in back), f"{path.name} revisits a later chapter: {back}"
    if doc["chapter"] > 0:  # chapter 0 has nothing before it
        going_back = [q for q in doc["questions"] if q.get("revisits")]
        assert 1 <= len(going_back) <= 2, (
            f"{path.name}: {len(going_back)} questions go back to earlier chapters (want 1-2)")


def _evaluate(expression: str):
    namespace = {"torch": torch, "math": math, "attnbook": attnbook}
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        return eval(expression, namespace)  # noqa: S307 (the repository's own question files)


def _answers():
    for path, doc in _all():
        for q in doc["questions"]:
            if q["kind"] != "choice":
                yield pytest.param(doc, q, id=f"{path.stem}-{q['id']}")


@pytest.mark.parametrize("doc, question", list(_answers()))
def test_answer_is_what_the_library_and_the_lab_compute(doc, question):
    text, value = answer_of(question, doc)
    tolerance = question.get("tolerance", 0)
    if question["kind"] == "numeric":
        computed = float(_evaluate(question["check"]))
        assert abs(computed - value) <= tolerance + 1e-9 * max(1.0, abs(value)), (
            f"the library computes {computed}, the question says {value} ± {tolerance}")
    else:
        # The answer is the lab's glued value, read from the stored outputs (no copy to drift).
        assert "answer" not in question, "a predict answer comes from the lab, never typed"
        lab = ROOT / question.get("lab", doc["lab"])
        assert question["glue"] in glue_values(lab), f"{lab.name} glues no {question['glue']}"
        if value is None:
            assert text and text == text.strip()
        else:
            assert math.isfinite(value)
            if "check" in question:
                computed = float(_evaluate(question["check"]))
                assert abs(computed - value) <= tolerance + 1e-9 * max(1.0, abs(value)), (
                    f"the library computes {computed}; Lab glued {text} (tolerance {tolerance})")
    # A named mistake must not itself count as right.
    for mistake in question.get("mistakes", []):
        if value is not None:
            assert abs(mistake["value"] - value) > tolerance, (
                f"mistake {mistake['value']} is within the tolerance of the answer")


def test_glue_is_read_as_myst_nb_stores_it(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": [
        {"output_type": "display_data", "data": {
            "application/papermill.record/text/plain": "'1,769,472'"},
         "metadata": {"scrapbook": {"name": "k",
                                    "mime_prefix": "application/papermill.record/"}}}]}]}
    path = tmp_path / "lab.ipynb"
    path.write_text(json.dumps(nb))
    assert glue_values(path) == {"k": "1,769,472"}
    assert parse_number("1,769,472") == 1769472 and parse_number("16.5%") == 16.5
    with pytest.raises(KeyError, match="glues no key 'missing'"):
        predicted_answer({"id": "x", "glue": "missing"}, {"lab": "lab.ipynb"}, root=tmp_path)


def test_options_have_words_outside_math():
    """A label that is only a formula has no accessible name (axe-core's label rule)."""
    for path, doc in _all():
        for q in doc["questions"]:
            for option in q.get("options", []):
                words = re.sub(r"\$[^$]*\$", "", option["text"])
                assert re.search(r"[A-Za-z0-9`]", words), (
                    f"{path.name} {q['id']}: option {option['text']!r} is only math")


def test_choice_explanations_name_a_reason():
    """A wrong option's explanation says why, beyond "wrong": it is not the correct one's text."""
    for path, doc in _all():
        for q in doc["questions"]:
            if q["kind"] != "choice":
                continue
            texts = [o["explanation"] for o in q["options"]]
            assert len(set(texts)) == len(texts), f"{path.name} {q['id']}: repeated explanations"
            for option in q["options"]:
                if not option.get("correct"):
                    assert not re.match(r"^(right|correct)\b", option["explanation"], re.I), (
                        f"{path.name} {q['id']}: a wrong option explained as right")


_TEX_COMMAND = re.compile(r"\\([A-Za-z]+)")
_MATH = re.compile(r"\$\$.+?\$\$|\$.+?\$", re.S)


def _tex_commands(text):
    return {c for m in _MATH.finditer(text) for c in _TEX_COMMAND.findall(m.group(0))}


def test_question_math_uses_only_commands_the_site_defines():
    """A TeX command in a question is one of _config.yml's macros or one a chapter page already
    typesets (the browser test checks those pages), so a typo such as \\q for \\vq fails here,
    in seconds, instead of as an undefined macro in the browser test (CI, 2026-12-04, ch. 17)."""
    import yaml
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    macros = set(config["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"])
    known = macros | {"phi"}  # plain TeX Greek used only in questions
    for page in (ROOT / "book").glob("*.md"):
        known |= _tex_commands(page.read_text(encoding="utf-8"))
    for path in FILES:
        unknown = _tex_commands(path.read_text(encoding="utf-8")) - known
        assert not unknown, f"{path.name}: TeX commands no page defines or uses: {sorted(unknown)}"


def test_tex_command_check_catches_an_undefined_macro():
    assert _tex_commands(r"a dot product $\q_i \cdot \vk_j$") == {"q", "cdot", "vk"}


# --- The explanations' review (scripts/review_questions.py; how-to in this module's docstring) ---

sys.path.insert(0, str(ROOT / "scripts"))
import review_questions  # noqa: E402


def _review_status():
    return [review_questions.status_of(c, p) for c, p in review_questions.question_files().items()]


def _stamped_chapters():
    return [pytest.param(c, p, id=p.stem) for c, p in review_questions.question_files().items()
            if review_questions.stamp_path(c).exists()]


@pytest.mark.parametrize("chapter, path", _stamped_chapters())
def test_reviewed_explanations_are_current(chapter, path):
    """Every explanation of a stamped chapter is the text a reviewer read and stamped."""
    st = review_questions.status_of(chapter, path)
    problems = []
    if st.stale:
        problems.append(f"changed since their review: {st.stale}")
    if st.missing:
        problems.append(f"never reviewed: {st.missing}")
    if st.orphaned:
        problems.append(f"stamped but gone from {path.name} (re-stamp drops them): {st.orphaned}")
    assert not problems, (f"{path.name}: " + "; ".join(problems) + ". "
                          + review_questions.how_to_review(chapter))


def test_every_chapter_is_reviewed():
    """Every chapter's explanations have been reviewed once (a stamp file exists).

    ``python scripts/review_questions.py`` prints each chapter's state; so does this test's
    failure message."""
    rows = sorted(_review_status(), key=lambda s: s.chapter)
    unstamped = [s.path.name for s in rows if not s.stamped]
    assert not unstamped, (f"{len(unstamped)} chapters have no review stamp: {unstamped}. "
                           + review_questions.how_to_review("NN") + "\n"
                           + review_questions.status_table(rows))


def _checks():
    for path, doc in _all():
        for t in review_questions.texts_of(doc):
            if t.check:
                yield pytest.param(t.check, id=f"{path.stem}-{t.key}")


@pytest.mark.parametrize("source", list(_checks()) or [pytest.param(None, marks=pytest.mark.skip(
    reason="no check: fields yet"))])
def test_explanation_checks_hold(source):
    """A fact an explanation states and its ``check:`` pins is what torch and attnbook do."""
    review_questions.run_check(source)


def test_review_notices_a_changed_explanation(tmp_path, monkeypatch):
    """The stamp catches an edited explanation, an edited prompt and a new option, ignores
    re-wrapping, and drops a vanished entry on re-stamping; a false check refuses to stamp."""
    doc = _choice_doc()
    path = tmp_path / "04_causal_mask.yaml"
    import yaml
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    monkeypatch.setattr(review_questions, "REVIEWED", tmp_path / "reviewed")
    monkeypatch.setattr(review_questions, "ROOT", tmp_path)
    st = review_questions.status_of(4, path)
    assert not st.stamped and len(st.missing) == 12
    with pytest.raises(SystemExit, match="give a --note"):
        review_questions._stamp(4, path, "me", None, {}, None, False, today="2026-12-05")
    review_questions._stamp(4, path, "me", "checked", {"q0/option-1": "tril vs triu"}, None, False,
                            today="2026-12-05")
    stamp = json.loads((tmp_path / "reviewed" / "04.json").read_text())
    assert stamp["entries"]["q0/option-1"]["note"] == "tril vs triu"
    assert review_questions.status_of(4, path).ok

    def edited(change):
        new = copy.deepcopy(doc)
        change(new)
        path.write_text(yaml.safe_dump(new), encoding="utf-8")
        return review_questions.status_of(4, path)

    rewrapped = edited(lambda d: d["questions"][1]["options"][2].update(
        explanation="No: padding  is a separate\n mask of its own."))
    assert rewrapped.ok, "re-wrapping whitespace should keep the stamp"
    text = edited(lambda d: d["questions"][1]["options"][2].update(
        explanation="No: padding is the same mask."))
    assert text.stale == ["q1/option-2"]
    prompt = edited(lambda d: d["questions"][2].update(prompt="Which one?"))
    assert prompt.stale == ["q2/option-0", "q2/option-1", "q2/option-2"]
    flipped = edited(lambda d: d["questions"][3]["options"][1].update(correct=True))
    assert flipped.stale == ["q3/option-1"]
    fewer = edited(lambda d: d["questions"][0]["options"].pop())
    assert fewer.orphaned == ["q0/option-2"] and not fewer.ok
    review_questions._stamp(4, path, "me", "re-read", {}, None, False, today="2026-12-05")
    assert review_questions.status_of(4, path).ok
    edited(lambda d: d["questions"][0]["options"][0].update(check="torch.tensor(1.0) == 2"))
    with pytest.raises(SystemExit, match="a check: field fails"):
        review_questions._stamp(4, path, "me", "x", {}, None, True, today="2026-12-05")
    review_questions.run_check("x = torch.ones(2)\nassert x.sum() == 2")
    with pytest.raises(AssertionError):
        review_questions.run_check("torch.zeros(2) == 1")
