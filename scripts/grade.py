"""Grade students' lab notebooks offline with Otter-Grader: a score table and a feedback report.

Usage: python scripts/grade.py SUBMISSIONS [--out _build/grades] [--timeout 600]

SUBMISSIONS holds one folder per student, each with the lab notebooks they hand in, named as
handed out (``alice/03_scaling.ipynb``; the lab is found by its two-digit number). Each notebook
is graded by ``otter run`` (Otter-Grader without containers: no Docker needed) against the
autograder that ``scripts/classroom.py`` writes, in its own process with a time limit, so a
notebook that raises, loops for ever or deletes variables gets a clear message and the others are
still graded. Widgets are not precomputed while grading (ATTNBOOK_STATIC_WIDGETS=skip).

Writes into OUT:
    scores.csv     one row per student, lab and exercise: points, possible, the check's verdict
    feedback.md    per student and lab: the score of each exercise and the check's diagnosis
    results/       Otter's results per notebook (JSON)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import classroom  # noqa: E402

ROOT = classroom.ROOT
DEFAULT_OUT = ROOT / "_build" / "grades"


def lab_of(path: Path, labs: dict[str, Path]) -> str | None:
    """The lab a submitted notebook is, from the two-digit number its name starts with."""
    m = re.match(r"(\d\d)", path.name)
    if not m:
        return None
    return next((lab for lab in labs if lab.startswith(m.group(1) + "_")), None)


def _verdict(message: str) -> str:
    """The check's own words from Otter's test-case message (the assertion text)."""
    for line in reversed(message.strip().splitlines()):
        line = line.strip()
        if line.startswith("AssertionError:"):
            return line.removeprefix("AssertionError:").strip()
        if re.match(r"\w+(Error|Exception)\b", line):
            return f"the check could not run: {line}"
    return message.strip().splitlines()[-1] if message.strip() else ""


def run_one(submission: Path, autograder: Path, out: Path) -> None:
    """In a child process: grade one notebook with Otter and write a small JSON summary."""
    import otter.run

    results = otter.run.main(str(submission), autograder=str(autograder), output_dir=str(out),
                             no_logo=True)
    exercises = {}
    for name, result in results.results.items():
        messages = [r.message for r in result.test_case_results if not r.passed]
        exercises[name] = {"score": results.get_score(name), "possible": result.possible,
                           "message": "Correct." if not messages else _verdict(messages[0])}
    errors = []
    for cell in results.notebook.cells:
        raised = [f"{o['ename']}: {o['evalue']}".strip() for o in cell.get("outputs", [])
                  if o.get("output_type") == "error"]
        errors += raised
        graded = cell.get("metadata", {}).get("otter", {}).get("tests", [])
        for name in graded:  # the exercise's own cell raised: say so before the verdict
            if raised and name in exercises and exercises[name]["message"] != "Correct.":
                exercises[name]["message"] = (f"Your exercise cell raised {raised[0]}. "
                                              f"The check then says: {exercises[name]['message']}")
    (out / "summary.json").write_text(json.dumps({"exercises": exercises, "errors": errors}))


def _cpu_seconds(pid: int) -> float | None:
    """CPU time of a process and its descendants (the kernel), or None without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        parent = psutil.Process(pid)
        total = 0.0
        for proc in [parent, *parent.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
        return total
    except psutil.Error:
        return None


def _run_child(graded: Path, autograder: Path, out: Path, cwd: Path, timeout: float,
               stall: float) -> tuple[str, str]:
    """Run ``otter run`` on one notebook in a child process group.

    Returns ("done" | "failed" | "timeout" | "stalled", its log). "stalled" means no CPU time
    was used for ``stall`` seconds: a cell waits for input, or the kernel lost a message (an
    intermittent hang of ipykernel 7 that a second try gets past); an endless loop uses CPU and
    runs into ``timeout`` instead.
    """
    env = dict(os.environ, ATTNBOOK_STATIC_WIDGETS="skip", PYTHONUNBUFFERED="1")
    command = [sys.executable, str(Path(__file__).resolve()), "--one", str(graded),
               str(autograder), str(out)]
    log_path = cwd / "otter.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        start = last_busy = time.monotonic()
        last_cpu = _cpu_seconds(process.pid)
        outcome = None
        while outcome is None:
            try:
                process.wait(timeout=2)
                outcome = "done" if process.returncode == 0 else "failed"
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            cpu = _cpu_seconds(process.pid)
            if cpu is not None and last_cpu is not None and cpu > last_cpu + 0.05:
                last_cpu, last_busy = cpu, now
            if now - start > timeout:
                outcome = "timeout"
            elif cpu is not None and now - last_busy > stall:
                outcome = "stalled"
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the child, its kernel and their children
            process.wait()
    return outcome, log_path.read_text(errors="replace")


def grade_notebook(submission: Path, lab: str, classroom_dir: Path, out: Path,
                   timeout: float, stall: float = 120) -> dict:
    """Grade one submission in a child process; never raises. Returns exercises and a note."""
    exercises = json.loads((classroom_dir / "tests" / lab / "exercises.json").read_text())
    zero = {e["name"]: {"score": 0, "possible": e["points"], "message": ""} for e in exercises}
    out.mkdir(parents=True, exist_ok=True)
    try:
        nb = nbformat.read(submission, as_version=4)
    except Exception as err:  # not a notebook, or broken JSON
        note = f"Not graded: the file is not a readable notebook ({type(err).__name__}: {err})."
        return {"exercises": _with(zero, note), "note": note}
    known = [classroom.Exercise(e["name"], e["check"], e["module"], e["call"], -1, "answer")
             for e in exercises]
    found = classroom.retag(nb, known)
    summary = out / "summary.json"
    for attempt in (1, 2):
        summary.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            graded = Path(tmp) / submission.name
            nbformat.write(nb, graded)
            outcome, log = _run_child(graded, classroom_dir / "autograder" / f"{lab}.zip", out,
                                      Path(tmp), timeout, stall)
        if outcome != "stalled" or attempt == 2:
            break
        print(f"  no progress for {stall:g} s: grading {submission.name} again", flush=True)
    if outcome == "timeout":
        note = (f"Not graded: the notebook ran longer than {timeout:g} s (an endless loop?) "
                "and was stopped; every exercise of this lab scores 0.")
        return {"exercises": _with(zero, note), "note": note}
    if outcome == "stalled":
        note = (f"Not graded: the notebook made no progress for {stall:g} s, twice (is a cell "
                "waiting for input?) and was stopped; every exercise of this lab scores 0.")
        return {"exercises": _with(zero, note), "note": note}
    if outcome != "done" or not summary.exists():
        tail = " ".join(log.strip().splitlines()[-3:])
        note = f"Not graded: the grader failed on this notebook ({tail})."
        return {"exercises": _with(zero, note), "note": note}
    result = json.loads(summary.read_text())
    notes = []
    if found < len(exercises):
        notes.append(f"{len(exercises) - found} of {len(exercises)} exercise cells were not found "
                     "(deleted or renamed?); their checks ran at the end of the notebook.")
    if result["errors"]:
        shown = "; ".join(result["errors"][:3])
        notes.append(f"{len(result['errors'])} cell(s) raised an error ({shown}); the grader "
                     "went on with the next cells.")
    return {"exercises": {**zero, **result["exercises"]}, "note": " ".join(notes)}


def _with(exercises: dict, note: str) -> dict:
    return {k: dict(v, message=note) for k, v in exercises.items()}


def grade(submissions: Path, out: Path = DEFAULT_OUT, classroom_dir: Path = classroom.DEFAULT_OUT,
          timeout: float = 600, stall: float = 120) -> list[dict]:
    """Grade every student's notebooks; write scores.csv and feedback.md. Returns the rows."""
    submissions, out, classroom_dir = submissions.resolve(), out.resolve(), classroom_dir.resolve()
    labs = {p.stem: p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
    students = sorted(p for p in submissions.iterdir() if p.is_dir())
    wanted = {lab_of(nb, labs) for s in students for nb in s.glob("*.ipynb")} - {None}
    missing = [labs[lab] for lab in sorted(wanted)
               if not (classroom_dir / "autograder" / f"{lab}.zip").exists()]
    if missing:  # build what is needed (make classroom builds everything)
        classroom.build(missing, classroom_dir)
    rows, report = [], ["# Feedback", ""]
    for student in students:
        report += [f"## {student.name}", ""]
        notebooks = sorted(student.glob("*.ipynb"))
        if not notebooks:
            report += ["No notebook handed in.", ""]
        for nb in notebooks:
            lab = lab_of(nb, labs)
            if lab is None:
                report += [f"### {nb.name}", "", "Not graded: no lab has this number.", ""]
                continue
            print(f"grading {student.name}/{nb.name}", flush=True)
            result = grade_notebook(nb, lab, classroom_dir, out / "results" / student.name / lab,
                                    timeout, stall)
            total = sum(e["score"] for e in result["exercises"].values())
            possible = sum(e["possible"] for e in result["exercises"].values())
            report += [f"### {lab}: {total:g} / {possible:g}", ""]
            if result["note"]:
                report += [f"*{result['note']}*", ""]
            report += ["| exercise | points | the check says |", "|---|---|---|"]
            for name, e in result["exercises"].items():
                rows.append({"student": student.name, "lab": lab, "exercise": name,
                             "points": e["score"], "possible": e["possible"],
                             "feedback": e["message"], "note": result["note"]})
                message = e["message"].replace("|", "\\|").replace("\n", " ")
                report.append(f"| {name} | {e['score']:g} / {e['possible']:g} | {message} |")
            report.append("")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scores.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["student", "lab", "exercise", "points", "possible",
                                    "feedback", "note"])
        writer.writeheader()
        writer.writerows(rows)
    (out / "feedback.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    return rows


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--one":  # the child process of grade_notebook
        run_one(Path(argv[1]), Path(argv[2]), Path(argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path, help="one folder per student")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--classroom", type=Path, default=classroom.DEFAULT_OUT,
                        help="where scripts/classroom.py wrote the autograders")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds one notebook may run (default 600)")
    parser.add_argument("--stall", type=float, default=120,
                        help="seconds without CPU use after which a run is tried again, then "
                             "stopped (default 120)")
    args = parser.parse_args(argv)
    rows = grade(args.submissions, args.out, args.classroom, args.timeout, args.stall)
    print(f"{len(rows)} exercise grades: {args.out / 'scores.csv'}, {args.out / 'feedback.md'}")


if __name__ == "__main__":
    main()
