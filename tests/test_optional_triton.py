"""Part VI's labs without Triton: ``%%triton`` cells say they are skipped; with it, they run."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from attnbook.gpu import optional


@pytest.fixture
def shell():
    ip = InteractiveShell.instance()
    yield ip
    ip.user_ns.pop("ran", None)


def test_without_triton_the_cell_is_skipped_with_its_reason(shell, monkeypatch, capsys):
    monkeypatch.setattr(optional, "triton_available", lambda: False)
    monkeypatch.setattr(optional.platform, "system", lambda: "Darwin")
    assert optional.setup_triton_cells() is False
    assert "the cells marked %%triton are skipped" in capsys.readouterr().out
    result = shell.run_cell("%%triton\nimport triton_that_does_not_exist\nran = True\n")
    assert result.success
    assert "ran" not in shell.user_ns
    out = capsys.readouterr().out
    assert "skipped: this cell runs a Triton kernel" in out
    assert "Linux only, and this is Darwin" in out


def test_with_triton_the_cell_runs_and_its_errors_fail_it(shell, monkeypatch):
    monkeypatch.setattr(optional, "triton_available", lambda: True)
    monkeypatch.setattr("attnbook.gpu.triton_env.load_kernels", lambda: None)
    assert optional.setup_triton_cells() is True
    assert shell.run_cell("%%triton\nran = 6 * 7\n").success
    assert shell.user_ns["ran"] == 42
    failed = shell.run_cell("%%triton\nraise ValueError('inside the kernel cell')\n")
    assert not failed.success, "an error inside a %%triton cell must fail the cell"
