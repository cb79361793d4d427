"""Adopting the book: one command points it at a fork; the GitHub Actions workflow is valid."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import set_repository  # noqa: E402
from nbtools import repository  # noqa: E402

WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"


def test_set_repository_rewrites_every_place(tmp_path):
    for name in ("_config.yml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "book").mkdir()
    (tmp_path / "notebooks").mkdir()
    for lab in ("03_scaling", "14_tiny_model"):
        shutil.copy(ROOT / "notebooks" / f"{lab}.ipynb", tmp_path / "notebooks")
    old_url, old_branch = repository()
    new = "https://github.com/some-course/attention-fork"
    changed = set_repository.set_repository(new, "spring", tmp_path)
    assert set_repository.current(tmp_path) == (new, "spring")
    config = yaml.safe_load((tmp_path / "_config.yml").read_text())
    assert config["repository"]["url"] == new and config["repository"]["branch"] == "spring"
    for lab in ("03_scaling", "14_tiny_model"):
        before = nbformat.read(ROOT / "notebooks" / f"{lab}.ipynb", as_version=4)
        after = nbformat.read(tmp_path / "notebooks" / f"{lab}.ipynb", as_version=4)
        setup = next(c for c in after.cells if c.cell_type == "code")
        assert f'"git+{new}@spring"' in setup.source
        assert old_url not in setup.source
        # Nothing else changed: other cells and every output are as they were.
        assert [c.get("outputs") for c in before.cells] == [c.get("outputs") for c in after.cells]
        assert [c.source for c in before.cells[2:]] == [c.source for c in after.cells[2:]]
    readme = (tmp_path / "README.md").read_text()
    assert old_url not in readme
    assert tmp_path / "README.md" in changed
    with pytest.raises(ValueError):
        set_repository.set_repository("not a url", root=tmp_path)


def test_setup_cells_use_the_configured_repository():
    url, branch = repository()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        setup = next(c for c in nb.cells if c.cell_type == "code")
        assert f"git+{url}@{branch}" in setup.source, path.name


def test_workflow_runs_make_test_and_deploys_pages():
    flow = yaml.safe_load(WORKFLOW.read_text())
    jobs = flow["jobs"]
    steps = [s.get("run", "") + s.get("uses", "") for job in jobs.values()
             for s in job.get("steps", [])]
    assert any("make test" in s for s in steps)
    assert any(s.startswith("actions/upload-pages-artifact") for s in steps)
    assert any(s.startswith("actions/deploy-pages") for s in steps)
    upload = next(s for job in jobs.values() for s in job.get("steps", [])
                  if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html"


def test_workflow_passes_the_linter():
    linter = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    if linter is None:
        pytest.skip("check-jsonschema is not installed (pip install -r requirements.txt)")
    result = subprocess.run([linter, "--builtin-schema", "vendor.github-workflows",
                             str(WORKFLOW)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
