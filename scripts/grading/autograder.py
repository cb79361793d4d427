"""Otter-Grader's autograder for a lab: its test files and the Gradescope zip.

One test per exercise, which calls the learner's function on hidden inputs (or the lab's check
on the answer), refuses a replaced checker, and fails with the diagnosis. The zip's
environment.yml pins Python, CPU torch and the labs' packages and installs attnbook from the
wheel inside the zip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .labs import ROOT, Exercise, checker_hash, graded_spec

TEST_TEMPLATE = """\"\"\"Otter-Grader test: exercise {name!r} of {lab}, by the lab's check.\"\"\"

from otter.test_files import test_case

OK_FORMAT = False

name = {name!r}
points = {points}
CHECK_HASH = {digest!r}  # the checker's code when this zip was built


def _pristine():
    \"\"\"The lab's checker, refused if the notebook redefined it (its code changed).\"\"\"
    import importlib

    from attnbook.exercises.fingerprint import code_hash

    module = importlib.import_module({module!r})
    check = getattr(module, "GRADED", {{}}).get({check!r})
    check = check.check if check is not None else getattr(module, {check!r})
    # The plain check and the name the notebook calls (it may wrap the check in practice rules).
    if code_hash(check) + code_hash(getattr(module, {check!r})) != CHECK_HASH:
        raise AssertionError("Not graded: the checker {check} was replaced in the notebook")
    return check


@test_case(points={points}, hidden=False)
def test_{name}(env):
    check = _pristine()
    if {variable!r} not in env:
        raise AssertionError("Not graded: the variable {variable} is not defined at this point "
                             "(was the exercise cell deleted or not run?)")
    feedback = eval({call!r}, dict(env, {check}=check))
    assert feedback.ok, feedback.message
"""


FUNCTION_TEST_TEMPLATE = """\"\"\"Otter-Grader test: exercise {name!r} of {lab}, on hidden inputs.

The learner's function {function} is called on inputs drawn with this zip's seed (students never
see this file) and judged by the lab's checker; the names it may not use are refused.
\"\"\"

from otter.test_files import test_case

OK_FORMAT = False

name = {name!r}
points = {points}
SEED = {seed}
CHECK_HASH = {digest!r}  # the checker's code when this zip was built


def _names(function, env, depth=0):
    import types

    found, codes = set(), [function.__code__]
    while codes:
        code = codes.pop()
        found.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    held = [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {{}}).values()]
    for helper in [env.get(n) for n in list(found)] + held:
        own = getattr(helper, "__name__", None) if callable(helper) else None
        if isinstance(own, str):  # imported under another name: its own name counts too
            found.add(own)
        if isinstance(helper, types.FunctionType) and helper is not function and depth < 3:
            found |= _names(helper, env, depth + 1)
    return found


@test_case(points={points}, hidden=False)
def test_{name}(env):
    import importlib

    from attnbook.exercises import hidden_cases
    from attnbook.exercises.fingerprint import code_hash

    module = importlib.import_module({module!r})
    spec = module.GRADED[{check!r}]
    if code_hash(spec.check) + code_hash(getattr(module, {check!r})) != CHECK_HASH:
        raise AssertionError("Not graded: the checker {check} was replaced in the notebook")
    function = env.get({function!r})
    if not callable(function):
        raise AssertionError("Not graded: the function {function} is not defined")
    used = sorted(_names(function, env) & set(spec.forbidden))
    if used:
        raise AssertionError(f"Not graded: {function} uses {{', '.join(used)}}, which the "
                             "exercise rules out")
    for case in hidden_cases(spec, SEED):
        feedback = spec.check(function(*case.call), *case.check_args)
        assert feedback.ok, f"On a hidden input ({{case.label}}): {{feedback.message}}"
"""


def write_tests(lab: str, exercises: list[Exercise], folder: Path, seed: int = 0) -> None:
    """Otter's test files for one lab, and exercises.json (what the grading scripts read)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for ex in exercises:
        spec = graded_spec(ex)
        template = FUNCTION_TEST_TEMPLATE if spec is not None and ex.function else TEST_TEMPLATE
        (folder / f"{ex.name}.py").write_text(template.format(
            lab=lab, name=ex.name, points=ex.points, module=ex.module, check=ex.check,
            call=ex.call, variable=ex.variable, function=ex.function, seed=seed,
            digest=checker_hash(ex)), encoding="utf-8")
    manifest = [{"name": e.name, "check": e.check, "module": e.module, "call": e.call,
                 "points": e.points, "function": e.function} for e in exercises]
    (folder / "exercises.json").write_text(json.dumps(manifest, indent=1) + "\n")


# Gradescope builds its image from this (Otter's setup.sh runs mamba on it): the Python of the
# pins, CPU torch (its own index: the default Linux wheel is the CUDA build, over 2 GB), the
# pinned packages the labs import, and attnbook from the wheel shipped in the zip.
ENVIRONMENT = """name: otter-env
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - jupyter_server
  - pip:
      - --extra-index-url https://download.pytorch.org/whl/cpu
      - otter-grader[grading,plugins]=={otter}
{pins}
      - /autograder/source/files/{wheel}
"""

LAB_PACKAGES = ("torch", "numpy", "matplotlib", "ipywidgets", "tqdm", "ipykernel")


def pins(path: Path = ROOT / "requirements.txt") -> dict[str, str]:
    """name -> version of every ``name==version`` line of requirements.txt and its ``-r`` files
    (the CI's pins, the one source of versions)."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("-r "):
            found.update({k: v for k, v in pins(path.parent / line[3:].strip()).items()
                          if k not in found})
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            found.setdefault(m.group(1).lower(), m.group(2))
    return found


def build_wheel(out: Path) -> Path:
    """A wheel of attnbook from this checkout, built in a copy (the work tree stays clean)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("attnbook-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "src", Path(tmp) / "src",
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, tmp)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "--no-build-isolation", "-q", ".", "-w", str(out)], cwd=tmp, check=True,
                       capture_output=True, text=True)
    return next(out.glob("attnbook-*.whl"))


def otter_generate(tests: Path, zip_path: Path, wheel: Path | None = None) -> None:
    """``otter generate`` in an empty folder, with the environment the labs need.

    The zip's environment.yml pins Python, CPU torch and the labs' packages to the versions of
    requirements*.txt and installs attnbook from ``wheel`` (shipped in the zip as
    files/<wheel>); without a wheel, Otter's default environment (no torch: the labs fail).
    """
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(tests, Path(tmp) / "tests", ignore=shutil.ignore_patterns("*.json"))
        command = [sys.executable, "-m", "otter", "generate", "-t", "tests", "-o",
                   str(zip_path.resolve()), "--no-requirements", "--no-config"]
        if wheel is not None:
            versions = pins()
            shutil.copy(wheel, Path(tmp) / wheel.name)
            (Path(tmp) / "environment.yml").write_text(ENVIRONMENT.format(
                otter=versions["otter-grader"], wheel=wheel.name,
                pins="\n".join(f"      - {p}=={versions[p]}" for p in LAB_PACKAGES
                               if p in versions)), encoding="utf-8")
            command += ["-e", "environment.yml", wheel.name]
        else:
            command += ["--no-environment"]
        subprocess.run(command, cwd=tmp, check=True, capture_output=True, text=True)

