"""The benchmarks' results files: the Markdown a reader reads and the JSON the book pastes from.

Every benchmark writes its tables with :func:`write_results`, which writes ``NAME.md`` and, next
to it, ``NAME.json``: the values of the same text, read back by :func:`results_json_from_markdown`
(one function for both, so the two files cannot disagree; ``tests/test_bench_prose.py`` checks
that each stored .json is what the converter makes of its .md). The book's Sphinx role
``{bench}`` (``_ext/attnbook_bench.py``) pastes values from the JSON, so rerunning a benchmark
updates the chapters, and a key the new run no longer has fails the build.

Keys (flat, dot-separated; ``TABLE.ROW.COLUMN[.PART]``):

* ``TABLE`` names a table by the heading or paragraph above it (:data:`TABLES`), e.g.
  ``time_fwd``, ``memory``, ``targets``.
* ``ROW`` joins the row's key cells (the first ``n`` columns, :data:`TABLES`) with dots: a
  number is prefixed with its column's name (``d64.T1024``, ``threads1``), text is slugged
  (``fwd+bwd`` -> ``fwd_bwd``, ``one head`` -> ``one_head``). Rows that are sentences have short
  names (:data:`ROW_NAMES`): the target "fused ≤ 1.1× sdpa, every T ≥ 512, ..." is
  ``targets.fused_vs_sdpa``.
* ``COLUMN`` is the column's slugged name, parenthesised text dropped (``sdpa_3d``,
  ``fused GFLOP/s (% of matmul)`` -> ``fused_gflop_s``). A slug keeps letters, digits and ``_``;
  ``≤``/``≥`` become ``le``/``ge``, ``×`` becomes ``x``; parenthesised text is dropped unless two
  rows would then share a key.
* A cell such as ``0.642 (2.07×, ±10%)`` gives the leading number under the plain key and its
  parts under ``.ratio`` (2.07), ``.spread`` (10, in % of the median) and ``.pct`` (for
  ``63.6 (19%)``); a cell that does not start with a number is kept as text (``yes``, ``NO``).

Facts stated in sentences (``matmul_gflops``, ``kv_threads.cache.one_head``, ...) and facts
derived from the tables (``explicit_slope.up_to_T1024.min``, ``fused_over_sdpa.fwd.max``,
``targets.fused_vs_sdpa.limit``, ``.worst``, ``.min_T``) are listed in :data:`FACTS` and
:func:`derived`.

    python benchmarks/bench_results.py   # rewrite every .json from its .md (no benchmark run)
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEMS = ("results", "results_masks", "results_positions", "train_results", "bench_decode")

# Per results file: (pattern searched in the text above the table, table name, key columns).
TABLES: dict[str, list[tuple[str, str, int]]] = {
    "results": [(r"### Time, fwd \(", "time_fwd", 2), (r"### Time, fwd\+bwd", "time_fwd_bwd", 2),
                (r"### Padded rows, fwd \(", "padded_fwd", 2),
                (r"### Padded rows, fwd\+bwd", "padded_fwd_bwd", 2),
                (r"### One thread each", "one_thread_fwd", 2), (r"### Peak memory", "memory", 3),
                (r"### KV cache", "kv_cache", 2), (r"### Targets", "targets", 1)],
    "results_masks": [(r"## \(a\)", "packing", 3), (r"## \(b\)", "skipping", 3),
                      (r"## \(c\)", "flex", 1)],
    "results_positions": [(r"Training step.*fused \(SDPA\) path", "step_fused", 1),
                          (r"Training step.*explicit path", "step_explicit", 1),
                          (r"SDPA forward \+ backward", "sdpa_masks", 1)],
    "train_results": [(r"Training the tiny model", "tasks", 1)],
    "bench_decode": [(r"### Cached step against its floors", "floors", 2),
                     (r"### The library's own cost per step", "overhead", 1),
                     (r"### Batching", "batching", 1), (r"### Compiled step", "compiled", 1)],
}

# Per results file: (pattern with one group per key, keys) for numbers stated in sentences.
FACTS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "results": [(r"Matmul throughput \([^)]*\): ([\d.]+) GFLOP/s", ("matmul_gflops",)),
                (r"Whole run: (\d+) s", ("whole_run_s",))],
    "results_masks": [
        (r"Documents: (\d+), lengths (\d+)\.\.(\d+) \(median (\d+)\), (\d+) real tokens",
         ("packing.documents", "packing.shortest", "packing.longest", "packing.median_length",
          "packing.real_tokens")),
        (r"\*\*([\d.]+)% of them padding\*\*", ("packing.padding_pct",)),
        (r"First compiled call \(compile included\): \*\*([\d.]+) s\*\*", ("flex.first_call_s",))],
    "results_positions": [],
    "train_results": [],
    "bench_decode": [
        (r"read ([\d.]+) GB/s \(sum of 256 MiB\), copy ([\d.]+) GB/s",
         ("bandwidth.read_gb_s", "bandwidth.copy_gb_s")),
        (r"stays in L3\): ([\d.]+) GB/s", ("bandwidth.in_cache_gb_s",)),
        (r"same rounds: ([\d.]+) µs per almost empty operation \(add_ on 1 element\), "
         r"([\d.]+) µs per view", ("dispatch.per_op_us", "dispatch.per_view_us")),
        (r"for all of them\. Dispatch, timed in the same rounds: ([\d.]+) µs",
         ("batching.per_op_us",)),
        (r"First compiled call \(compile included[^)]*\): \*\*([\d.]+) s\*\*",
         ("compiled.first_call_s",)),
        (r"Load: load average ([\d.]+), ([\d.]+), ([\d.]+) on \d+ cores before, load average "
         r"([\d.]+), ([\d.]+), ([\d.]+)", tuple(f"load.{w}_{m}" for w in ("before", "after")
                                          for m in (1, 5, 15))),
        (r"Whole run: (\d+) s", ("whole_run_s",))],
}

# Short row keys for tables whose first cell is a sentence: (pattern, key with \\1 for groups).
ROW_NAMES: dict[str, list[tuple[str, str]]] = {
    "targets": [
        (r"^fused with (\w+) padding ≤", r"padded_time_\1"),
        (r"^fused with (\w+) padding: fwd peak memory", r"padded_memory_\1"),
        (r"^general route", "general_route"),
        (r"^fused ≤ [\d.]+× sdpa", "fused_vs_sdpa"),
        (r"^fused faster than nn.MultiheadAttention", "fused_vs_mha"),
        (r"^fused ≥ \d+% of matmul throughput at T=\d+, fwd$", "fused_matmul_share_fwd"),
        (r"^fused ≥ \d+% of matmul throughput at T=\d+, fwd\+bwd$", "fused_matmul_share_fwd_bwd"),
        (r"^online fwd peak memory", "online_memory"),
        (r"^online memory grows", "online_memory_growth"),
        (r"^online fwd time", "online_time"),
        (r"^KV cache ≥ .*, ([\w ]+)$", r"kv_speed_up_\1"),
        (r"^tiny model: the same tokens", "kv_same_tokens"),
    ],
}

NUMBER = r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"


def slug(text: str, keep_parens: bool = False) -> str:
    """A key part: lowercase letters, digits and ``_`` (see the module docstring)."""
    if not keep_parens:
        while re.search(r"\([^()]*\)", text):
            text = re.sub(r"\s*\([^()]*\)", "", text)
    text = text.replace("≤", " le ").replace("≥", " ge ").replace("×", "x")
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def number(text: str) -> int | float:
    """``18,335`` -> 18335, ``2.07`` -> 2.07, ``8.9e-08`` -> 8.9e-08."""
    text = text.replace(",", "")
    return float(text) if re.search(r"[.e]", text) else int(text)


def cell_values(text: str) -> dict[str, int | float | str]:
    """The parts of one table cell: ``""`` (the leading number, or the text), ratio, spread, pct."""
    text = text.strip().strip("*")
    m = re.match(rf"^±?({NUMBER})\s*[×%]?(?=$|\s*[(±])", text)
    if not m:
        return {} if text in ("", "–", "-") else {"": text}
    out: dict[str, int | float | str] = {"": number(m.group(1))}
    rest = text[m.end():]
    for part, pattern in (("ratio", rf"\(({NUMBER})×"), ("spread", rf"±({NUMBER})%"),
                          ("pct", rf"\(({NUMBER})%\)")):
        found = re.search(pattern, rest)
        if found:
            out[part] = number(found.group(1))
    return out


def tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Every Markdown table: (the text above it since the last table, header, rows of cells)."""
    out, above, lines = [], [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|?\s*$",
                                                                         lines[i + 1]):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append(("\n".join(above), header, rows))
            above = []
        else:
            above.append(lines[i])
            i += 1
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def short_name(table: str, first_cell: str) -> str | None:
    """The short key of a row whose first cell is a sentence (:data:`ROW_NAMES`), if any."""
    for pattern, short in ROW_NAMES.get(table, []):
        m = re.search(pattern, first_cell)
        if m:
            return slug(m.expand(short))
    return None


def target_key(name: str) -> str:
    """The row key of a target: its short name, else the slug of its sentence."""
    return short_name("targets", name) or slug(name)


def table_values(name: str, keys: int, header: list[str], rows: list[list[str]]) -> dict:
    """The flat values of one table (see the module docstring for the keys)."""
    def row_key(cells: list[str], keep_parens: bool) -> str:
        short = short_name(name, cells[0])
        if short is not None:
            return short
        parts = []
        for col, cell in zip(header[:keys], cells[:keys]):
            is_number = re.fullmatch(NUMBER, cell) is not None
            parts.append(f"{col}{cell}" if is_number else slug(cell, keep_parens))
        return ".".join(parts)

    plain = [row_key(r, False) for r in rows]
    row_keys = [row_key(r, True) if plain.count(k) > 1 else k for r, k in zip(rows, plain)]
    if len(set(row_keys)) != len(row_keys):
        raise ValueError(f"table {name}: two rows share a key: {row_keys}")
    out: dict = {}
    for key, cells in zip(row_keys, rows):
        if len(cells) != len(header):
            raise ValueError(f"table {name}, row {key}: {len(cells)} cells, {len(header)} columns")
        for col, cell in zip(header[keys:], cells[keys:]):
            for part, value in cell_values(cell).items():
                out[".".join(p for p in (name, key, slug(col), part) if p)] = value
    return out


def results_json_from_markdown(text: str, stem: str) -> dict:
    """The values of a results file's Markdown, as the JSON next to it holds them.

    Args:
        text: the Markdown a benchmark wrote (``benchmarks/STEM.md``).
        stem: which results file it is, one of :data:`STEMS` (names its tables and facts).

    Returns:
        ``{"source": "STEM.md", "values": {key: number or text}}``, keys as in the module
        docstring, tables first, then facts stated in sentences, then derived facts.
    """
    values: dict = {}
    found = tables(text)
    for pattern, name, keys in TABLES[stem]:
        match = [t for t in found if re.search(pattern, t[0])]
        if len(match) > 1:
            raise ValueError(f"{stem}: {len(match)} tables match {pattern!r}")
        for _, header, rows in match:  # a part the run skipped has no table and no keys
            values.update(table_values(name, keys, header, rows))
    for pattern, keys in FACTS[stem]:
        m = re.search(pattern, text)
        if m is not None:
            values.update({k: number(g) for k, g in zip(keys, m.groups())})
    values.update(derived(stem, text, values))
    data = {"source": f"{stem}.md", "values": values}
    load = LOAD_LINE.search(text)
    if load is not None:  # runs saved since the load rule (older files have no such line)
        values["run.load_1min"], values["run.cores"] = float(load.group(1)), int(load.group(2))
        data["quotable"] = load.group(3) is None
    return data


def _slope(t1: float, v1: float, t2: float, v2: float) -> float:
    return math.log(max(v2, 1e-9) / max(v1, 1e-9)) / math.log(t2 / t1)


def _rows(values: dict, prefix: str, suffix: str) -> list[tuple[list[str], float]]:
    """(row key parts, value) of every key ``prefix.ROW.suffix``, in table order."""
    pat = re.compile(re.escape(prefix) + r"\.(.+)\." + re.escape(suffix) + "$")
    return [(m.group(1).split("."), v) for k, v in values.items() if (m := pat.match(k))]


def _T(parts: list[str]) -> int:
    return int(next(p for p in parts if p.startswith("T"))[1:])


def derived(stem: str, text: str, values: dict) -> dict:
    """Facts the chapters state, computed from the tables: ranges, slopes, targets' limits."""
    out: dict = {}
    if stem == "bench_decode":
        return derived_decode(values)
    if stem != "results":
        return out
    for mode in ("fwd", "fwd_bwd"):  # the explicit module's local log-log slopes of time
        pts = [(_T(p), v) for p, v in _rows(values, f"time_{mode}", "explicit") if p[0] == "d64"]
        for (t1, v1), (t2, v2) in zip(pts, pts[1:]):
            out[f"explicit_slope.{mode}.T{t2}"] = round(_slope(t1, v1, t2, v2), 4)
    slopes = [(int(k.rsplit("T", 1)[1]), v) for k, v in out.items()]
    for part, keep in (("up_to_T1024", lambda t: t <= 1024), ("beyond_T1024", lambda t: t > 1024)):
        chosen = [v for t, v in slopes if keep(t)]
        if chosen:
            out[f"explicit_slope.{part}.min"], out[f"explicit_slope.{part}.max"] = (
                min(chosen), max(chosen))
    for method, name in (("fused", "fused_over_sdpa"), ("online", "online_over_sdpa")):
        for mode in ("fwd", "fwd_bwd"):
            pts = [(_T(p), v) for p, v in _rows(values, f"time_{mode}", f"{method}.ratio")
                   if p[0] == "d64"]
            for part, low in (("", 0), (".T_ge_512", 512)):
                chosen = [v for t, v in pts if t >= low]
                if chosen:
                    out[f"{name}.{mode}{part}.min"] = min(chosen)
                    out[f"{name}.{mode}{part}.max"] = max(chosen)
    for mode in ("fwd", "fwd_bwd"):  # the smallest peak-memory entry of each row
        rows: dict[str, list[float]] = {}
        for k, v in values.items():
            m = re.match(rf"memory\.(d\d+\.T\d+\.{mode})\.[a-z_0-9]+$", k)
            if m and isinstance(v, (int, float)):
                rows.setdefault(m.group(1), []).append(v)
        out.update({f"memory.{row}.min": min(vs) for row, vs in rows.items()})
    for method in ("online", "online_autograd", "explicit", "fused"):
        for mode in ("fwd", "fwd_bwd"):  # slope of peak memory between the two largest T
            pts = [(_T(p), v) for p, v in _rows(values, "memory", method)
                   if p[0] == "d64" and p[2] == mode]
            if len(pts) >= 2:
                (t1, v1), (t2, v2) = pts[-2:]
                out[f"memory_slope.{method}.{mode}"] = round(_slope(t1, v1, t2, v2), 4)
    targets = [t for t in tables(text) if re.search(r"### Targets", t[0])]
    for row in targets[0][2] if targets else []:  # each target's limit, read off its name
        key = f"targets.{target_key(row[0])}"
        limit = re.search(rf"[≤≥] ({NUMBER})\s*[×%]", row[0])
        if limit:
            out[f"{key}.limit"] = number(limit.group(1))
        worst = re.search(rf"worst (?:[\w/]+ )?({NUMBER})×", row[1])
        if worst:
            out[f"{key}.worst"] = number(worst.group(1))
        low = re.search(r"T ≥ (\d+)", row[0])
        if low:
            out[f"{key}.min_T"] = int(low.group(1))
    gains = re.search(r"with the cache (.+?); recomputing (.+?)\. ", text)
    if gains:
        for side, part in zip(("cache", "recomputing"), gains.groups()):
            for name, g in re.findall(rf"([\w ]+?) ({NUMBER})×", part):
                out[f"kv_threads.{side}.{slug(name)}"] = number(g)
    diffs = re.search(r"cache against recomputing \(float32\): (.+?); ", text)
    if diffs:
        for name, g in re.findall(rf"([\w ]+?): ({NUMBER})", diffs.group(1)):
            out[f"kv_max_diff.{slug(name)}"] = number(g)
    return out


def derived_decode(values: dict) -> dict:
    """bench_decode's ranges: step ÷ each floor over every row, per generator and in all, and
    the batch that gives the most tokens per second, with its gain over batch 1."""
    out: dict = {}
    for col in ("step_dispatch_floor", "step_memory_bound", "step_in_cache_bound"):
        rows = _rows(values, "floors", col)
        for name in sorted({p[0] for p, _ in rows}) + ["all"]:
            chosen = [v for p, v in rows if name in ("all", p[0])]
            out[f"floors.{name}.{col}.min"], out[f"floors.{name}.{col}.max"] = (
                min(chosen), max(chosen))
    for p, v in _rows(values, "overhead", "hot_ops"):  # operations the library adds to a step
        bare = values.get(f"overhead.{'.'.join(p)}.bare_ops")
        if isinstance(bare, int):
            out[f"overhead.{'.'.join(p)}.extra_ops"] = v - bare
        checked = values.get(f"overhead.{'.'.join(p)}.checked_ops")
        if isinstance(checked, int):  # operations the per-step checks dispatch
            out[f"overhead.{'.'.join(p)}.check_ops"] = checked - v
    rate = {int(p[0][5:]): v for p, v in _rows(values, "batching", "tokens_s")}
    if rate:
        best = max(rate, key=rate.get)
        out["batching.best.batch"], out["batching.best.tokens_s"] = best, rate[best]
        out["batching.best.gain"] = round(rate[best] / rate[min(rate)], 2)
    return out


class LoadedMachine(SystemExit):
    """Raised by :func:`check_load`: the machine was busier than its cores at the start."""


LOAD_LINE = re.compile(r"Load at the start: 1-minute load average ([\d.]+) on (\d+) cores"
                       r"( \(NOT QUOTABLE)?")


def check_load(allow_loaded: bool = False, load: float | None = None,
               cores: int | None = None) -> dict:
    """The load rule of "How we measure", checked before a benchmark that saves starts timing.

    Args:
        allow_loaded: save anyway (``--allow-loaded``); the file is then marked not quotable.
        load, cores: the 1-minute load average and the core count (default: this machine's,
            ``os.getloadavg()[0]`` and ``os.cpu_count()``).

    Returns:
        ``{"load_1min", "cores", "quotable"}``, for :func:`write_results` to record.

    Raises:
        LoadedMachine: the load exceeds the core count and ``allow_loaded`` is not set.
    """
    load = os.getloadavg()[0] if load is None else load
    cores = (os.cpu_count() or 1) if cores is None else cores
    quotable = load <= cores
    if not quotable and not allow_loaded:
        raise LoadedMachine(
            f"refusing to time for a results file: the 1-minute load average is {load:.2f}, "
            f"above the {cores} cores of this machine. Wait until the machine is quiet, or pass "
            "--allow-loaded to save a file marked NOT QUOTABLE.")
    return {"load_1min": round(load, 2), "cores": cores, "quotable": quotable}


def add_load_argument(parser) -> None:
    """The ``--allow-loaded`` flag every benchmark that saves takes."""
    parser.add_argument("--allow-loaded", action="store_true",
                        help="with --save: time and save even when the 1-minute load average "
                        "exceeds the core count; the file is marked NOT QUOTABLE")


def load_line(load: dict) -> str:
    """The sentence a results file records the load in (read back by :data:`LOAD_LINE`)."""
    mark = "" if load["quotable"] else (
        " (NOT QUOTABLE: saved with --allow-loaded above the core count)")
    return (f"Load at the start: 1-minute load average {load['load_1min']:.2f} on "
            f"{load['cores']} cores{mark}.")


def write_results(path: Path, text: str, title: str | None = None, command: str | None = None,
                  kind: str | None = None, load: dict | None = None) -> tuple[Path, Path]:
    """Write a benchmark's results as Markdown and, next to it, the JSON of the same text.

    Args:
        path: ``benchmarks/STEM.md``; the JSON goes to ``benchmarks/STEM.json``.
        text: the tables and sentences the benchmark printed.
        title: a first heading, with the date and the command under it, if given.
        command: the command line that produced ``text``.
        kind: which of :data:`STEMS` the text is (default: the file's stem), for its tables.
        load: what :func:`check_load` returned at the start of the run; recorded under the
            title (``run.load_1min``, ``run.cores`` and ``quotable`` in the JSON). Every
            benchmark script passes it.

    Returns:
        The paths of the Markdown and the JSON file.
    """
    path = Path(path)
    if load is not None:
        text = f"{load_line(load)}\n\n{text}"
    if title is not None:
        stamp = time.strftime("%Y-%m-%d %H:%M %Z")
        ran = f" with `{command}`" if command else ""
        text = f"# {title}\n\nRun on {stamp}{ran}.\n\n{text}"
    text = text.rstrip("\n") + "\n"
    data = results_json_from_markdown(text, kind or path.stem)  # raises before anything is written
    path.write_text(text, encoding="utf-8")
    json_path = path.with_suffix(".json")
    json_path.write_text(dump(data), encoding="utf-8")
    return path, json_path


def dump(data: dict) -> str:
    """The JSON text of a results file (one value a line, so a rerun's diff reads well)."""
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def main() -> None:
    for stem in STEMS:
        md = HERE / f"{stem}.md"
        data = results_json_from_markdown(md.read_text(encoding="utf-8"), stem)
        md.with_suffix(".json").write_text(dump(data), encoding="utf-8")
        print(f"wrote {md.with_suffix('.json').name}: {len(data['values'])} values")


if __name__ == "__main__":
    main()
