"""Grade handed-in labs for marks: a gradebook, one feedback file per student, flags to review.

Usage: python scripts/grade.py SUBMISSIONS [--out _build/grades] [--labs 04_causal_mask,...]
                               [--jobs N] [--seed N] [--name FOLDER]

SUBMISSIONS holds what students handed in: one folder per student, or the flat or foldered
downloads of Canvas, Moodle and Gradescope (scripts/grading/discover.py lists the patterns).
Labs are recognised by content, so "Copy of 06_softmax.ipynb" or "06_softmax (1).ipynb" are
graded; of several files for one lab the latest is graded and the duplicate is flagged.

Each notebook runs top to bottom in a fresh, sandboxed ``python3`` kernel (whatever kernel it
names), several at a time, each cell with its time limit (scripts/grading/points.toml). After
each exercise the grader captures the answer and calls the learner's function on hidden inputs
drawn from a seed the notebook does not contain; the grader's own copy of the checkers, loaded
before any notebook ran, then decides. Solution cells are removed before grading (and flagged),
and code that replaces a checker or changes torch, numpy, builtins or the library is reported
with its line. Each hand-in's edition is read from its metadata (or, unstamped, from its
cells): an earlier term's edition is graded with its release's checks (scripts/grading/
editions.py), any other edition is flagged old-edition or newer-edition, and the gradebook
records the edition graded.

Writes a new folder OUT/<date_time> (never overwriting an earlier run):
    gradebook.csv    one row per student: a column per lab, total, flags, the graded files
    exercises.csv    one row per student, lab and exercise: points, feedback, flags
    feedback/        one Markdown file per student
    summary.md       the table and the list of flags to review
    run.json         seed, timings and versions, to reproduce or audit the run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import secrets
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

from . import discover, editions, gradebook, judge
from .execute import Run, run_notebook
from .handouts import student_edition
from .labs import ROOT, find_exercises
from .sandbox import Limits, can_unshare_network

DEFAULT_OUT = ROOT / "_build" / "grades"


def _tree_hash(folder: Path) -> str:
    """A fingerprint of the library and its checkers (``folder``'s .py files, GPU code aside)."""
    digest = hashlib.sha256()
    for path in sorted([*folder.glob("*.py"), *(folder / "exercises").glob("*.py")]):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def _run_task(task: dict) -> Run:
    """In a worker process: run one notebook in its sandbox (never raises)."""
    with tempfile.TemporaryDirectory(prefix="attnbook-grade-") as tmp:
        try:
            return run_notebook(task["nb"], task["captures"], Path(tmp), task["limits"],
                                task["pristine"], task["imported"], task["cell_seconds"],
                                task["notebook_seconds"])
        except Exception as err:  # the grader's own failure: report it on this notebook only
            names = {c.name: None for c in task["captures"]}
            return Run(names, {}, [], [], note=f"The grader failed on this notebook "
                                               f"({type(err).__name__}: {err}).")


def default_jobs() -> int:
    """Kernels side by side: one per core, at most 8, and about 1.5 GiB of memory each."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory = 8.0
    return max(1, min(cores or 1, 8, int(memory / 1.5)))


def _prepare(nb) -> tuple[object, int]:
    """The notebook as graded: solution cells out, the python3 kernel whatever it asked for."""
    graded, solutions = judge.strip_solutions(nb)
    graded.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
    return graded, solutions


def grade(submissions: Path, out: Path = DEFAULT_OUT, labs: list[str] | None = None,
          jobs: int | None = None, seed: int | None = None, name: str | None = None,
          config_path: Path = judge.POINTS, quiet: bool = False,
          releases: Path = editions.RELEASES) -> Path:
    """Grade every notebook in ``submissions``; write the gradebook into a new folder.

    Args:
        submissions: the folder of hand-ins (see the module docstring for the layouts).
        out: where the dated run folders go.
        labs: the labs of this assignment; default: every lab some submission is.
        jobs: notebooks graded side by side (default: :func:`default_jobs`).
        seed: the hidden inputs' seed (default: drawn now, recorded in run.json).
        name: the run folder's name instead of the date (it must not exist).
        config_path: points and time limits (points.toml).
        quiet: print nothing.
        releases: the frozen releases of earlier terms (scripts/grading/editions.py): a
            hand-in of one of their editions is graded with that edition's checks.

    Returns:
        The run folder.
    """
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))  # noqa: E731
    started = time.monotonic()
    submissions = submissions.resolve()
    if not submissions.is_dir():
        raise FileNotFoundError(f"no such folder: {submissions}")
    import torch

    torch.set_num_threads(1)  # the grader judges; the kernels compute
    cfg = judge.config(config_path)
    package = Path(__import__("attnbook").__file__).parent
    fingerprint = _tree_hash(package)
    pristine = judge.pristine_functions()  # imports every checker now, before any notebook
    all_labs = {p.stem: nbformat.read(p, as_version=4)
                for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
    exercises = {lab: find_exercises(nb) for lab, nb in all_labs.items()}
    for lab, found in exercises.items():
        for ex in found:
            ex.points = judge.exercise_config(cfg, lab, ex.name)["points"]
    now = editions.current(all_labs, exercises)
    known = editions.releases(releases)
    for edition in known:
        for ex in edition.exercises:
            ex.points = judge.exercise_config(cfg, edition.lab, ex.name)["points"]
    found = discover.discover(submissions, list(all_labs))
    labs = labs or sorted({s.lab for s in found if s.lab})
    unknown = [lab for lab in labs if lab not in all_labs]
    if unknown:
        raise ValueError(f"no such lab: {', '.join(unknown)} (labs: {', '.join(all_labs)})")
    seed = secrets.randbits(31) if seed is None else seed
    limits = Limits(memory_gib=cfg["limits"]["memory_gib"], file_mib=cfg["limits"]["file_mib"])

    students: dict[str, gradebook.StudentResult] = {}
    groups: dict[tuple[str, str], list[discover.Submission]] = {}
    for sub in found:
        s = students.setdefault(sub.student, gradebook.StudentResult(sub.student, sub.student_id))
        s.student_id = s.student_id or sub.student_id
        rel = str(sub.path.relative_to(submissions))
        if sub.problem or sub.lab not in labs:
            why = sub.problem or f"{sub.lab} is not part of this assignment"
            s.flags.append(judge.Flag("not-graded", f"`{rel}` was not graded: {why}."))
            continue
        groups.setdefault((sub.student, sub.lab), []).append(sub)

    tasks, meta, used = [], [], {}
    for (student, lab), subs in sorted(groups.items()):
        chosen, others = discover.pick(subs)
        rel = str(chosen.path.relative_to(submissions))
        edition, edition_flag = editions.identify(chosen.nb, lab, now[lab], known)
        used[(lab, edition.release)] = edition
        exs = edition.exercises
        result = gradebook.LabResult(lab, rel, edition=edition.id + (
            f" (release {edition.release})" if edition.release else " (current)"))
        if edition_flag is not None:
            result.flags.append(edition_flag)
        if others:
            result.flags.append(judge.Flag("duplicate", f"{len(subs)} files for {lab}: graded "
                                           f"`{rel}` (the latest); not graded: " +
                                           ", ".join(f"`{o.path.relative_to(submissions)}`"
                                                     for o in others) + "."))
        nb, solutions = _prepare(chosen.nb)
        if solutions:
            result.flags.append(judge.Flag("solutions-present", f"The notebook contains the "
                                           f"book's {solutions} solution cells (the lab from the "
                                           "site, not the student edition). They were removed "
                                           "and only the student's own cells were graded."))
        result.flags += judge.source_flags(chosen.nb)
        captures, cases = judge.plan(nb, lab, exs, cfg, seed)
        students[student].labs[lab] = result
        meta.append((student, lab, chosen, cases, edition))
        tasks.append(_task(nb, captures, limits, pristine, _imported(exs), cfg))

    # The given inputs of exercises that are not functions: from the untouched student edition
    # (of the release, for a release's edition).
    reference_labs = [key for key, e in sorted(used.items())
                      if any(judge.spec_of(ex) is None for ex in e.exercises)]
    for lab, release in reference_labs:
        e = used[(lab, release)]
        nb = e.student if release else student_edition(all_labs[lab], e.exercises)
        nb, _ = _prepare(nb)
        captures, _ = judge.plan(nb, lab, e.exercises, cfg, seed)
        tasks.append(_task(nb, captures, limits, pristine, _imported(e.exercises), cfg))

    jobs = jobs or default_jobs()
    say(f"grading {len(meta)} notebooks ({len(reference_labs)} reference runs) with {jobs} "
        f"kernels side by side; network off: {can_unshare_network()}")
    runs = _run_all(tasks, jobs, say, [f"{m[0]}/{m[1]}" for m in meta] +
                    [f"reference/{lab}" + (f" ({r})" if r else "") for lab, r in reference_labs])
    references = dict(zip(reference_labs, runs[len(meta):]))
    solutions_by_lab = {lab: judge.published_solutions(all_labs[lab], exercises[lab])
                        for lab in labs}
    for (student, lab, chosen, cases, edition), run in zip(meta, runs):
        result = students[student].labs[lab]
        exs = edition.exercises
        verdicts, flags = judge.judge(lab, exs, run, cases, cfg,
                                      references.get((lab, edition.release)),
                                      judge.saved_correct(chosen.nb, exs),
                                      {} if edition.release else solutions_by_lab[lab])
        other = next((f for f in result.flags if f.code in ("old-edition", "newer-edition")),
                     None)
        for v in verdicts if other is not None else []:
            if v.points == 0 and ("renamed or deleted" in v.message
                                  or "deleted or renamed" in v.message):
                v.message = (f"Not graded: the current lab's exercise {v.name} (edition "
                             f"{edition.id}) is not in the edition handed in (see the "
                             f"{other.code} note).")
        result.verdicts, result.seconds = verdicts, run.seconds
        for flag in flags:  # what the run saw adds to what the source showed
            same = next((g for g in result.flags if g.code == flag.code), None)
            if same is None:
                result.flags.append(flag)
            else:
                same.text += " While it ran: " + flag.text.split(". Grading used")[0].removeprefix(
                    "While the notebook ran, ") + "."
        if run.note:  # the notebook did not run to its end
            result.flags.append(judge.Flag("stopped", run.note))
        codes = {c for v in verdicts for c in v.flags}
        if "method" in codes:
            result.flags.append(judge.Flag("method", "A function uses what its exercise rules "
                                           "out (see the exercise's feedback)."))
        if "hard-coded" in codes:
            result.flags.append(judge.Flag("hard-coded", "An answer is right on the lab's own "
                                           "input only (see the exercise's feedback)."))
        if "published-solution" in codes:
            result.flags.append(judge.Flag("published-solution", "A function is the book's "
                                           "published solution, verbatim.", review=False))
    for s in students.values():  # every lab gets a column: missing ones score 0, flagged
        for lab in labs:
            if lab not in s.labs:
                s.labs[lab] = gradebook.LabResult(lab, "", [judge.Verdict(
                    ex.name, 0.0, float(ex.points), "Not handed in.") for ex in exercises[lab]])
                s.flags.append(judge.Flag(f"missing:{lab}", f"No notebook for {lab}: it scores 0."))
    changed = _tree_hash(package) != fingerprint
    folder = gradebook.new_folder(out.resolve(), name)
    ordered = sorted(students.values(), key=lambda s: s.student.lower())
    gradebook.write(folder, ordered, labs)
    if changed:  # the scores came from the copies loaded before; later runs would not
        warning = (f"\n**Warning:** the attnbook package under {package} changed while the "
                   "notebooks ran (a submission wrote to it, or someone edited it). These scores "
                   "come from the checkers loaded before any notebook ran; check the package "
                   "(git status) before grading again.\n")
        with open(folder / "summary.md", "a", encoding="utf-8") as f:
            f.write(warning)
        say(warning)
    seconds = time.monotonic() - started
    (folder / "run.json").write_text(json.dumps({
        "submissions": str(submissions), "labs": labs, "seed": seed, "jobs": jobs,
        "notebooks": len(meta), "reference_runs": len(reference_labs),
        "seconds": round(seconds, 1),
        "seconds_per_notebook": {f"{m[0]}/{m[1]}": round(r.seconds, 1)
                                 for m, r in zip(meta, runs)},
        "editions": {lab: e.id for lab, e in now.items() if lab in labs},
        "releases": sorted({e.release for e in known}),
        "network_off": can_unshare_network(), "limits": cfg["limits"],
        "attnbook_fingerprint": fingerprint, "attnbook_changed_during_run": changed,
        "python": sys.version.split()[0], "torch": torch.__version__}, indent=1) + "\n",
        encoding="utf-8")
    say(f"graded {len(meta)} notebooks in {seconds:.0f} s: {folder}")
    return folder


def _imported(exercises) -> dict[str, str]:
    """check name -> its qualname, for the kernel's check that the notebook's names are the
    library's."""
    return {ex.check: ex.qualname for ex in exercises}


def _task(nb, captures, limits, pristine, imported, cfg) -> dict:
    return {"nb": nb, "captures": captures, "limits": limits, "pristine": pristine,
            "imported": imported, "cell_seconds": cfg["limits"]["cell_seconds"],
            "notebook_seconds": cfg["limits"]["notebook_seconds"]}


def _run_all(tasks: list[dict], jobs: int, say, labels: list[str]) -> list[Run]:
    """Run the tasks ``jobs`` at a time in worker processes forked from this one.

    Forked after the checkers were imported, so the workers hold the pristine copies too.
    """
    if not tasks:
        return []
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=context) as pool:
        futures = [pool.submit(_run_task, t) for t in tasks]
        runs = []
        for label, future in zip(labels, futures):
            run = future.result()
            say(f"  {label}: {run.seconds:.0f} s{' (' + run.note[:60] + ')' if run.note else ''}")
            runs.append(run)
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path, help="the folder of hand-ins")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="where run folders go (default _build/grades)")
    parser.add_argument("--labs", help="comma-separated labs of this assignment (default: those "
                                       "handed in); a missing one scores 0")
    parser.add_argument("--jobs", type=int, help="notebooks side by side (default: per core)")
    parser.add_argument("--seed", type=int, help="seed of the hidden inputs (default: random)")
    parser.add_argument("--name", help="name of the run folder instead of the date")
    parser.add_argument("--points", type=Path, default=judge.POINTS,
                        help="points and time limits (default scripts/grading/points.toml)")
    parser.add_argument("--releases", type=Path, default=editions.RELEASES,
                        help="earlier terms' frozen editions (default scripts/grading/releases)")
    args = parser.parse_args(argv)
    labs = [lab.strip() for lab in args.labs.split(",")] if args.labs else None
    folder = grade(args.submissions, args.out, labs, args.jobs, args.seed, args.name, args.points,
                   releases=args.releases)
    print((folder / "summary.md").read_text(encoding="utf-8"))

