"""Sphinx extension: the ``{bench}`` role pastes a value from a benchmark's results JSON.

A chapter that quotes a benchmark never types the number. It writes

    {bench}`results:time_fwd.d64.T1024.fused.ratio:.2f`

which reads ``benchmarks/results.json`` (written next to ``results.md`` by the benchmark
itself, ``benchmarks/bench_results.py``), takes the value under the key
``time_fwd.d64.T1024.fused.ratio`` and formats it with the format spec ``.2f`` (Python's
``format``; without one, numbers print as Python prints them and text as it is). The text of the
role is ``FILE:KEY[:SPEC]``:

* ``FILE`` is a results file's stem: ``results``, ``results_masks``, ``results_positions``,
  ``train_results``;
* ``KEY`` is a flat key of that file's ``values``, ``TABLE.ROW.COLUMN[.PART]`` or a named
  fact; the keys are described in ``benchmarks/bench_results.py`` and listed in the JSON;
* ``SPEC`` is a format spec: ``.2f``, ``.1f``, ``.0f``, ``,``; ``%`` specs multiply by 100.

A missing file, a missing key or a spec that does not fit the value is a Sphinx error (a
docutils error message, which ``-W`` makes fatal), so a rerun that drops a value fails the build
instead of leaving a stale number. Each page that uses the role depends on the JSON it reads:
rerunning a benchmark rebuilds those pages.
"""

from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes

ROLE_NAME = "bench"
_cache: dict[Path, tuple[float, dict]] = {}


def parse(text: str) -> tuple[str, str, str]:
    """``FILE:KEY[:SPEC]`` -> (file stem, key, spec); raises ValueError when malformed."""
    parts = text.strip().split(":", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"expected FILE:KEY[:SPEC], got {text!r}")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


def load(path: Path) -> dict:
    """The ``values`` of one results JSON (read again when the file changes)."""
    mtime = path.stat().st_mtime
    if path not in _cache or _cache[path][0] != mtime:
        _cache[path] = (mtime, json.loads(path.read_text(encoding="utf-8"))["values"])
    return _cache[path][1]


def lookup(directory: Path, text: str) -> str:
    """The formatted value that ``{bench}`text``` pastes; raises KeyError/ValueError."""
    stem, key, spec = parse(text)
    path = directory / f"{stem}.json"
    if not path.is_file():
        raise KeyError(f"no results file {path}")
    values = load(path)
    if key not in values:
        raise KeyError(f"{stem}.json has no key {key!r}")
    value = values[key]
    return format(value, spec) if spec else str(value)


def bench_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    env = inliner.document.settings.env
    directory = Path(env.srcdir) / env.config.bench_results_dir
    try:
        stem = parse(text)[0]
        env.note_dependency(str(directory / f"{stem}.json"))
        value = lookup(directory, text)
    except (KeyError, ValueError, TypeError, OSError) as err:
        msg = inliner.reporter.error(f"{{{ROLE_NAME}}}`{text}`: {err}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    return [nodes.inline(rawtext, value, classes=["bench-value"])], []


def setup(app):
    app.add_config_value("bench_results_dir", "benchmarks", "env")
    app.add_role(ROLE_NAME, bench_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
