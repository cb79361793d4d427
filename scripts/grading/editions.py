"""Which edition of a lab a hand-in is, and the checks that grade it.

A student edition carries its edition in its metadata (handouts.py's ``stamp``): the
lab, a content id of its exercises, the attnbook version and commit, and the term's release.
``make classroom RELEASE=name`` freezes a term's editions into ``scripts/grading/releases/name``:

    release.json     the release's name, library (version, commit) and, per lab, its edition id
    release.tar.gz   student/*.ipynb, the student editions handed out (their cells, without
                     outputs), and attnbook/, the library's code as it was (its checkers among
                     it): an archive, so that linters and test runners leave the frozen code alone

A hand-in of the current edition is graded with the current checks; one of a frozen release's
edition with that release's checkers (its package loaded under another name, so both live in one
grader); any other is flagged ``old-edition`` (or ``newer-edition``), naming the editions and
what to do, and graded as far as the current checks go.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# `python scripts/grading/editions.py NAME COMMIT LAB` runs this file as a script: it becomes the
# package's module (PEP 366), with scripts/ on the path instead of scripts/grading/.
if __name__ == "__main__" and not __package__:
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    __package__ = "grading"

import nbformat  # noqa: E402

from . import handouts  # noqa: E402
from .labs import ROOT, check_imports, find_exercises  # noqa: E402

RELEASES = Path(__file__).resolve().parent / "releases"


@dataclass
class Edition:
    """One edition of one lab and the exercises (and checkers) that grade it."""

    lab: str
    id: str  # handouts.edition_id: the content id of its exercises
    exercises: list = field(default_factory=list)  # labs.Exercise, modules importable here
    release: str = ""  # "" for the current labs
    version: str = ""
    commit: str = ""
    student: object = field(default=None, repr=False)  # the student edition handed out

    @property
    def label(self) -> str:
        where = f"release {self.release}" if self.release else "the current lab"
        return f"edition {self.id} ({where})"


def current(all_labs: dict, exercises: dict) -> dict[str, Edition]:
    """lab -> the current edition, from the book's labs."""
    library = handouts.library_stamp()
    return {lab: Edition(lab, handouts.edition_id(nb, exercises[lab]), exercises[lab], "",
                         library["version"], library["commit"])
            for lab, nb in all_labs.items()}


def _alias(release: str) -> str:
    return "attnbook_release_" + re.sub(r"\W", "_", release)


def load_package(folder: Path, alias: str):
    """Import the frozen attnbook in ``folder`` as the package ``alias`` (once per process)."""
    if alias in sys.modules:
        return sys.modules[alias]
    spec = importlib.util.spec_from_file_location(alias, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[alias]
        raise
    return module


def _unpack(archive: Path) -> Path:
    """A release's archive, unpacked into a folder that lives as long as this process."""
    import atexit
    import shutil
    import tarfile
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="attnbook-release-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


def releases(root: Path = RELEASES) -> list[Edition]:
    """Every frozen edition under ``root``, its checkers loaded (a broken release is skipped
    with a warning on stderr)."""
    found = []
    for meta_path in sorted(root.glob("*/release.json")) if root.is_dir() else []:
        folder = meta_path.parent
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        alias = _alias(meta["name"])
        try:
            unpacked = _unpack(folder / "release.tar.gz")
            load_package(unpacked / "attnbook", alias)
        except Exception as err:  # noqa: BLE001 (a release made elsewhere may not import)
            print(f"warning: release {meta['name']} cannot be loaded ({err}); skipped",
                  file=sys.stderr)
            continue
        for lab, info in meta["labs"].items():
            student = nbformat.read(unpacked / "student" / f"{lab}.ipynb", as_version=4)
            exercises = find_exercises(student)
            for ex in exercises:
                ex.module = ex.module.replace("attnbook", alias, 1)
                ex.points = info.get("points", {}).get(ex.name, ex.points)
            found.append(Edition(lab, info["exercises"], exercises, meta["name"],
                                 meta["library"]["version"], meta["library"]["commit"], student))
    return found


def _present(nb, ex) -> bool:
    """Whether the hand-in still has exercise ``ex``: its function defined, or its check call."""
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    if ex.function:
        return any(re.search(rf"^\s*def\s+{re.escape(ex.function)}\s*\(", s, re.M) for s in code)
    return any(ex.call in s for s in code)


def _foreign_checks(nb, now: Edition) -> list[str]:
    """What the hand-in's exercise cells grade that no exercise of edition ``now`` has: the
    checks it calls on an answer (``check_x(answer, ...)``) and the functions whose result it
    checks (``answer = f(...)``), each one the current lab lacks: the mark of another
    edition's exercise cells."""
    checks = {ex.check for ex in now.exercises}
    functions = {ex.function for ex in now.exercises if ex.function}
    found = set()
    for cell in nb.cells:
        called = set(re.findall(r"\b(check_\w+)\(\s*answer\b", cell.source)) \
            if cell.cell_type == "code" else set()
        if called:
            found |= called - checks
            found |= {f"{f}()" for f in re.findall(r"^answer\s*=\s*(\w+)\(", cell.source,
                                                   re.M)} - {f"{f}()" for f in functions}
    return sorted(found)


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=20)


def _is_older(commit: str) -> bool | None:
    """True: an ancestor of this checkout's commit; False: unknown here (newer, or a fork)."""
    if not commit or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        return None
    try:
        if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            return False
        return _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return None


def identify(nb, lab: str, now: Edition, known: list[Edition]):
    """The edition to grade ``nb`` with, and the flag that says so (or None).

    Args:
        nb: the hand-in.
        lab: the lab it was recognised as.
        now: the current edition of that lab.
        known: the frozen releases' editions.

    Returns:
        (edition, flag): ``edition`` is ``now`` or a release's edition; ``flag`` is None for the
        current edition, an information flag ``edition`` for a release's, and ``old-edition``
        or ``newer-edition`` (to review) when no edition the grader has matches; then the
        current checks grade what they can.
    """
    from .judge import Flag

    meta = nb.metadata.get("attnbook", {}) or {}
    stamped = meta.get("exercises")
    mine = [e for e in known if e.lab == lab]
    if stamped == now.id:
        return now, None
    match = next((e for e in mine if e.id == stamped), None) if stamped else None
    if match is None and not stamped:  # unstamped (made before editions were): by its cells
        # Every current exercise there: the current edition. A release's edition whose every
        # exercise is there: that edition. Some of the current exercises and no exercise of
        # another edition: the current one, an exercise or two deleted (graded and explained
        # one by one). An exercise check the current lab does not have (an edition that kept
        # one exercise's name, e.g. lab 04 at a949cb8): an edition of another time.
        if not now.exercises or all(_present(nb, ex) for ex in now.exercises):
            return now, None
        match = next((e for e in mine if e.exercises
                      and all(_present(nb, ex) for ex in e.exercises)), None)
        if match is None and any(_present(nb, ex) for ex in now.exercises) \
                and not _foreign_checks(nb, now):
            return now, None
    if match is not None:
        return match, Flag("edition", f"Graded with {match.label}, the edition it was made "
                           f"from (attnbook {match.version}, commit {match.commit[:10]}); the "
                           f"current lab is edition {now.id}.", review=False)
    made = (f"edition {stamped} (attnbook {meta.get('version', '?')}, commit "
            f"{str(meta.get('commit', ''))[:10] or '?'}"
            + (f", release {meta['release']}" if meta.get("release") else "") + ")"
            if stamped else "an edition without an edition stamp (made before editions were "
            "stamped)")
    have = ", ".join([f"edition {now.id} (current)"] + [e.label for e in mine])
    older = _is_older(str(meta.get("commit", ""))) if stamped else True
    if older is False:
        return now, Flag("newer-edition", f"This hand-in is {made}, which this grader does not "
                         f"know (it has {have}): it was made from a newer checkout or another "
                         "fork. Update the grader's checkout (git pull) or add that term's "
                         "release to scripts/grading/releases, then grade again; until then "
                         "the current checks graded what they could.")
    gone = _missing_imports(nb)
    if gone:  # a release frozen from its commit would not grade it either: its cells import
        # from the library the kernel has, today's
        return now, Flag("old-edition", f"This hand-in is {made}; the grader has {have}. Its "
                         f"cells import what the library no longer has ({', '.join(gone)}), so "
                         "those exercises could not run, and freezing a release from the commit "
                         "it was made with would not grade them either. The current checks "
                         "graded what they could; ask the student to copy their answers into "
                         "the current edition of the lab and hand it in again.")
    return now, Flag("old-edition", f"This hand-in is {made}; the grader has {have}. No release "
                     "holds its edition, so the current checks graded what they could and an "
                     "exercise that changed since scores 0. To grade it with its own checks, "
                     "freeze that term's release from the commit its editions were made with "
                     "(python scripts/grading/editions.py NAME COMMIT LAB) and grade again, or "
                     "ask the student to redo the changed exercises in the current edition.")


def _missing_imports(nb) -> list[str]:
    """The exercise checks a hand-in imports (``from attnbook.exercises.X import check_y``, read
    as :func:`labs.check_imports` reads a lab) that the installed library lacks, as
    ``module.name``: checks an older edition called and the library has since dropped."""
    import importlib

    gone = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for name, mod in check_imports(cell.source).items():
            try:
                present = hasattr(importlib.import_module(mod), name)
            except ImportError:
                present = False
            if not present:
                gone.append(f"{mod}.{name}")
    return sorted(set(gone))


def _without_outputs(nb):
    """A copy of ``nb`` with no stored outputs or widget state: the grader runs a release's
    edition afresh (its reference run) and reads only its cells, so a release keeps the cells
    (a lab's stored figures and widget views made one release of all labs 10 MB)."""
    import copy

    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def write_release(folder: Path, labs: dict, library: dict, name: str,
                  package: Path | None = None) -> dict:
    """Freeze a term's editions: ``folder``/release.json and release.tar.gz (see above).

    Args:
        folder: the release's folder (must not exist: a release is never overwritten).
        labs: lab -> (the student edition, its exercises, its edition id).
        library: handouts.library_stamp() of the code frozen.
        name: the release's name.
        package: the attnbook package folder to copy (default: this checkout's src/attnbook).

    Returns:
        release.json's content.
    """
    import io
    import tarfile

    package = package or ROOT / "src" / "attnbook"
    folder.mkdir(parents=True)
    meta = {"name": name, "library": library, "labs": {}}
    with tarfile.open(folder / "release.tar.gz", "w:gz") as tar:
        for path in sorted(package.rglob("*.py")):
            if "__pycache__" not in path.parts:
                tar.add(path, arcname=str(Path("attnbook") / path.relative_to(package)))
        for lab, (student, exercises, edition) in sorted(labs.items()):
            data = nbformat.writes(_without_outputs(student)).encode("utf-8")
            info = tarfile.TarInfo(f"student/{lab}.ipynb")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            meta["labs"][lab] = {"exercises": edition,
                                 "points": {ex.name: ex.points for ex in exercises}}
    (folder / "release.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def freeze_ref(releases_root: Path, name: str, ref: str, labs: list[str]) -> dict:
    """A release made afterwards from a commit: the labs and library as they were at ``ref``.

    For a term whose editions were handed out before releases existed (or never frozen): the
    student editions are made again from that commit's labs, unstamped as they were then.

    Args:
        releases_root: where releases go (scripts/grading/releases).
        name: the release's name.
        ref: the commit (or tag) the term's editions were made from.
        labs: the labs to freeze, e.g. ["06_softmax"].

    Returns:
        release.json's content.
    """
    import io
    import tarfile
    import tempfile

    commit = _git("rev-parse", f"{ref}^{{commit}}").stdout.strip()
    if not commit:
        raise ValueError(f"no such commit in this checkout: {ref}")
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", commit, "src/attnbook"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        package = Path(tmp) / "src" / "attnbook"
        alias = _alias(name)
        load_package(package, alias)
        version = re.search(r'__version__ = "([^"]+)"',
                            (package / "__init__.py").read_text(encoding="utf-8"))
        frozen = {}
        for lab in labs:
            text = _git("show", f"{commit}:notebooks/{lab}.ipynb").stdout
            lab_nb = nbformat.reads(text, as_version=4)
            exercises = find_exercises(lab_nb)
            for ex in exercises:
                ex.module = ex.module.replace("attnbook", alias, 1)
            student = handouts.student_edition(lab_nb, exercises)  # unstamped, as then
            frozen[lab] = (student, exercises, handouts.edition_id(lab_nb, exercises))
        library = {"version": version.group(1) if version else "", "commit": commit, "tag": "",
                   "dirty": False}
        return write_release(releases_root / name, frozen, library, name, package)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Freeze an earlier term's editions from the "
                                     "commit they were made with (make classroom RELEASE=name "
                                     "freezes the current ones).")
    parser.add_argument("name", help="the release's name, e.g. 2026-spring")
    parser.add_argument("commit", help="the commit or tag the editions were made from")
    parser.add_argument("labs", nargs="+", help="labs, e.g. 06_softmax")
    parser.add_argument("--releases", type=Path, default=RELEASES)
    args = parser.parse_args(argv)
    meta = freeze_ref(args.releases, args.name, args.commit, args.labs)
    for lab, info in meta["labs"].items():
        print(f"{lab}: edition {info['exercises']}")
    print(f"release {args.name} in {args.releases / args.name}")


if __name__ == "__main__":
    main()
