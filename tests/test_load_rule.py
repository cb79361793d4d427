"""The load rule of "How we measure": a benchmark that saves a results file refuses to start when
the 1-minute load average exceeds the core count, unless told --allow-loaded, which marks the
file NOT QUOTABLE. Runs that do not save (quick modes, CI's smoke tests) are never refused."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_positions  # noqa: E402
from bench_results import LoadedMachine, check_load, results_json_from_markdown  # noqa: E402


class _Timing:
    def __init__(self, median: float):
        self.median, self.spread, self.repeats = median, 0.1, 3


def _fake_compare(calls, *a, **k):
    return {name: _Timing(0.01 * (i + 1)) for i, name in enumerate(calls)}


@pytest.fixture
def loaded(monkeypatch):
    """A machine with 2 cores and a 1-minute load average of 9.5; timing made instant."""
    monkeypatch.setattr(os, "getloadavg", lambda: (9.5, 9.0, 8.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench_positions, "compare", _fake_compare)


def test_check_load_passes_a_quiet_machine_and_refuses_a_busy_one():
    assert check_load(load=1.9, cores=2) == {"load_1min": 1.9, "cores": 2, "quotable": True}
    assert check_load(load=2.0, cores=2)["quotable"]  # at the core count: still quiet
    with pytest.raises(LoadedMachine, match=r"load average is 2\.10, above the 2 cores"):
        check_load(load=2.1, cores=2)
    assert check_load(True, load=2.1, cores=2)["quotable"] is False


def test_a_saving_run_on_a_busy_machine_is_refused_before_it_times(loaded, tmp_path):
    with pytest.raises(SystemExit) as err:
        bench_positions.main(["--repeats", "1", "--save", str(tmp_path / "results_positions.md")])
    assert "9.50" in str(err.value) and "2 cores" in str(err.value)
    assert "--allow-loaded" in str(err.value)
    assert not list(tmp_path.iterdir())  # nothing written


def test_allow_loaded_saves_a_file_marked_not_quotable(loaded, tmp_path):
    bench_positions.main(["--repeats", "1", "--save", str(tmp_path / "results_positions.md"),
                          "--allow-loaded"])
    text = (tmp_path / "results_positions.md").read_text(encoding="utf-8")
    assert "1-minute load average 9.50 on 2 cores (NOT QUOTABLE" in text
    data = json.loads((tmp_path / "results_positions.json").read_text(encoding="utf-8"))
    assert data == results_json_from_markdown(text, "results_positions")
    assert data["quotable"] is False
    assert data["values"]["run.load_1min"] == 9.5 and data["values"]["run.cores"] == 2


def test_a_quiet_run_is_recorded_as_quotable(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.4, 0.5, 0.6))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bench_positions, "compare", _fake_compare)
    bench_positions.main(["--repeats", "1", "--save", str(tmp_path / "results_positions.md")])
    data = json.loads((tmp_path / "results_positions.json").read_text(encoding="utf-8"))
    assert data["quotable"] is True and data["values"]["run.load_1min"] == 0.4


def test_a_run_that_does_not_save_is_never_refused(loaded, capsys):
    bench_positions.main(["--repeats", "1"])  # no --save: a smoke test on a busy machine
    assert "Training step" in capsys.readouterr().out
