"""Installing the book where readers and students install it, not only on the authors' machine.

- requirements.txt resolves to wheels on macOS (Apple silicon) and Windows for Python 3.11-3.13
  (uv resolves for another platform with that platform's environment markers; pip cannot);
- the reader's set (requirements-book.txt, what `make book` installs) holds no testing or
  teaching tool, and requirements.txt includes it;
- the course guide's local route, run as the guide gives it (macOS/Linux form) in a fresh clone
  and virtual environment, installs a working Jupyter and executes a lab.

These tests need the package index (as installing does). The clone is made from this checkout's
committed state (HEAD): commit before running them locally.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import repository  # noqa: E402

UV = Path(sys.executable).with_name("uv")
GUIDE = ROOT / "book" / "course_guide.md"
PLATFORMS = {  # uv's name for the platform -> its environment (macOS 14: PyTorch's oldest wheel)
    "aarch64-apple-darwin": {"MACOSX_DEPLOYMENT_TARGET": "14.0"},
    "x86_64-pc-windows-msvc": {},
}
# Testing and teaching tools, which the reader's set must not make a reader install.
NOT_FOR_READERS = {"triton", "otter-grader", "playwright", "check-jsonschema", "pytest", "nbval",
                   "ruff", "hypothesis", "uv"}


def _requirements(path: Path) -> tuple[list[str], list[str]]:
    """(included files, requirement lines) of a requirements file, comments dropped."""
    includes, lines = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            includes.append(line[3:].strip())
        elif line:
            lines.append(line)
    return includes, lines


def _name(requirement: str) -> str:
    return re.split(r"[=<>!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_readers_set_is_the_books_needs_and_included_in_the_full_set():
    includes, full = _requirements(ROOT / "requirements.txt")
    assert includes == ["requirements-book.txt"]
    _, book = _requirements(ROOT / "requirements-book.txt")
    names = {_name(r) for r in book}
    assert {"torch", "jupyter-book", "myst-nb", "matplotlib", "ipywidgets"} <= names
    assert not names & NOT_FOR_READERS, names & NOT_FOR_READERS
    assert not names & {_name(r) for r in full}, "a package pinned in both files"
    assert all("==" in r for r in book + full), "every requirement is an exact pin"


def test_triton_is_installed_on_linux_only():
    _, full = _requirements(ROOT / "requirements.txt")
    (triton,) = [r for r in full if _name(r) == "triton"]
    assert triton.replace(" ", "").endswith(';sys_platform=="linux"'), triton


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_requirements_resolve_to_wheels_on(platform, python, tmp_path):
    """What `pip install -r requirements.txt` would install there exists as wheels."""
    assert UV.exists(), f"uv is pinned in requirements.txt; not found at {UV}"
    env = {**os.environ, **PLATFORMS[platform]}
    result = subprocess.run(
        [str(UV), "pip", "compile", "requirements.txt", "--python-platform", platform,
         "--python-version", python, "--only-binary", ":all:", "--no-header", "--quiet",
         "-o", str(tmp_path / "resolved.txt")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    resolved = {_name(r) for r in _requirements(tmp_path / "resolved.txt")[1]}
    assert "torch" in resolved and "jupyter-book" in resolved
    assert "triton" not in resolved, "Triton has no wheels for this platform"


def _guide_commands() -> list[str]:
    """The macOS/Linux commands of the course guide's local route, as the guide prints them."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("(local-route)="):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_guide_clones_the_configured_repository():
    url, _ = repository()
    commands = _guide_commands()
    assert commands[0] == f"git clone {url}"
    assert commands[1] == f"cd {url.rstrip('/').rsplit('/', 1)[1]}"


def test_local_route_of_the_course_guide(tmp_path):
    """The guide's commands, in order, in a fresh clone: only the URL and the last step differ.

    The clone comes from this checkout instead of GitHub; the last command, which starts a
    Jupyter server, is replaced by what it needs to work: ``jupyter notebook --version`` and the
    execution of a lab with the environment's own kernel.
    """
    url, _ = repository()
    commands = _guide_commands()
    assert commands[-1] == ".venv/bin/python -m jupyter notebook notebooks"
    clone = tmp_path / commands[1].split()[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")}
    # `python3` as a student's shell finds it: the interpreter this venv was made from.
    base = Path(getattr(sys, "_base_executable", sys.executable)).parent
    env["PATH"] = os.pathsep.join([str(base), env.get("PATH", "")])
    steps = [f"git clone --quiet {ROOT} {clone}", *commands[2:-1],
             ".venv/bin/python -m jupyter notebook --version",
             ".venv/bin/python -m jupyter execute --output=executed notebooks/00_at_a_glance.ipynb"]
    for step in steps:
        result = subprocess.run(shlex.split(step), cwd=clone if clone.exists() else tmp_path,
                                env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{step}\n{result.stdout[-1500:]}\n{result.stderr[-3000:]}"
    assert (clone / "notebooks" / "executed.ipynb").exists()
    site = next((clone / ".venv" / "lib").glob("python3.*/site-packages"))
    assert (site / "torch").is_dir() and (site / "notebook").is_dir()
    assert not (site / "triton").exists(), "the local route does not install Triton"
    size = sum(p.stat().st_size for p in (clone / ".venv").rglob("*") if p.is_file())
    print(f"\nlocal route: the environment takes {size / 2**30:.2f} GiB")
    assert size < 1.5 * 2**30, "the guide says about 1.5 GB of disk"
    shutil.rmtree(clone / ".venv")
