"""Compile every Triton kernel ahead of time for GPUs nobody here has, and say what each uses.

Triton can compile for a named GPU without one: ``triton.compile`` with a
``GPUTarget("cuda", 75 | 80 | 90, 32)`` produces PTX and a cubin. From them this module reads
what a reader's GPU will run: the shared memory a block asks for (``metadata.shared``, which
must stay within :data:`attnbook.gpu.configs.SHARED_LIMIT` or the launch fails with
``OutOfResources``), registers and spill stores per thread (``ptxas -v``, the assembler that
ships inside the Triton wheel), and which instruction the matrix products became: ``wgmma``
(Hopper's warpgroup tensor-core instruction), ``mma`` (tensor cores, sm80 on) or ``fma``
(plain fused multiply-adds: what ``tl.dot`` becomes below sm80 since Triton 3.2, and for
float32 with ``"ieee"`` precision).

The cases are the launches the library makes: :func:`launch_cases` takes block sizes, warps
and stages from :mod:`attnbook.gpu.configs`. Compiling needs Triton's compiler, not its
interpreter, so a process that interprets (``TRITON_INTERPRET=1``, as the labs and tests on a
CPU do) runs the compilation in a fresh subprocess: :func:`compile_table`.

Run ``python -m attnbook.gpu.compile_check`` for the table as Markdown.

A Colab GPU runtime ships its own Triton (3.6), not the one this book pins (3.9), and the two
compile the same kernel differently. Each release's table of every launch is kept in
``compiled/triton-<version>.json`` (package data): ``python -m attnbook.gpu.compile_check
--record`` writes the one of the Triton it runs under, :func:`recorded_table` reads it back, and
``tests/test_triton_compile.py`` fails when the record of the running release no longer matches
a fresh compilation, so the labs can show the other release's numbers without having it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .configs import (
    ARCHS,
    SHARED_LIMIT,
    LaunchConfig,
    backward_config,
    decoding_config,
    default_precision,
    forward_config,
)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
HEAD_DIMS = (64, 128)
"""The head widths compiled for every dtype and kernel; :func:`launch_cases` adds 80, 96, 256."""
EXTRA_HEAD_DIMS = (80, 96, 256)


@dataclass(frozen=True)
class Case:
    """One kernel compiled for one GPU, with the launch configuration the library uses."""

    kernel: str  # "forward", "backward", "decode split" or "decode merge"
    arch: int  # compute capability as a number: 75, 80, 90
    dtype: str  # "fp16", "bf16" or "fp32"
    d: int  # head width
    causal: bool
    precision: str  # tl.dot's input precision (matters for fp32 only)
    config: LaunchConfig


@dataclass(frozen=True)
class Result:
    """What the compiler reports for one :class:`Case`."""

    case: Case
    shared: int  # bytes of shared memory per block
    limit: int  # the architecture's per-block maximum
    registers: int  # per thread
    spill_stores: int  # bytes per thread
    instruction: str  # "wgmma", "mma" or "fma"

    @property
    def fits(self) -> bool:
        return self.shared <= self.limit


def launch_cases(archs=ARCHS) -> list[Case]:
    """Every (kernel, architecture, dtype, head width) the library launches, with its config.

    Head widths 64 and 128, the table's first two classes: forward and backward causal for
    every dtype, not causal for float16 (the same tiles without the diagonal loop); float32
    with the default precision, and the forward also with ``"ieee"`` where that is not the
    default (Lab 17 compares the two). Flash-Decoding: the split kernel for every dtype, the
    merge once per head width (it reads float32 partials). Then the other widths real models
    use, more briefly: 80 and 96 (Phi-2, Stable Diffusion; 128-wide tiles with masked columns)
    in float16, causal, each kernel with a ``tl.dot``; 256 (Gemma) in float16 and float32, each
    kernel, the launches :data:`~attnbook.gpu.configs.REFUSED` included (they must not fit).
    """
    cases = []
    for arch in archs:
        for d in HEAD_DIMS:
            for name, dtype in DTYPES.items():
                prec = default_precision(arch, dtype)
                fwd, bwd = forward_config(arch, dtype, d), backward_config(arch, dtype, d)
                for causal in (True, False) if name == "fp16" else (True,):
                    cases.append(Case("forward", arch, name, d, causal, prec, fwd))
                    cases.append(Case("backward", arch, name, d, causal, prec, bwd))
                if name == "fp32" and prec != "ieee":
                    cases.append(Case("forward", arch, name, d, True, "ieee", fwd))
                cases.append(Case("decode split", arch, name, d, False, prec,
                                  decoding_config(arch, dtype, d)))
            cases.append(Case("decode merge", arch, "fp16", d, False, "ieee",
                              LaunchConfig(1, 1, 4, 1)))
        for d, dtypes in ((80, ("fp16",)), (96, ("fp16",)), (256, ("fp16", "fp32"))):
            for name in dtypes:
                dtype = DTYPES[name]
                prec = default_precision(arch, dtype)
                cases.append(Case("forward", arch, name, d, True, prec,
                                  forward_config(arch, dtype, d)))
                cases.append(Case("backward", arch, name, d, True, prec,
                                  backward_config(arch, dtype, d)))
                cases.append(Case("decode split", arch, name, d, False, prec,
                                  decoding_config(arch, dtype, d)))
    return cases


def _signature(case: Case):
    """Triton's signature, compile-time constants and alignment hints for a case.

    Pointers are taken 16-byte aligned and the strides multiples of 16, as the runtime
    specialises them for tensors laid out (B, h, T, d) with d = 64 or 128.
    """
    from . import kernels

    t = {"fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32"}[case.dtype]
    cfg, d = case.config, case.d
    d_pad = max(16, 1 << (d - 1).bit_length())  # as the host pads it (flash._d_pad)
    if case.kernel == "forward":
        fn = kernels.flash_forward_kernel
        types = [t, t, t, t, "*fp32", "*i8", "fp64", "i32", "i32", "i32", "i32"] + ["i32"] * 9
        const = {"CAUSAL": case.causal, "HAS_PAD": False, "PRECISION": case.precision,
                 "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "D": d, "D_PAD": d_pad}
        strides = range(11, 20)
    elif case.kernel == "backward":
        fn = kernels.flash_backward_kernel
        types = [t, t, t, t, "*fp32", "*fp32", "*fp32", t, t, "*i8", "fp64", "fp64", "i32",
                 "i32", "i32", "i32"] + ["i32"] * 9
        const = {"CAUSAL": case.causal, "HAS_PAD": False, "PRECISION": case.precision,
                 "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "D": d, "D_PAD": d_pad}
        strides = range(16, 25)
    elif case.kernel == "decode split":
        fn = kernels.flash_decoding_split_kernel
        types = [t, t, t, "*fp32", "*fp32", "*i8", "fp64", "i32", "i32", "i32", "i32",
                 "i32"] + ["i32"] * 8
        const = {"HAS_PAD": False, "PRECISION": case.precision, "BLOCK_N": cfg.block_n,
                 "G_PAD": 16, "D": d, "D_PAD": d_pad}
        strides = range(12, 20)
    else:
        fn = kernels.flash_decoding_merge_kernel
        types = ["*fp32", "*fp32", t, "i32"]
        const = {"S_PAD": 16, "D": d, "D_PAD": d_pad}
        strides = ()
    names = fn.arg_names
    signature = {name: "constexpr" if name in const else types[i] for i, name in enumerate(names)}
    aligned = [i for i, ty in enumerate(types) if ty.startswith("*")] + list(strides)
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    return fn, signature, const, attrs


def compile_case(case: Case) -> Result:
    """Compile one case for its architecture and read shared memory, registers and spills."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, signature, const, attrs = _signature(case)
    printed = io.StringIO()  # with TRITON_DUMP_PTXAS_LOG=1, Triton prints ptxas's log here
    with contextlib.redirect_stdout(printed):
        compiled = triton.compile(
            ASTSource(fn=fn, signature=signature, constexprs=const, attrs=attrs),
            target=GPUTarget("cuda", case.arch, 32),
            options={"num_warps": case.config.num_warps, "num_stages": case.config.num_stages})
    ptx = compiled.asm["ptx"]
    log = printed.getvalue()
    if "bytes spill stores" not in log:  # Triton's cache had the kernel: run ptxas -v here
        log = _ptxas_log(ptx, case.arch)
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", log).group(1))
    if case.kernel == "decode merge":  # no tl.dot: a weighted sum of n_split rows
        kind = "no dot"
    else:
        kind = "wgmma" if "wgmma.mma_async" in ptx else "mma" if re.search(r"\bmma\.sync", ptx) \
            else "fma"
    return Result(case, compiled.metadata.shared, SHARED_LIMIT[case.arch], registers, spills,
                  kind)


def kernel_ir(case: Case, stage: str = "ttir") -> str:
    """One case compiled for its architecture: the text of one stage (``"ttir"``, ``"ttgir"``,
    ``"llir"``, ``"ptx"``), e.g. to check that pointer offsets are 64-bit."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, signature, const, attrs = _signature(case)
    with contextlib.redirect_stdout(io.StringIO()):
        compiled = triton.compile(
            ASTSource(fn=fn, signature=signature, constexprs=const, attrs=attrs),
            target=GPUTarget("cuda", case.arch, 32),
            options={"num_warps": case.config.num_warps, "num_stages": case.config.num_stages})
    return compiled.asm[stage]


def _ptxas_log(ptx: str, arch_number: int) -> str:
    """``ptxas -v``'s report (registers and spills per thread) for PTX compiled for an arch."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        arch = f"sm_{arch_number}a" if arch_number >= 90 else f"sm_{arch_number}"
        cmd = [_ptxas(arch_number), "-v", f"--gpu-name={arch}", src, "-o",
               os.path.join(tmp, "k.o")]
        # Triton 3.9 assembles with --regAllocOptLevel=2; an older ptxas may not know it.
        out = subprocess.run(cmd[:2] + ["--regAllocOptLevel=2"] + cmd[2:], capture_output=True,
                             text=True)
        if out.returncode:
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return out.stderr


def _ptxas(arch: int) -> str:
    """The ptxas that Triton itself uses for this architecture (shipped in its wheel)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return get_ptxas(arch).path
    except ImportError:  # Triton before 3.4
        from triton.backends.nvidia.compiler import _path_to_binary

        return _path_to_binary("ptxas")[0]


def compile_all(cases: list[Case] | None = None) -> list[Result]:
    """Compile every case in this process (which must not be interpreting Triton)."""
    from .triton_env import interpreting

    if interpreting():
        raise RuntimeError("Triton's interpreter is on in this process; use compile_table, "
                           "which compiles in a subprocess")
    cases = cases or launch_cases()
    workers = min(4, os.cpu_count() or 1)
    if workers == 1:
        return [compile_case(case) for case in cases]
    # Compilation is CPU-bound Python and ptxas: one process per core.
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(compile_case, cases))


def compile_table(cases: list[Case] | None = None) -> list[dict]:
    """Compile every case, in a fresh subprocess with the interpreter off, as plain rows.

    Returns:
        One dict per case: kernel, arch, dtype, d, causal, precision, block_m, block_n,
        num_warps, num_stages, shared, limit, registers, spill_stores, instruction, fits.
    """
    env = {"TRITON_DEFAULT_FP_FUSION": "1", **os.environ, "TRITON_INTERPRET": "0",
           "TRITON_DUMP_PTXAS_LOG": "1"}
    payload = json.dumps([_case_dict(c) for c in (cases or launch_cases())])
    out = subprocess.run([sys.executable, "-m", "attnbook.gpu.compile_check", "--json"],
                         input=payload, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"compiling the kernels failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout)


def markdown_table(rows: list[dict]) -> str:
    """The rows as a Markdown table: one line per kernel, dtype and head width, one column
    group per architecture (shared KiB, registers, spill bytes, instruction)."""
    archs = sorted({r["arch"] for r in rows})
    keys = []
    for r in rows:
        key = (r["kernel"], r["dtype"], r["d"], r["causal"], r["precision"])
        if key not in keys:
            keys.append(key)
    by = {(r["kernel"], r["dtype"], r["d"], r["causal"], r["precision"], r["arch"]): r
          for r in rows}
    head = "| kernel | dtype | d | " + " | ".join(f"sm{a}" for a in archs) + " |"
    lines = [head, "|" + "---|" * (3 + len(archs))]
    for kernel, dtype, d, causal, prec in keys:
        label = kernel + ("" if causal or kernel.startswith("decode") else ", not causal")
        dt = dtype if dtype != "fp32" else f"fp32 {prec}"
        cells = []
        for a in archs:
            r = by.get((kernel, dtype, d, causal, prec, a))
            if r is None:  # this precision is not the default there
                cells.append("—")
                continue
            cells.append(f"{r['shared'] / 1024:.0f} KiB, {r['registers']} reg, "
                         f"{r['spill_stores']} B spill, {r['instruction']}"
                         + ("" if r["fits"] else " **does not fit**"))
        lines.append(f"| {label} | {dt} | {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(row: dict) -> str:
    """One table cell: launch configuration, shared memory, registers, spills, instruction."""
    fits = "" if row["fits"] else ", does not fit"
    return (f"{row['block_m']}×{row['block_n']}, {row['num_warps']} warps, "
            f"{row['num_stages']} stage{'s' if row['num_stages'] != 1 else ''}: "
            f"{row['shared'] / 1024:.0f} KiB, "
            f"{row['registers']} registers, {row['spill_stores']} B spilled, "
            f"{row['instruction']}{fits}")


def differences(row: dict, other: dict) -> str:
    """What ``other``, the same launch compiled by another Triton release, reports differently.

    Args:
        row, other: two rows of :func:`compile_table` or :func:`recorded_table` for one launch.

    Returns:
        The fields that differ, with ``other``'s values as :func:`summary` writes them (e.g.
        ``"26 KiB, 80 registers, 8 B spilled"``), or ``""`` where shared memory, registers,
        spills and instruction all agree.

    Raises:
        ValueError: the rows are not the same launch (kernel, GPU, dtype, blocks, ...).
    """
    if _case_from(row) != _case_from(other):
        raise ValueError(f"not the same launch: {_case_from(row)} and {_case_from(other)}")
    out = []
    if row["shared"] != other["shared"]:
        out.append(f"{other['shared'] / 1024:.0f} KiB"
                   if round(row["shared"] / 1024) != round(other["shared"] / 1024)
                   else f"{other['shared']} B of shared memory")
    if row["registers"] != other["registers"]:
        out.append(f"{other['registers']} registers")
    if row["spill_stores"] != other["spill_stores"]:
        out.append(f"{other['spill_stores']} B spilled")
    if row["instruction"] != other["instruction"]:
        out.append(other["instruction"])
    return ", ".join(out)


T4_SM = {"registers": 65_536, "shared memory": 65_536, "threads": 1_024, "programs": 16}
"""What one SM of a T4 (compute capability 7.5) holds at once: 32-bit registers, bytes of shared
memory, threads (32 warps) and resident blocks (CUDA C Programming Guide, "Technical
Specifications per Compute Capability")."""


def t4_occupancy(row: dict) -> dict:
    """How many programs of a T4 launch (a row of :func:`compile_table`) one SM runs at once.

    Registers are given to each warp of 32 threads in units of 256 (the guide's allocation
    granularity on sm75), so a program takes ``warps · ⌈32 · registers / 256⌉ · 256``; the SM
    also bounds the shared memory, threads and programs it holds.

    Returns:
        ``{"programs": n, "warps": n · num_warps, "limits": [what allows no more]}``, the
        limits among "registers", "shared memory", "threads" and "programs".
    """
    if row["arch"] != 75:
        raise ValueError(f"t4_occupancy takes sm75 rows, not sm{row['arch']}")
    warp_registers = -(-32 * row["registers"] // 256) * 256
    fits = {"registers": T4_SM["registers"] // (warp_registers * row["num_warps"]),
            "shared memory": T4_SM["shared memory"] // max(row["shared"], 1),
            "threads": T4_SM["threads"] // (32 * row["num_warps"]),
            "programs": T4_SM["programs"]}
    n = min(fits.values())
    return {"programs": n, "warps": n * row["num_warps"],
            "limits": [k for k, v in fits.items() if v == n]}


def _case_dict(case: Case) -> dict:
    out = asdict(case)
    out.update(out.pop("config"))
    return out


def _case_from(row: dict) -> Case:
    cfg = LaunchConfig(row["block_m"], row["block_n"], row["num_warps"], row["num_stages"])
    return Case(row["kernel"], row["arch"], row["dtype"], row["d"], row["causal"],
                row["precision"], cfg)


def _row(result: Result) -> dict:
    return {**_case_dict(result.case), "shared": result.shared, "limit": result.limit,
            "registers": result.registers, "spill_stores": result.spill_stores,
            "instruction": result.instruction, "fits": result.fits}


RECORDS = Path(__file__).with_name("compiled")
# Fields a record keeps per row: the case and what the compiler made of it.
RECORD_FIELDS = ("kernel", "arch", "dtype", "d", "causal", "precision", "block_m", "block_n",
                 "num_warps", "num_stages", "shared", "limit", "registers", "spill_stores",
                 "instruction", "fits")


def record_path(version: str) -> Path:
    """Where the compile table of Triton ``version`` is kept."""
    return RECORDS / f"triton-{version}.json"


def recorded_versions() -> list[str]:
    """The Triton releases whose compile tables are kept, oldest first."""
    def key(v):
        return tuple(int(x) for x in v.split(".") if x.isdigit())
    return sorted((p.stem.removeprefix("triton-") for p in RECORDS.glob("triton-*.json")),
                  key=key)


def recorded_table(version: str, cases: list[Case] | None = None) -> list[dict]:
    """The kept compile table of Triton ``version``, rows as :func:`compile_table` returns them.

    Args:
        version: a Triton release with a record, e.g. ``"3.6.0"`` (see :func:`recorded_versions`).
        cases: keep only these cases, in this order (default: every recorded row).

    Raises:
        ValueError: no record for that release, or a case the record lacks.
    """
    path = record_path(version)
    if not path.exists():
        raise ValueError(f"no compile record for Triton {version}; kept: "
                         f"{', '.join(recorded_versions()) or 'none'} (write one with "
                         "`python -m attnbook.gpu.compile_check --record` under that Triton)")
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    if cases is None:
        return rows
    by = {_case_from(r): r for r in rows}
    missing = [c for c in cases if c not in by]
    if missing:
        raise ValueError(f"the Triton {version} record lacks {len(missing)} of these cases, "
                         f"e.g. {missing[0]}; re-record it")
    return [by[c] for c in cases]


def write_record(rows: list[dict], version: str) -> Path:
    """Keep ``rows`` (every launch, compiled under Triton ``version``) as its record."""
    path = record_path(version)
    path.parent.mkdir(exist_ok=True)
    body = {"triton": version, "rows": [{k: r[k] for k in RECORD_FIELDS} for r in rows]}
    path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    """``--json``: read cases (JSON) on stdin, write rows; ``--record``: write this Triton's
    record of every launch; otherwise print the Markdown table."""
    argv = sys.argv[1:] if argv is None else argv
    if "--record" in argv:
        import triton

        # Through compile_table: the same environment (no interpreter, ptxas's log) as the labs.
        print(write_record(compile_table(), triton.__version__))
    elif "--json" in argv:
        cases = [_case_from(row) for row in json.loads(sys.stdin.read() or "[]")]
        json.dump([_row(r) for r in compile_all(cases or None)], sys.stdout)
    else:
        print(markdown_table([_row(r) for r in compile_all()]))


if __name__ == "__main__":
    main()
