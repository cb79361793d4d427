"""The gradebook: CSV files an LMS imports and one feedback file per student, in a new folder."""

from __future__ import annotations

import csv
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LabResult:
    """One student's result for one lab."""

    lab: str
    file: str = ""  # the graded file, relative to SUBMISSIONS ("" when missing)
    verdicts: list = field(default_factory=list)  # judge.Verdict
    flags: list = field(default_factory=list)  # judge.Flag
    seconds: float = 0.0
    edition: str = ""  # the edition graded: "<id>" (current) or "<id> (release NAME)"

    @property
    def points(self) -> float:
        return round(sum(v.points for v in self.verdicts), 2)

    @property
    def possible(self) -> float:
        return sum(v.possible for v in self.verdicts)


@dataclass
class StudentResult:
    """Everything about one student: their labs, and flags that belong to no lab."""

    student: str
    student_id: str = ""
    labs: dict[str, LabResult] = field(default_factory=dict)
    flags: list = field(default_factory=list)  # judge.Flag: missing labs, stray files


def new_folder(root: Path, name: str | None = None) -> Path:
    """A folder for this run that did not exist before: ``root/2026-12-01_0515`` (or ``name``).

    Raises:
        FileExistsError: ``name`` was given and that folder exists (never overwritten).
    """
    root.mkdir(parents=True, exist_ok=True)
    if name:
        folder = root / name
        folder.mkdir()  # raises FileExistsError rather than overwrite a run
        return folder
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")
    for n in range(1, 1000):
        folder = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"no free folder name under {root} for {stamp}")


PER_EXERCISE = {"method", "hard-coded", "published-solution"}


def _codes(flags, lab: str | None = None) -> list[str]:
    return [f"{lab}:{f.code}" if lab else f.code for f in flags]


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "student"


def write(folder: Path, students: list[StudentResult], labs: list[str]) -> dict:
    """Write gradebook.csv, exercises.csv, feedback/<student>.md and summary.md.

    Args:
        folder: the run's new folder.
        students: the results.
        labs: the labs of this assignment (one column each, in this order); every student
            has a LabResult for each (a missing lab: its exercises at 0).

    Returns:
        The paths written, by kind.
    """
    possible = {lab: sum(v.possible for v in students[0].labs[lab].verdicts)
                for lab in labs} if students else {}
    with open(folder / "gradebook.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "student_id", *labs, "total", "possible", "review", "flags",
                    "files", "editions"])
        for s in students:
            codes = _codes(s.flags)
            for lab in labs:
                codes += _codes(s.labs[lab].flags, lab)
            review = any(fl.review for fl in s.flags) or any(
                fl.review for lab in labs for fl in s.labs[lab].flags)
            w.writerow([s.student, s.student_id, *[f"{s.labs[lab].points:g}" for lab in labs],
                        f"{sum(s.labs[lab].points for lab in labs):g}",
                        f"{sum(possible.values()):g}", "yes" if review else "",
                        "; ".join(codes),
                        "; ".join(f"{lab}={s.labs[lab].file}" for lab in labs
                                  if s.labs[lab].file),
                        "; ".join(f"{lab}={s.labs[lab].edition}" for lab in labs
                                  if s.labs[lab].edition)])
    with open(folder / "exercises.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "student_id", "lab", "exercise", "points", "possible",
                    "feedback", "flags", "file", "edition", "notebook_said"])
        for s in students:
            for lab in labs:
                r = s.labs[lab]
                # Lab flags that only sum up exercise flags stay on those exercises' rows.
                lab_codes = [c for c in _codes(r.flags) if c not in PER_EXERCISE]
                for v in r.verdicts:
                    codes = list(dict.fromkeys(lab_codes + v.flags))
                    w.writerow([s.student, s.student_id, lab, v.name, f"{v.points:g}",
                                f"{v.possible:g}", v.message, "; ".join(codes),
                                r.file, r.edition, v.said])
    feedback = folder / "feedback"
    feedback.mkdir()
    names: dict[str, int] = {}
    for s in students:
        base = _safe(s.student)
        names[base] = names.get(base, 0) + 1
        path = feedback / (f"{base}.md" if names[base] == 1 else f"{base}-{names[base]}.md")
        path.write_text(feedback_text(s, labs), encoding="utf-8")
    (folder / "summary.md").write_text(summary_text(students, labs, possible), encoding="utf-8")
    return {"gradebook": folder / "gradebook.csv", "exercises": folder / "exercises.csv",
            "feedback": feedback, "summary": folder / "summary.md"}


def feedback_text(s: StudentResult, labs: list[str]) -> str:
    """One student's feedback file: per lab, the score of each exercise and the check's words."""
    total = sum(s.labs[lab].points for lab in labs)
    possible = sum(s.labs[lab].possible for lab in labs)
    lines = [f"# Feedback for {s.student}", "", f"Total: {total:g} / {possible:g}", ""]
    lines += [f"- {f.text}" for f in s.flags]
    if s.flags:
        lines.append("")
    for lab in labs:
        r = s.labs[lab]
        lines += [f"## {lab}: {r.points:g} / {r.possible:g}", ""]
        if r.file:
            lines += [f"Graded file: `{r.file}`" + (f", edition {r.edition}" if r.edition
                                                     else ""), ""]
        lines += [f"- {f.text}" for f in r.flags]
        if r.flags:
            lines.append("")
        lines += ["| exercise | points | feedback |", "|---|---|---|"]
        for v in r.verdicts:
            message = v.message.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {v.name} | {v.points:g} / {v.possible:g} | {message} |")
        lines.append("")
    return "\n".join(lines)


def summary_text(students: list[StudentResult], labs: list[str], possible: dict) -> str:
    """The instructor's overview: the gradebook as a table, then what to review."""
    lines = ["# Grading summary", "", "| student | " + " | ".join(labs) + " | total | flags |",
             "|---|" + "---|" * (len(labs) + 2)]
    review = []
    for s in students:
        codes = _codes(s.flags) + [c for lab in labs for c in _codes(s.labs[lab].flags, lab)]
        total = sum(s.labs[lab].points for lab in labs)
        lines.append(f"| {s.student} | " + " | ".join(f"{s.labs[lab].points:g}" for lab in labs)
                     + f" | {total:g} / {sum(possible.values()):g} | {', '.join(codes)} |")
        for f in s.flags:
            if f.review:
                review.append(f"- **{s.student}**: {f.text}")
        for lab in labs:
            for f in s.labs[lab].flags:
                if f.review:
                    review.append(f"- **{s.student}**, {lab}: {f.text}")
    lines += ["", "## To review", ""] + (review or ["Nothing flagged."])
    return "\n".join(lines) + "\n"
