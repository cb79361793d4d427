"""Review the quiz explanations, and stamp what was reviewed, so that every explanation is true.

The answers of the chapters' questions are tested (tests/test_questions.py recomputes them); the
explanations a reader sees after answering are prose, and prose is only as true as the last
person who read it sceptically. This script records that reading. For each chapter it keeps a
stamp file, ``book/questions/reviewed/NN.json`` (one per chapter, so that reviewers of different
chapters never touch the same file), with one entry per explanation-like text of the chapter's
question file:

- ``<id>/option-<k>``: the explanation of option k of a choice question;
- ``<id>/explanation`` and ``<id>/hint``: those of a numeric or predict question;
- ``<id>/mistake-<k>``: the explanation of its k-th named mistake.

Each entry holds a hash of the text *in its context* (the prompt, the option's text and whether
it is the correct one, the numeric answer or the lab's glued value), the reviewer, the date and
the reviewer's note: what was checked, and how. Whitespace does not count (re-wrapping a YAML
paragraph keeps its stamp); any other change of the explanation, its option, its prompt or its
answer makes the entry stale, and tests/test_questions.py fails until someone has read it again.

A checkable fact in an explanation (a number, what PyTorch does) can be pinned instead of trusted:
give the option or mistake a ``check:`` field, Python run by the test (and by ``stamp``) with
``torch``, ``F`` (torch.nn.functional), ``math`` and ``attnbook`` (with its submodules) in scope,
seed 0. A single expression must be true; several statements must run without raising (use
``assert``). Example::

    - text: "``torch.triu(m, diagonal=2)`` keeps key i + 1 visible"
      explanation: "Right: diagonal=2 blanks j < i + 2, so key i + 1 stays ..."
      check: "torch.triu(torch.ones(3, 3), diagonal=2)[0, 1] == 0"

Usage::

    python scripts/review_questions.py                 # status of every chapter (or: status)
    python scripts/review_questions.py show 14         # the texts of chapter 14 still to review
    python scripts/review_questions.py show 14 --all   # every text of chapter 14, with its note
    python scripts/review_questions.py stamp 14 --reviewer "helper C" \\
        --note "read each as an expert; the counts recomputed in Lab 14" \\
        --entry-note no-order/option-1 "permutation equivariance, ch. 7 Thm 7.1"

``stamp`` records the stale and missing entries of the chapter (``--only KEY`` for some of them,
``--all`` to re-record every entry), each with its ``--entry-note`` or else the general
``--note``; a note is required. It runs the chapter's ``check:`` fields first and refuses to stamp
if one fails. Entries whose text no longer exists are dropped. The review itself is the human
part: read each text as a sceptical expert would, fix what is false (or only half true), then
stamp, saying in the note what you checked.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
from attnbook_questions import QUESTIONS, SCHEMA, answer_of, load_questions  # noqa: E402

REVIEWED = QUESTIONS / "reviewed"


@dataclass(frozen=True)
class Text:
    """One explanation-like text of a question file, with the context its truth depends on."""

    key: str
    prompt: str
    context: tuple  # (label, value) pairs: the option, whether it is correct, the answer
    text: str
    check: str | None = None

    @property
    def digest(self) -> str:
        norm = [" ".join(str(x).split()) for x in (self.prompt, self.text)]
        ctx = [[label, " ".join(str(value).split())] for label, value in self.context]
        blob = json.dumps([self.key, norm, ctx], ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def question_files() -> dict[int, Path]:
    """Chapter number -> its question file."""
    files = {}
    for path in sorted(QUESTIONS.iterdir()):
        if path.suffix in (".yaml", ".yml", ".json") and path.name != SCHEMA.name:
            files[int(load_questions(path)["chapter"])] = path
    return files


def texts_of(doc: dict) -> list[Text]:
    """Every explanation, hint and mistake explanation of one chapter's questions."""
    out = []
    for q in doc["questions"]:
        qid, prompt = q["id"], q["prompt"]
        if q["kind"] == "choice":
            for k, option in enumerate(q["options"]):
                ctx = (("option", option["text"]), ("correct", bool(option.get("correct"))))
                out.append(Text(f"{qid}/option-{k}", prompt, ctx, option["explanation"],
                                option.get("check")))
            continue
        try:
            answer = answer_of(q, doc)[0]
        except (KeyError, OSError) as exc:  # a missing glue key is test_questions' to report
            answer = f"<unreadable: {exc}>"
        ctx = (("answer", answer), ("unit", q.get("unit", "")))
        out.append(Text(f"{qid}/explanation", prompt, ctx, q["explanation"]))
        out.append(Text(f"{qid}/hint", prompt, ctx, q["hint"]))
        for k, mistake in enumerate(q.get("mistakes", [])):
            mctx = ctx + (("mistake", mistake["value"]),)
            out.append(Text(f"{qid}/mistake-{k}", prompt, mctx, mistake["explanation"],
                            mistake.get("check")))
    return out


def stamp_path(chapter: int) -> Path:
    return REVIEWED / f"{chapter:02d}.json"


def load_stamp(chapter: int) -> dict | None:
    path = stamp_path(chapter)
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass
class Status:
    chapter: int
    path: Path
    stamped: bool
    total: int
    stale: list[str]      # reviewed once, changed since
    missing: list[str]    # never reviewed
    orphaned: list[str]   # stamped texts that no longer exist

    @property
    def ok(self) -> bool:
        return self.stamped and not (self.stale or self.missing or self.orphaned)


def status_of(chapter: int, path: Path, stamp: dict | None = None, doc: dict | None = None
              ) -> Status:
    doc = load_questions(path) if doc is None else doc
    stamp = load_stamp(chapter) if stamp is None else stamp
    texts = texts_of(doc)
    entries = (stamp or {}).get("entries", {})
    stale = [t.key for t in texts if t.key in entries and entries[t.key]["sha"] != t.digest]
    missing = [t.key for t in texts if t.key not in entries]
    keys = {t.key for t in texts}
    orphaned = [k for k in entries if k not in keys]
    return Status(chapter, path, stamp is not None, len(texts), stale, missing, orphaned)


def how_to_review(chapter: int) -> str:
    return (f"Read them as a sceptical expert (python scripts/review_questions.py show {chapter}), "
            f"fix any that is false or only half true, pin a checkable fact with a check: field, "
            f"then stamp: python scripts/review_questions.py stamp {chapter} --reviewer NAME "
            f"--note 'what you checked and how'")


def run_check(source: str):
    """Run one ``check:`` field: an expression must be true, statements must not raise."""
    import torch
    import torch.nn.functional as F

    import attnbook
    import attnbook.masks  # noqa: F401  (submodules in scope as attributes)
    import attnbook.softmax  # noqa: F401

    namespace = {"torch": torch, "F": F, "math": math, "attnbook": attnbook}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            code = compile(source, "<check>", "eval")
        except SyntaxError:
            exec(compile(source, "<check>", "exec"), namespace)  # noqa: S102 (our own files)
            return
        value = eval(code, namespace)  # noqa: S307
        if hasattr(value, "all"):
            value = bool(value.all())
        if not value:
            raise AssertionError(f"check is false: {source.strip()}")


def _show(chapter: int, path: Path, everything: bool) -> int:
    doc = load_questions(path)
    st = status_of(chapter, path, doc=doc)
    entries = (load_stamp(chapter) or {}).get("entries", {})
    todo = set(st.stale) | set(st.missing)
    shown = 0
    last_prompt = None
    for t in texts_of(doc):
        if not everything and t.key not in todo:
            continue
        shown += 1
        if t.prompt != last_prompt:
            print("\n" + "=" * 78 + f"\n{t.key.split('/')[0]}: " + " ".join(t.prompt.split()))
            last_prompt = t.prompt
        state = "STALE" if t.key in st.stale else "NEW" if t.key in st.missing else "reviewed"
        print(f"\n  [{state}] {t.key}")
        for label, value in t.context:
            print(f"    {label}: " + " ".join(str(value).split()))
        print("    explanation: " + " ".join(t.text.split()))
        if t.check:
            print("    check: " + " ".join(t.check.split()))
        if t.key in entries:
            e = entries[t.key]
            print(f"    last review ({e['reviewer']}, {e['date']}): {e['note']}")
    for key in st.orphaned:
        print(f"\n  [GONE] {key}: stamped, no longer in {path.name} (stamp drops it)")
    print(f"\n{path.name}: {shown} shown, {len(st.stale)} stale, {len(st.missing)} new, "
          f"{len(st.orphaned)} gone")
    return 0


def _stamp(chapter: int, path: Path, reviewer: str, note: str | None, entry_notes: dict,
           only: list[str] | None, everything: bool, today: str | None = None) -> int:
    doc = load_questions(path)
    texts = texts_of(doc)
    keys = {t.key for t in texts}
    unknown = [k for k in list(entry_notes) + list(only or []) if k not in keys]
    if unknown:
        raise SystemExit(f"chapter {chapter} has no text {unknown}; keys look like "
                         f"{sorted(keys)[:3]}")
    failed = []
    for t in texts:
        if t.check:
            try:
                run_check(t.check)
            except Exception as exc:  # noqa: BLE001 (report every failing check)
                failed.append(f"{t.key}: {type(exc).__name__}: {exc}")
    if failed:
        raise SystemExit("not stamped, a check: field fails:\n  " + "\n  ".join(failed))
    stamp = load_stamp(chapter) or {"chapter": chapter, "questions": "", "entries": {}}
    stamp["questions"] = path.relative_to(ROOT).as_posix()
    entries = stamp["entries"]
    st = status_of(chapter, path, stamp=stamp, doc=doc)
    if only:
        chosen = set(only)
    elif everything:
        chosen = keys
    else:
        chosen = set(st.stale) | set(st.missing)
    without = [k for k in sorted(chosen) if not (entry_notes.get(k) or note)]
    if without:
        raise SystemExit(f"give a --note (or --entry-note KEY NOTE) for: {without}")
    today = today or _dt.date.today().isoformat()
    for t in texts:
        if t.key in chosen:
            entries[t.key] = {"sha": t.digest, "reviewer": reviewer, "date": today,
                              "note": entry_notes.get(t.key) or note}
    for key in st.orphaned:
        del entries[key]
    order = [t.key for t in texts]
    stamp["entries"] = {k: entries[k] for k in order if k in entries}
    REVIEWED.mkdir(exist_ok=True)
    stamp_path(chapter).write_text(json.dumps(stamp, indent=1, ensure_ascii=False) + "\n",
                                   encoding="utf-8")
    print(f"stamped {len(chosen)} of {len(texts)} texts of chapter {chapter} "
          f"({stamp_path(chapter).relative_to(ROOT)}); {len(st.orphaned)} dropped")
    return 0


def status_table(rows: list[Status]) -> str:
    """One line per chapter (ok, UNSTAMPED, or how many texts are stale, new or gone)."""
    lines = []
    for s in rows:
        if s.ok:
            state = "ok"
        elif not s.stamped:
            state = "UNSTAMPED"
        else:
            state = (f"{len(s.stale)} stale, {len(s.missing)} new, "
                     f"{len(s.orphaned)} gone")
        lines.append(f"{s.chapter:2d}  {s.path.name:28s} {s.total:3d} texts  {state}")
    lines.append(f"{sum(s.ok for s in rows)} of {len(rows)} chapters reviewed and current")
    return "\n".join(lines)


def print_status(files: dict[int, Path] | None = None) -> list[Status]:
    files = question_files() if files is None else files
    rows = [status_of(c, p) for c, p in sorted(files.items())]
    print(status_table(rows))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("status", help="every chapter: stamped, stale or new texts")
    show = sub.add_parser("show", help="print a chapter's texts still to review")
    show.add_argument("chapter", type=int)
    show.add_argument("--all", action="store_true", help="every text, reviewed or not")
    stamp = sub.add_parser("stamp", help="record a chapter's review")
    stamp.add_argument("chapter", type=int)
    stamp.add_argument("--reviewer", required=True)
    stamp.add_argument("--note", help="note for every stamped entry without its own")
    stamp.add_argument("--entry-note", nargs=2, action="append", default=[],
                       metavar=("KEY", "NOTE"))
    stamp.add_argument("--only", action="append", metavar="KEY")
    stamp.add_argument("--all", action="store_true", help="re-record every entry")
    args = parser.parse_args(argv)
    if args.command in (None, "status"):
        rows = print_status()
        return 0 if all(s.ok for s in rows) else 1
    files = question_files()
    if args.chapter not in files:
        raise SystemExit(f"no question file for chapter {args.chapter}: {sorted(files)}")
    path = files[args.chapter]
    if args.command == "show":
        return _show(args.chapter, path, args.all)
    return _stamp(args.chapter, path, args.reviewer, args.note, dict(args.entry_note),
                  args.only, args.all)


if __name__ == "__main__":
    sys.exit(main())
