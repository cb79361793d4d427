"""Prose that cannot go stale: chapters paste benchmark numbers with ``{bench}``, never type them.

* Each ``benchmarks/*.json`` is what ``bench_results.results_json_from_markdown`` makes of the
  ``.md`` beside it, so the two cannot drift apart (the benchmarks write both at once).
* Every ``{bench}`` key the book uses resolves, and a missing key fails a Sphinx build with
  ``-W``.
* No page types a number that a results file holds, where the text around it is about a
  benchmark run (see :func:`typed_benchmark_numbers`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))
import attnbook_bench  # noqa: E402
from bench_results import (  # noqa: E402
    FACTS,
    STEMS,
    TABLES,
    dump,
    results_json_from_markdown,
    tables,
    write_results,
)
from prose_numbers import ALLOWED_PATTERNS, PAGES  # noqa: E402

ROLE = re.compile(r"\{bench\}`([^`]*)`")
# Words that say the text around a number is about a benchmark run.
CONTEXT = re.compile(r"benchmark|results\w*\.(?:md|json)|bench_\w+\.py|train_tasks|\{bench\}"
                     r"|\b(?:this|the) run\b|run shown", re.I)
WINDOW = 400  # characters either side of a number that count as its context
# A decimal (2.38, 1.4, 0.0), or a whole number with % or × (52%, 5×), with an optional unit.
CANDIDATE = re.compile(r"(?<![\w.\-])(\d+)(?:\.(\d+))?(\s?(?:%|×|times\b))?(?![\w])")
EXEMPT = re.compile(r"<!--\s*not benchmark numbers:(.*?)-->", re.S)


def _values() -> dict[str, dict]:
    return {stem: json.loads((BENCH / f"{stem}.json").read_text(encoding="utf-8"))["values"]
            for stem in STEMS}


def _blank(text: str, pattern: str, flags: int = 0) -> str:
    """``text`` with every match of ``pattern`` replaced by spaces (newlines kept), so that
    offsets into the result are offsets into the original."""
    return re.sub(pattern, lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=flags)


def prose_mask(text: str) -> str:
    """The page with what is not prose blanked out, at the same offsets: comments, code and
    math blocks, directive options, math, roles, inline code, link targets, version numbers."""
    out = _blank(text, r"<!--.*?-->", re.S)
    out = _blank(out, r"^(```+|~~~+)\s*(?:\{(?:code-block|code|literalinclude|math)\}|python|"
                 r"bash|text|console|yaml)[^\n]*\n.*?^\1\s*$", re.S | re.M)
    for pattern, flags in [(r"^:[\w-]+:.*$", re.M), (r"\$\$.*?\$\$", re.S),
                           (r"(?<!\\)\$[^$\n]+?(?<!\\)\$", 0), (r"\{[\w:-]+\}`[^`]*`", 0),
                           (r"`[^`\n]*`", 0), (r"\]\([^)]*\)", 0), (r"https?://\S+", 0)]:
        out = _blank(out, pattern, flags)
    for pattern in ALLOWED_PATTERNS:
        out = _blank(out, pattern)
    return out


def typed_benchmark_numbers(text: str, values: dict[str, dict]) -> list[tuple[str, str]]:
    """Numbers typed into a page's prose that a benchmark's results hold: (number, key).

    A number counts when (1) it is a decimal, or a whole number with ``%`` or ``×``; (2) some
    numeric value of a results JSON, formatted with as many decimals as the number shows,
    reads the same (``2.38``; ``1.4`` for a slope of 1.412; ``2.10`` for 2.1); spreads (``±N%``)
    are not compared; and (3) within :data:`WINDOW` characters of the original page there is
    a sign of a benchmark run (:data:`CONTEXT`: "benchmark", ``results.md``, a ``{bench}``
    role, "this run", ...). A page may exempt a constant that only happens to equal a result
    with ``<!-- not benchmark numbers: 4.5 -->``.
    """
    exempt = {x.strip() for block in EXEMPT.findall(text) for x in block.split(",")}
    prose = prose_mask(text)
    found = []
    for m in CANDIDATE.finditer(prose):
        whole, decimals, unit = m.groups()
        if decimals is None and not (unit and unit.strip() in ("%", "×")):
            continue
        shown = whole if decimals is None else f"{whole}.{decimals}"
        if shown in exempt or not CONTEXT.search(text[max(0, m.start() - WINDOW):
                                                      m.end() + WINDOW]):
            continue
        places = len(decimals or "")
        keys = [(v != float(shown), f"{stem}:{k}") for stem, vals in values.items()
                for k, v in vals.items() if isinstance(v, (int, float))
                and not isinstance(v, bool) and not k.endswith(".spread")
                and f"{v:.{places}f}" == shown]
        if keys:  # name an equal value before one that only rounds to the number
            found.append((m.group(0).strip(), min(keys)[1]))
    return found


# -- the JSON and the Markdown agree ---------------------------------------------------------

@pytest.mark.parametrize("stem", STEMS)
def test_the_json_is_the_markdown_read_back(stem):
    md = (BENCH / f"{stem}.md").read_text(encoding="utf-8")
    stored = (BENCH / f"{stem}.json").read_text(encoding="utf-8")
    assert stored == dump(results_json_from_markdown(md, stem)), (
        f"benchmarks/{stem}.json is not what benchmarks/{stem}.md holds: rerun the benchmark "
        "with --save (it writes both), or `python benchmarks/bench_results.py`")


@pytest.mark.parametrize("stem", STEMS)
def test_every_table_and_sentence_of_a_results_file_is_read(stem):
    md = (BENCH / f"{stem}.md").read_text(encoding="utf-8")
    found = tables(md)
    assert len(found) == len(TABLES[stem])  # no table is left unnamed
    for pattern, _name, _keys in TABLES[stem]:
        assert sum(bool(re.search(pattern, above)) for above, _, _ in found) == 1, pattern
    for pattern, _keys in FACTS[stem]:
        assert re.search(pattern, md), pattern


def test_a_cell_gives_its_number_ratio_and_spread():
    values = _values()["results"]
    # | 64 | 1024 | 19.9 (4.56×, ±4%) | 4.69 (1.07×, ±5%) | 10.4 (2.38×, ±7%) | ...: the forward
    # table's row, read here with its own pattern, gives the JSON's number, ratio and spread
    text = (ROOT / "benchmarks" / "results.md").read_text(encoding="utf-8")
    row = re.search(r"^\| 64 \| 1024 \| ([^|]+)\| ([^|]+)\| ([^|]+)\|", text, re.M)
    cells = [re.fullmatch(r"([\d.]+) \(([\d.]+)×, ±(\d+)%\)", c.strip()) for c in row.groups()]
    fused, online = cells[1], cells[2]
    assert values["time_fwd.d64.T1024.fused"] == float(fused.group(1))
    assert values["time_fwd.d64.T1024.fused.ratio"] == float(fused.group(2))
    assert values["time_fwd.d64.T1024.fused.spread"] == int(fused.group(3))
    assert values["time_fwd.d64.T1024.online.ratio"] == float(online.group(2))
    assert values["targets.fused_vs_sdpa.met"] in ("yes", "NO")
    masks = _values()["results_masks"]
    assert masks["packing.tiled.packed_plan_reused.fwd.packed_padded_speed"] > 1
    assert _values()["train_results"]["tasks.copy_no_position_embeddings.first_step_with_loss_0_05"] == "never"  # noqa: E501


def test_write_results_writes_the_markdown_and_its_json(tmp_path):
    body = ("Measured under load average 0.5.\n\n"
            "| scheme | median (ms) | ratio to none | spread |\n|---|---|---|---|\n"
            "| none | 17.48 | 1.00 | ±14% |\n| rope | 21.19 | 1.21 | ±11% |\n")
    body = ("Training step (forward + backward), fused (SDPA) path:\n\n" + body
            + "\nTraining step (forward + backward), explicit path:\n\n"
            + body.split("\n\n", 1)[1])
    md, js = write_results(tmp_path / "out.md", body, "A title", "python x.py",
                           kind="results_positions")
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# A title\n\nRun on ") and "`python x.py`" in text
    data = json.loads(js.read_text(encoding="utf-8"))
    assert data == results_json_from_markdown(text, "results_positions")
    assert data["values"]["step_fused.rope.ratio_to_none"] == 1.21
    assert data["values"]["step_explicit.none.spread"] == 14


# -- the role --------------------------------------------------------------------------------

def _uses() -> list[tuple[str, str]]:
    return [(p.name, m.group(1)) for p in PAGES
            for m in ROLE.finditer(p.read_text(encoding="utf-8"))]


def test_every_bench_key_in_the_book_resolves():
    uses = _uses()
    assert len(uses) >= 15 and {p for p, _ in uses} >= {"09_cost.md", "10_online_softmax.md",
                                                       "11_fused.md"}
    for page, text in uses:
        try:
            attnbook_bench.lookup(BENCH, text)
        except (KeyError, ValueError) as err:
            pytest.fail(f"{page}: {{bench}}`{text}`: {err}")


def test_the_role_formats_and_refuses():
    ratio = _values()["results"]["time_fwd.d64.T1024.online.ratio"]
    key = "results:time_fwd.d64.T1024.online.ratio"
    assert attnbook_bench.lookup(BENCH, key + ":.2f") == f"{ratio:.2f}"
    assert attnbook_bench.lookup(BENCH, key + ":.1f") == f"{ratio:.1f}"
    # no format spec: the number as the JSON stores it
    assert attnbook_bench.lookup(BENCH, "results:time_fwd.d64.T1024.online.ratio") == str(ratio)
    with pytest.raises(KeyError):
        attnbook_bench.lookup(BENCH, "results:time_fwd.d64.T999.fused")
    with pytest.raises(KeyError):
        attnbook_bench.lookup(BENCH, "no_such_file:x")
    with pytest.raises(ValueError):
        attnbook_bench.lookup(BENCH, "results")
    with pytest.raises(ValueError):  # text with a number's format spec
        attnbook_bench.lookup(BENCH, "results:targets.general_route.met:.2f")


def _sphinx_build(tmp_path, page: str) -> tuple[Path, Exception | None]:
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace

    src = tmp_path / "src"
    (src / "bench").mkdir(parents=True)
    (src / "bench" / "results.json").write_text(
        json.dumps({"values": {"a.ratio": 2.1, "a.met": "NO"}}), encoding="utf-8")
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\n"
        "extensions = ['attnbook_bench']\nbench_results_dir = 'bench'\n", encoding="utf-8")
    (src / "index.rst").write_text(f"Title\n=====\n\n{page}\n", encoding="utf-8")
    out = tmp_path / "html"
    try:
        with docutils_namespace():  # each build registers its nodes and roles afresh
            app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctree"), "html",
                         status=None, warning=None, warningiserror=True, freshenv=True)
            app.build()
    except Exception as err:  # what -W does to an error
        return out, err
    return out, None


def test_a_sphinx_build_pastes_the_value(tmp_path):
    out, err = _sphinx_build(tmp_path, "Ratio :bench:`results:a.ratio:.2f`, target "
                             ":bench:`results:a.met`.")
    assert err is None, err
    html = (out / "index.html").read_text(encoding="utf-8")
    assert '<span class="bench-value">2.10</span>' in html and ">NO</span>" in html


def test_a_missing_key_fails_the_build(tmp_path):
    _, err = _sphinx_build(tmp_path, "Ratio :bench:`results:a.missing:.2f`.")
    assert err is not None and "a.missing" in str(err)


# -- no typed benchmark numbers --------------------------------------------------------------

@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_page_types_a_benchmark_number(path):
    found = typed_benchmark_numbers(path.read_text(encoding="utf-8"), _values())
    assert not found, (
        f"{path.name} types numbers that a benchmark's results hold: {found}. Paste them with "
        "{bench}`FILE:KEY:SPEC` (see _ext/attnbook_bench.py), or, for a constant that only "
        "happens to equal a result, add <!-- not benchmark numbers: ... -->")


def test_the_checker_catches_typed_benchmark_numbers():
    values = {"results": {"time_fwd.x.online.ratio": 2.38, "time_fwd.x.fused": 4.69,
                          "slope": 1.412, "ratio": 2.1, "pct": 52, "time_fwd.x.spread": 7}}
    page = ("In the benchmark's run the ratio is 2.38× and the fused path takes 4.69 ms; the "
            "slope is 1.4, the ratio 2.10, 52% of matmul; spread 7%.\n")
    assert [n for n, _ in typed_benchmark_numbers(page, values)] == ["2.38×", "4.69", "1.4",
                                                                      "2.10", "52%"]


def test_the_checker_ignores_roles_math_code_other_contexts_and_exemptions():
    values = {"results": {"a": 2.38, "b": 4.5}}
    assert typed_benchmark_numbers(
        "In this run: {bench}`results:a:.2f`, $2.38$, `2.38`, and\n\n```python\nx = 2.38\n```\n",
        values) == []
    assert typed_benchmark_numbers("The variance is 2.38 here.\n", values) == []  # no context
    assert typed_benchmark_numbers(
        "<!-- not benchmark numbers: 4.5 -->\nThe benchmark: the formula gives 4.5.\n",
        values) == []


# -- the benchmarks' own writers -------------------------------------------------------------

class _Timing:
    def __init__(self, median: float):
        self.median, self.spread, self.repeats = median, 0.1, 3


def test_bench_positions_saves_tables_the_converter_reads(tmp_path, monkeypatch):
    import bench_positions

    monkeypatch.setattr(bench_positions, "compare", lambda calls, *a, **k: {
        name: _Timing(0.01 * (i + 1)) for i, name in enumerate(calls)})
    bench_positions.main(["--repeats", "1", "--save", str(tmp_path / "results_positions.md"),
                          "--allow-loaded"])  # CI's machine is busy; the load rule has its test
    values = json.loads((tmp_path / "results_positions.json").read_text())["values"]
    assert values["step_fused.rope.ratio_to_none"] == 4.0  # the fourth call, 40 ms / 10 ms
    assert values["step_explicit.none.median"] == 10.0
    assert values["sdpa_masks.float_bias_causal_merged.ratio_to_bool_key_mask"] == 2.5


def test_train_tasks_saves_a_table_the_converter_reads(tmp_path, monkeypatch):
    import train_tasks

    def fake_run(name, **changes):
        return {"task": name, "params": 101898, "seconds": 10.4, "steps": 150,
                "accuracy": 1.0, "chance": 0.1, "first_below": None if changes else 33,
                "changes": changes}

    monkeypatch.setattr(train_tasks, "run", fake_run)
    train_tasks.main(["--save", str(tmp_path / "train_results.md"), "--allow-loaded"])
    values = json.loads((tmp_path / "train_results.json").read_text())["values"]
    assert values["tasks.copy.ms_per_step"] == 69  # 10.4 s / 150 steps
    assert values["tasks.copy_no_position_embeddings.first_step_with_loss_0_05"] == "never"
    assert values["tasks.induction.parameters"] == 101898
