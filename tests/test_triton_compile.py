"""Every Triton kernel, compiled ahead of time for the T4 (sm75), A100 (sm80) and H100 (sm90).

Head widths 64 and 128 for every dtype; 80, 96 (float16) and 256 (float16, float32) more
briefly. The launches that do not fit (the T4's backward at d = 256; on sm86/sm89, sm80's float32
backward at d = 256) are compiled too, and check_fits must refuse them before launch.

No GPU is needed: Triton compiles for a named target (attnbook.gpu.compile_check). The
compilation runs once per test session, in a subprocess with the interpreter off, over every
launch the library makes (attnbook.gpu.configs), and these tests read its table: each case
compiles, fits the architecture's shared memory per block, and its matrix products become the
instruction the book says (tensor cores from sm80 on, FMA on the T4).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from attnbook.gpu.compile_check import compile_table, launch_cases, markdown_table  # noqa: E402
from attnbook.gpu.configs import (  # noqa: E402
    ARCHS,
    REFUSED,
    SHARED_LIMIT,
    TABLE,
    DoesNotFit,
    arch_of,
    check_fits,
    default_precision,
    head_class,
    launch_config,
)


@pytest.fixture(scope="module")
def rows():
    """The compile table, computed once (a minute or two on one core; Triton caches kernels)."""
    return compile_table()


def test_every_launch_compiles_for_every_architecture(rows):
    cases = launch_cases()
    assert len(rows) == len(cases) > 100
    assert {r["arch"] for r in rows} == set(ARCHS) == {75, 80, 90}
    kernels = {r["kernel"] for r in rows}
    assert kernels == {"forward", "backward", "decode split", "decode merge"}
    for r in rows:  # the head widths real models use; all three dtypes
        assert r["d"] in (64, 80, 96, 128, 256) and r["dtype"] in ("fp16", "bf16", "fp32")
    dtypes = {(r["kernel"], r["arch"], r["d"], r["dtype"]) for r in rows}
    widths = {64: ("fp16", "bf16", "fp32"), 128: ("fp16", "bf16", "fp32"), 80: ("fp16",),
              96: ("fp16",), 256: ("fp16", "fp32")}
    for arch in ARCHS:
        for d, dts in widths.items():
            for dt in dts:
                for kernel in ("forward", "backward", "decode split"):
                    assert (kernel, arch, d, dt) in dtypes


def refused_key(r):
    """The :data:`REFUSED` key a compiled row would have on its own GPU."""
    return (r["arch"], r["kernel"], r["dtype"] == "fp32", head_class(r["d"]))


def test_shared_memory_fits_each_architecture_or_is_refused(rows):
    """No OutOfResources at launch: each launch fits the per-block limit, or is one that
    REFUSED lists, which check_fits refuses before launch naming the shared memory it needs.
    sm80's rows also fit the 99 KB of sm86/sm89, which use them, except the ones REFUSED lists
    for sm86. A launch is refused where any recorded Triton release does not fit it."""
    from attnbook.gpu.compile_check import recorded_table, recorded_versions

    def too_big(table):
        return ({refused_key(r) for r in table if r["shared"] > SHARED_LIMIT[r["arch"]]}
                | {(86,) + refused_key(r)[1:] for r in table
                   if r["arch"] == 80 and r["shared"] > SHARED_LIMIT[86]})

    assert too_big(rows) <= set(REFUSED) and too_big(rows)
    assert set(REFUSED) == set().union(*(too_big(recorded_table(v))
                                         for v in recorded_versions()))
    assert all(r["fits"] == (r["shared"] <= SHARED_LIMIT[r["arch"]]) for r in rows)
    assert all(r["shared"] > 0 for r in rows)  # the number was read, not defaulted
    for r in rows:
        if r["kernel"] == "decode merge":
            continue
        dtype = torch.float32 if r["dtype"] == "fp32" else torch.float16
        kernel = "decode" if r["kernel"].startswith("decode") else r["kernel"]
        for arch in (r["arch"], 86, 89) if r["arch"] == 80 else (r["arch"],):
            key = (86 if arch in (86, 89) else r["arch"],) + refused_key(r)[1:]
            if key not in REFUSED:
                check_fits(kernel, arch, dtype, r["d"])  # fits: not refused
                continue
            with pytest.raises(DoesNotFit, match=f"KiB \\(Triton [0-9.]+\\) of shared memory "
                               f"per block, and sm{arch} gives "
                               f"{SHARED_LIMIT[arch] / 1024:.0f} KiB"):
                check_fits(kernel, arch, dtype, r["d"])


def test_check_fits_refuses_wide_heads_on_a_gpu_only():
    """Fast: no compilation. d above 256 is refused on every GPU, never in the interpreter."""
    for arch in (75, 80, 86, 90):
        with pytest.raises(DoesNotFit, match="d = 512"):
            check_fits("forward", arch, torch.float16, 512)
    check_fits("backward", None, torch.float32, 512)
    check_fits("backward", 90, torch.float32, 256)
    with pytest.raises(DoesNotFit, match="sm75.*64 KiB"):
        check_fits("backward", 75, torch.float16, 200)


def test_tensor_cores_from_sm80_fma_on_the_t4(rows):
    """fp16/bf16 tl.dot: mma on sm80, wgmma (or mma) on sm90, FMA on sm75 (Triton >= 3.2);
    float32: tensor cores with tf32x3 (the default from sm80), FMA with "ieee"."""
    for r in rows:
        if r["kernel"] == "decode merge":
            assert r["instruction"] == "no dot"
            continue
        if r["arch"] == 75 or (r["dtype"] == "fp32" and r["precision"] == "ieee"):
            want = {"fma"}
        elif r["arch"] == 80:
            want = {"mma"}
        else:
            want = {"wgmma", "mma"}
        assert r["instruction"] in want, r
    assert any(r["instruction"] == "wgmma" for r in rows if r["arch"] == 90)


def test_spills_are_reported_and_small_in_half_precision(rows):
    for r in rows:
        assert isinstance(r["spill_stores"], int) and r["spill_stores"] >= 0
        assert 0 < r["registers"] <= 255
    # The forward and decoding kernels in fp16/bf16 keep everything in registers on every GPU
    # up to d = 128; at d = 256 the H100's forward (sm80's 64 x 64 tiles) spills a little.
    half = [r for r in rows if r["dtype"] != "fp32" and r["kernel"] != "backward"]
    assert [r for r in half if r["spill_stores"] and r["d"] <= 128] == []


def test_markdown_table_has_a_column_per_architecture(rows):
    table = markdown_table(rows)
    assert "| sm75 | sm80 | sm90 |" in table
    assert table.count("does not fit") == sum(not r["fits"] for r in rows) > 0
    assert table.count("\n") == len({(r["kernel"], r["dtype"], r["d"], r["causal"],
                                      r["precision"]) for r in rows}) + 1


def test_launch_table_covers_every_gpu_and_dtype():
    """Fast: no compilation. Every capability from 7.5 gets a row; older ones are refused."""
    for cc in [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]:
        arch = arch_of(cc)
        for kernel in ("forward", "backward", "decode"):
            for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
                for d in (16, 64, 80, 96, 128, 256):
                    cfg = launch_config(kernel, arch, dtype, d)
                    assert cfg.block_n >= 16 and cfg.block_m >= 16
    assert arch_of((8, 6)) == 86 and arch_of((9, 0)) == 90 and arch_of(None) is None
    with pytest.raises(ValueError, match="7.5"):
        arch_of((7, 0))
    assert len(TABLE) + sum(k[0] != 86 for k in REFUSED) == 2 * 3 * 2 * 3
    assert all(k not in TABLE for k in REFUSED)
    assert SHARED_LIMIT[75] == 64 * 1024 and SHARED_LIMIT[80] == 163 * 1024
    assert default_precision(80, torch.float32) == "tf32x3"
    assert default_precision(75, torch.float32) == "ieee"
    assert default_precision(None, torch.float32) == "ieee"
    assert default_precision(90, torch.float16) == "ieee"  # ignored for 16-bit inputs


def test_the_record_of_this_triton_matches_a_fresh_compilation(rows):
    """compiled/triton-<version>.json, which the labs read to show another release's table,
    is what this release compiles now (`make test` checks 3.9 here and 3.6 in `triton36`)."""
    import triton

    from attnbook.gpu.compile_check import RECORD_FIELDS, recorded_table, recorded_versions

    assert {"3.6.0", "3.9.0"} <= set(recorded_versions())
    if triton.__version__ not in recorded_versions():
        pytest.fail(f"no compile record for Triton {triton.__version__}: write it with "
                    "`python -m attnbook.gpu.compile_check --record`")
    kept = recorded_table(triton.__version__)
    fresh = [{k: r[k] for k in RECORD_FIELDS} for r in rows]
    changed = [(k, f) for k, f in zip(kept, fresh) if k != f]
    assert len(kept) == len(fresh) and not changed, (
        f"Triton {triton.__version__} now compiles {len(changed)} launches differently from its "
        f"record, e.g. {changed[:1]}; re-record it (python -m attnbook.gpu.compile_check "
        "--record) and re-execute Labs 17 and 18")


def test_recorded_table_refuses_an_unknown_release_or_case():
    from attnbook.gpu.compile_check import Case, recorded_table

    with pytest.raises(ValueError, match="no compile record for Triton 0.1"):
        recorded_table("0.1")
    odd = Case("forward", 75, "fp16", 64, True, "ieee", launch_config("forward", 75,
                                                                      torch.float16, 64))
    odd = Case(**{**odd.__dict__, "d": 32})
    with pytest.raises(ValueError, match="lacks 1 of these cases"):
        recorded_table("3.6.0", [odd])


def test_differences_names_what_another_release_compiles_differently():
    """Labs 17 and 18 paste these beside their tables: Triton 3.6's T4 float32 backward (d = 64)
    differs from 3.9's in shared memory, registers and spills; a row equals itself."""
    from attnbook.gpu.compile_check import differences, recorded_table

    t39, t36 = recorded_table("3.9.0"), recorded_table("3.6.0")
    key = ("backward", 75, "fp32", 64)
    row39, row36 = ([r for r in t if (r["kernel"], r["arch"], r["dtype"], r["d"]) == key][0]
                    for t in (t39, t36))
    said = differences(row39, row36)
    assert said.startswith(f"{row36['shared'] // 1024} KiB, {row36['registers']} registers, ")
    assert f"{row36['spill_stores']} B spilled" in said and "fma" not in said
    assert differences(row39, row39) == ""
    with pytest.raises(ValueError, match="not the same launch"):
        differences(row39, {**row39, "block_m": row39["block_m"] * 2})


def test_t4_occupancy_from_the_records():
    """Fast: no compilation. What a T4's SM holds at once (ch. 17-18), from both releases'
    records: every 16-bit forward and backward launch one program (8 warps); the float32 forward
    at d = 64 two, with its 16-key blocks, where 64 x 32 would need 256 B over half the SM."""
    from attnbook.gpu.compile_check import recorded_table, t4_occupancy

    # The arithmetic: 128 registers x 32 threads x 8 warps is half the SM's 65,536 registers;
    # 129 rounds up to 136 per thread (4,352 per warp), and a second program no longer fits.
    row = {"arch": 75, "registers": 128, "num_warps": 8, "shared": 32 * 1024}
    assert t4_occupancy(row) == {"programs": 2, "warps": 16,
                                 "limits": ["registers", "shared memory"]}
    assert t4_occupancy({**row, "registers": 129})["programs"] == 1
    assert t4_occupancy({**row, "shared": 32 * 1024 + 256})["limits"] == ["shared memory"]
    with pytest.raises(ValueError, match="sm75"):
        t4_occupancy({**row, "arch": 80})
    for version in ("3.9.0", "3.6.0"):
        t4 = [r for r in recorded_table(version) if r["arch"] == 75 and r["fits"]]
        for r in t4:
            if r["kernel"] in ("forward", "backward") and r["dtype"] != "fp32":
                assert t4_occupancy(r)["programs"] == 1 and r["num_warps"] == 8, r
        fwd32 = [r for r in t4 if (r["kernel"], r["dtype"], r["d"]) == ("forward", "fp32", 64)]
        assert len(fwd32) == 1 and (fwd32[0]["block_m"], fwd32[0]["block_n"]) == (64, 16)
        assert t4_occupancy(fwd32[0]) == {"programs": 2, "warps": 16, "limits": ["shared memory"]}
