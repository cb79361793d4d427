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
