"""The classroom edition: student and instructor notebooks and Otter-Grader autograders.

Usage: python scripts/classroom.py [--out _build/classroom] [--seed N] [--release NAME]
                                   [notebooks/NN_name.ipynb ...]

The labs stay the single source (labs.py: how an exercise and its solution are found). For
every lab this writes::

    OUT/student/NN_name.ipynb      solution cells removed, exercises left with ... and their checks
    OUT/instructor/NN_name.ipynb   the lab with its solutions, plus a grading-notes cell at the top
    OUT/autograder/NN_name.zip     Otter-Grader's autograder for Gradescope (``otter
                                   generate``): one test per exercise, which calls the learner's
                                   function on hidden inputs (or the lab's check on the answer),
                                   refuses a replaced checker, and fails with the diagnosis; its
                                   environment.yml pins Python, CPU torch and the labs' packages
                                   and installs attnbook from the wheel inside the zip
    OUT/tests/NN_name/*.py         the tests inside that zip, readable
    OUT/wheel/attnbook-*.whl       that wheel

The editions are handouts.py's, the tests and zips autograder.py's. Grading for marks on the
instructor's machine is scripts/grade.py (grade.py here; no zip needed).

Every edition is stamped (metadata ``attnbook``: lab, content id of its exercises, attnbook
version and commit) and its setup cell installs that commit (or its tag), not the branch.
``--release NAME`` (``make classroom RELEASE=NAME``) also freezes the term's editions and their
checks in scripts/grading/releases/NAME, so the grader grades that term's hand-ins with them
after the labs change (editions.py).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import nbformat

from . import autograder, editions, handouts
from .labs import ROOT, Exercise, find_exercises

DEFAULT_OUT = ROOT / "_build" / "classroom"


def build(labs: list[Path] | None = None, out: Path = DEFAULT_OUT,
          seed: int | None = None, release: str = "",
          releases: Path = editions.RELEASES) -> dict[str, list[Exercise]]:
    """Write the editions and autograders of ``labs`` (default: every lab) into ``out``.

    Args:
        labs: lab notebooks.
        out: the output folder.
        seed: the Gradescope tests' hidden-input seed (default: drawn now; it is written
            into the tests, which students never see).
        release: a term's name: also freeze these editions and their checks into
            ``releases/<release>`` (editions.py), where the grader finds them.
        releases: where releases go.

    Returns:
        lab name -> its exercises.
    """
    import secrets

    if release and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", release):
        raise ValueError(f"a release name is letters, digits, '.', '_' and '-': {release!r}")
    if release and (releases / release).exists():
        raise FileExistsError(f"release {release} exists ({releases / release}); a term's "
                              "release is never overwritten: pick another name")
    library = handouts.library_stamp()
    if release and library["dirty"]:
        print("warning: src/ or notebooks/ have uncommitted changes; the editions name commit "
              f"{library['commit'][:10]}, which does not hold them. Commit and push first.")

    labs = labs or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for sub in ("student", "instructor", "autograder", "tests"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    seed = secrets.randbits(31) if seed is None else seed
    wheel = autograder.build_wheel(out / "wheel")
    built, frozen = {}, {}
    for path in labs:
        nb = nbformat.read(path, as_version=4)
        exercises = find_exercises(nb)
        lab = path.stem
        student = handouts.student_edition(nb, exercises, lab, library, release)
        nbformat.write(student, out / "student" / path.name)
        nbformat.write(handouts.instructor_edition(nb, exercises, lab, library, release),
                       out / "instructor" / path.name)
        if exercises:
            frozen[lab] = (student, exercises, handouts.edition_id(nb, exercises))
        autograder.write_tests(lab, exercises, out / "tests" / lab, seed)
        if exercises:
            autograder.otter_generate(out / "tests" / lab, out / "autograder" / f"{lab}.zip", wheel)
        built[lab] = exercises
        print(f"{lab}: {len(exercises)} exercises")
    if release:
        editions.write_release(releases / release, frozen, library, release)
        print(f"release {release}: {len(frozen)} editions frozen in {releases / release}")
    return built


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("labs", nargs="*", type=Path, help="labs (default: every lab)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, help="the Gradescope tests' hidden-input seed "
                                                 "(default: random)")
    parser.add_argument("--release", default="", help="a term's name: also freeze its "
                        "editions and checks in scripts/grading/releases/NAME for the grader")
    args = parser.parse_args(argv)
    build([p.resolve() for p in args.labs] or None, args.out, args.seed, args.release)
    print(f"editions and autograders in {args.out}")
