"""Who handed in which lab: the folders and file names that real classes produce.

Accepted layouts, mixed freely in one SUBMISSIONS folder:

- one folder per student: ``alice/06_softmax.ipynb`` (any file name; see below);
- Canvas's flat download: ``anaperez_1234_56789_06_softmax.ipynb`` (login, user id,
  submission id, the file's name; ``_LATE_`` after the login when late);
- Moodle's download: ``Ana Perez_123456_assignsubmission_file_06_softmax.ipynb``, flat or as a
  folder ``Ana Perez_123456_assignsubmission_file_/06_softmax.ipynb``;
- Gradescope's export: folders ``submission_123456/`` with ``submission_metadata.yml`` beside
  them, which names the student of each.

The lab is recognised by its content first (the lab id that the student edition carries in its
metadata, else the lab's title cell "# Lab N — ..."), and only then by the file name, whatever
Colab ("Copy of ..."), the browser ("06_softmax (1).ipynb") or the LMS ("06_softmax-1.ipynb")
made of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

CANVAS = re.compile(
    r"^(?P<login>[A-Za-z0-9.\-]+?)(?:_LATE)?_(?P<uid>\d+)_(?P<sid>\d+)_(?P<file>.+)$")
MOODLE = re.compile(
    r"^(?P<name>.+?)_(?P<uid>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.*)$")
GRADESCOPE = re.compile(r"^submission_(?P<sid>\d+)$")
TITLE = re.compile(r"^#\s*Lab\s+(\d+)\b", re.M)
DUPLICATE = re.compile(r"^(?:Copy of\s+)?(?P<stem>.+?)(?:\s*\((?P<n>\d+)\)|-(?P<m>\d+))?$")


@dataclass
class Submission:
    """One notebook a student handed in."""

    student: str  # the name the gradebook uses
    path: Path
    student_id: str = ""  # the LMS's id when the name tells it (Canvas, Moodle, Gradescope)
    lab: str | None = None  # e.g. "06_softmax"; None: not a lab of this course
    how: str = ""  # how the lab was recognised: "metadata", "title" or "file name"
    problem: str = ""  # why it cannot be graded (not a notebook, not a lab)
    copy: int = 0  # the duplicate number its name carries ("(1)", "-2", "Copy of" = 1)
    nb: object = field(default=None, repr=False)


def _copy_number(stem: str) -> int:
    m = DUPLICATE.match(stem)
    n = m.group("n") or m.group("m") if m else None
    return int(n) if n else (1 if stem.startswith("Copy of ") else 0)


def lab_of(path: Path, nb, labs: list[str]) -> tuple[str | None, str]:
    """The lab a notebook is, and how that was seen: metadata, title cell or file name."""
    meta = (nb.metadata.get("attnbook", {}) or {}).get("lab") if nb is not None else None
    if meta in labs:
        return meta, "metadata"
    if nb is not None:
        first = next((c for c in nb.cells if c.cell_type == "markdown"), None)
        m = TITLE.search(first.source) if first is not None else None
        if m:
            found = [lab for lab in labs if int(lab[:2]) == int(m.group(1))]
            if found:
                return found[0], "title"
    m = DUPLICATE.match(path.stem)
    stem = m.group("stem") if m else path.stem
    numbered = re.search(r"(?:^|_)(\d\d)_[a-z_]+$", stem)
    if numbered:
        found = [lab for lab in labs if lab == stem[numbered.start(1):] or
                 lab.startswith(numbered.group(1) + "_")]
        if found:
            return found[0], "file name"
    return None, ""


def _gradescope_names(root: Path) -> dict[str, tuple[str, str]]:
    """submission folder -> (name, id) from Gradescope's submission_metadata.yml."""
    meta = root / "submission_metadata.yml"
    if not meta.exists():
        return {}
    import yaml

    data = yaml.safe_load(meta.read_text(encoding="utf-8")) or {}
    names = {}
    for folder, info in data.items():
        people = (info or {}).get(":submitters") or []
        if people:
            person = people[0]
            names[str(folder)] = (str(person.get(":name", folder)),
                                  str(person.get(":sid") or person.get(":email") or ""))
    return names


def _owner_of_folder(folder: str, gradescope: dict) -> tuple[str, str]:
    if folder in gradescope:
        return gradescope[folder]
    m = MOODLE.match(folder)
    if m:
        return m.group("name"), m.group("uid")
    return folder, ""


def _owner_of_file(name: str) -> tuple[str, str, str] | None:
    """(student, id, the file's own name) from a flat LMS download name, or None."""
    for pattern, who in ((MOODLE, "name"), (CANVAS, "login")):
        m = pattern.match(name)
        if m:
            return m.group(who), m.group("uid"), m.group("file")
    return None


def discover(root: Path, labs: list[str]) -> list[Submission]:
    """Every notebook under ``root`` with its student and lab (problems noted, never raised).

    Args:
        root: the SUBMISSIONS folder.
        labs: the course's lab names, e.g. ["04_causal_mask", ...].

    Returns:
        One Submission per .ipynb file (checkpoints skipped), sorted by student then file.
    """
    import nbformat

    gradescope = _gradescope_names(root)
    found: list[Submission] = []
    for path in sorted(root.rglob("*.ipynb")):
        rel = path.relative_to(root)
        if ".ipynb_checkpoints" in rel.parts or any(p.startswith(".") for p in rel.parts):
            continue
        if len(rel.parts) > 1:
            student, sid = _owner_of_folder(rel.parts[0], gradescope)
            own_name = path.name
        else:
            owner = _owner_of_file(path.name)
            if owner is None:
                student, sid, own_name = f"(unknown: {path.name})", "", path.name
            else:
                student, sid, own_name = owner
        sub = Submission(student, path, sid, copy=_copy_number(Path(own_name).stem))
        try:
            sub.nb = nbformat.read(path, as_version=4)
        except Exception as err:  # not JSON, not a notebook
            sub.problem = f"not a readable notebook ({type(err).__name__})"
        sub.lab, sub.how = lab_of(Path(own_name), sub.nb, labs)
        if sub.lab is None and not sub.problem:
            sub.problem = "not a lab of this course (no lab id, lab title or lab file name)"
        if student.startswith("(unknown") and not sub.problem:
            sub.problem = ("the file is not in a student's folder and its name is no LMS "
                           "download name: whose is it?")
        found.append(sub)
    return sorted(found, key=lambda s: (s.student.lower(), str(s.path)))


def pick(subs: list[Submission]) -> tuple[Submission, list[Submission]]:
    """Of several files for one lab, the one to grade (the latest), and the others.

    Latest means the newest modification time; equal times (an LMS download sets them all
    alike) fall back to the duplicate number in the name, then to the name.
    """
    ordered = sorted(subs, key=lambda s: (s.path.stat().st_mtime, s.copy, s.path.name))
    return ordered[-1], ordered[:-1]

