"""Chapters 16-19 and their labs agree: every glued key exists, every included object exists,
and the compile tables the chapters paste were made with today's launch configurations."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import torch

from attnbook.gpu.configs import backward_config, forward_config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from nbtools import glued  # noqa: E402

PAGES = sorted((ROOT / "book").glob("1[6-9]_*.md"))
GLUE = re.compile(r"\{glue:text\}`\.\./notebooks/([\w.]+)::(\w+):s`")
INCLUDE = re.compile(r"```\{literalinclude\} \.\./(\S+)\n(?::\w+: .*\n)*?:pyobject: (\w+)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_glued_key_is_in_its_lab(page):
    text = page.read_text(encoding="utf-8")
    refs = GLUE.findall(text)
    assert refs, "the page pastes nothing from its lab"
    assert "{L}" not in text.replace(r"\mathcal{L}", "")  # a template left unfilled
    missing = [(nb, key) for nb, key in refs if key not in glued(nb)]
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_included_object_exists(page):
    includes = INCLUDE.findall(page.read_text(encoding="utf-8"))
    assert len(includes) >= 3
    for path, name in includes:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert name in names, f"{path} has no {name}"


@pytest.mark.parametrize("key,kernel", [("tfwd_cc", "forward"), ("tbwd_cc", "backward")])
def test_compile_tables_were_made_with_todays_configs(key, kernel):
    """Re-run Labs 17 and 18 when attnbook.gpu.configs changes: this compares their tables."""
    lab = "17_triton_forward.ipynb" if kernel == "forward" else "18_triton_backward.ipynb"
    config = forward_config if kernel == "forward" else backward_config
    rows = {k: v for k, v in glued(lab).items() if k.startswith(key) and "×" in v}
    assert len(rows) >= 9
    for name, text in rows.items():
        dtype = torch.float16 if "_fp16_" in name else torch.float32
        d, arch = (int(x) for x in re.search(r"_d(\d+)_sm(\d+)$", name).groups())
        cfg = config(arch, dtype, d)
        assert text.startswith(f"{cfg.block_m}×{cfg.block_n}, {cfg.num_warps} warps, "
                               f"{cfg.num_stages} stage"), (name, text, cfg)


def _pinned_triton() -> str:
    """The Triton release requirements.txt pins (the labs are executed under it)."""
    pins = re.findall(r"^triton==([\d.]+)", (ROOT / "requirements.txt").read_text(), re.M)
    assert len(pins) == 1, pins
    return pins[0]


@pytest.mark.parametrize("key,lab", [("tfwd", "17_triton_forward.ipynb"),
                                     ("tbwd", "18_triton_backward.ipynb")])
def test_compile_tables_name_their_triton_and_show_colabs(key, lab):
    """Each chapter's compile table says it was compiled by the pinned Triton (the glued
    version is requirements.txt's pin) and pastes, per cell, what Triton 3.6.0 (Colab's GPU
    runtime) compiles differently, as its record says today."""
    from attnbook.gpu.compile_check import differences, launch_cases, recorded_table

    values = glued(lab)
    assert values[f"{key}_cc_triton"] == _pinned_triton()
    kernel = "forward" if key == "tfwd" else "backward"
    cases = {}
    for c in launch_cases():
        if c.kernel == kernel and c.causal:
            name = f"{c.dtype}_{c.precision}" if key == "tfwd" else c.dtype
            cases[f"{name}_d{c.d}_sm{c.arch}"] = c
    t36 = {k.removeprefix(f"{key}_t36_cc_"): v for k, v in values.items()
           if k.startswith(f"{key}_t36_cc_")}
    assert len(t36) >= 9
    for name, text in t36.items():
        case = cases[name]
        want = differences(recorded_table(_pinned_triton(), [case])[0],
                           recorded_table("3.6.0", [case])[0])
        assert text == (want or "the same"), (name, text, want)
    chapter = "17_triton_forward.md" if key == "tfwd" else "18_triton_backward.md"
    page = (ROOT / "book" / chapter).read_text(encoding="utf-8")
    # A colon fence: a caption with glue holds backticks, which a backtick fence's info string
    # cannot (the whole block would then print as text).
    tables = re.findall(r"^:::\{table\} (.*)\n:name: (\S+)\n\n((?:\|.*\n)+):::$", page, re.M)
    compiled = [t for t in tables if f"::{key}_cc_" in t[2]]
    assert compiled, f"{chapter} has no compile table"
    for caption, name, body in compiled:
        assert f"::{key}_cc_triton:s` (pinned)" in caption, name
        assert "Triton 3.6.0 (Colab's GPU runtime)" in caption, name
        pasted = set(re.findall(rf"::{key}_t36_cc_(\w+):s`", body))
        assert pasted == set(t36) - {"fp32_tf32x3_d64_sm75"}, name
