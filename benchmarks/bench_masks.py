"""Chapter 21's benchmark: padding versus packing, and what skipping empty tiles saves.

    .venv/bin/python benchmarks/bench_masks.py            # all three parts, markdown tables
    .venv/bin/python benchmarks/bench_masks.py --quick    # small sizes, a smoke test
    .venv/bin/python benchmarks/bench_masks.py --no-compile
    .venv/bin/python benchmarks/bench_masks.py --save benchmarks/results_masks.md  # and .json

(a) A batch of documents with log-normal lengths (fixed seed), padded to the longest versus
    packed into one row with the document mask: forward and forward+backward, real tokens per
    second, the peak bytes of live tensors (attnbook.lab.measure.LiveTensorBytes, exact), and the
    share of padded (wasted) token slots and score entries.
(b) tiled_attention with and without skipping empty tiles, for the sliding window and the
    document mask, next to the share of empty tiles: is the saving proportional?
(c) FlexAttention compiled by torch.compile, if it compiles: first-call time and timing.

Every ratio comes from one attnbook.lab.measure.compare call (interleaved repeats), so a change in
the machine's load affects both sides alike. Times are medians.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from functools import partial

import torch

from attnbook import AttentionLayer
from attnbook.lab.measure import LiveTensorBytes, compare, conditions
from attnbook.masks import block_mask, document_mod, materialize, sliding_window_mod
from attnbook.online import tile_plan, tiled_attention, tiled_work
from attnbook.packing import pack, pad

MiB = 2**20


def lognormal_lengths(n: int, median: float, sigma: float, low: int, high: int,
                      seed: int = 0) -> list[int]:
    """``n`` document lengths from a log-normal (many short documents, a long tail), clipped."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, generator=g, dtype=torch.float64)
    return [int(v) for v in (math.log(median) + sigma * z).exp().round().clamp(low, high)]


def _step(fn, mode: str):
    """One forward (no autograd) or one forward + backward of ``fn()``."""
    if mode == "fwd":
        with torch.no_grad():
            return fn()
    out = fn()
    out.backward(torch.ones_like(out))
    return None


def part_a(lengths: list[int], d: int, block: int, repeats: int, threads: int) -> str:
    torch.manual_seed(0)
    docs = [torch.randn(n, d) for n in lengths]  # token vectors of each document
    real = sum(lengths)
    padded_ids, padding_mask = pad([torch.arange(n) for n in lengths])  # (n, T_max)
    packed = pack([torch.arange(n) for n in lengths])
    n, T_max = padded_ids.shape
    x_pad = torch.zeros(n, T_max, d)
    for i, doc in enumerate(docs):
        x_pad[i, : len(doc)] = doc
    x_pack = torch.cat(docs)[None]  # (1, T, d)
    m = AttentionLayer(d, max(real, T_max))
    doc = packed.mask_mod()

    def tiled(x, pm=None, mod=None, plan=None):
        return tiled_attention(m.query(x), m.key(x), m.value(x), pm, block_size=block,
                               mask_mod=mod, plan=plan)

    # The block mask built once and reused, as FlexAttention reuses its BlockMask across
    # layers and steps: the classification costs O(T²) elementwise work per call otherwise.
    plan = tile_plan(x_pack[..., :0], x_pack[..., :0], None, True, block, doc)

    calls = {
        ("explicit", "padded"): lambda: m(x_pad, padding_mask),
        ("explicit", "packed"): lambda: m(x_pack, mask_mod=doc),
        ("tiled", "padded"): lambda: tiled(x_pad, padding_mask),
        ("tiled", "packed"): lambda: tiled(x_pack, mod=doc),
        ("tiled", "packed, plan reused"): lambda: tiled(x_pack, plan=plan),
    }
    needed = sum(t * (t + 1) // 2 for t in lengths)  # causal entries inside the documents
    bm = block_mask(document_mod(packed.document_ids), real, real, block, block)
    entries = {("explicit", "padded"): n * T_max * T_max,
               ("explicit", "packed"): real * real,
               ("tiled", "padded"): n * tiled_work(T_max, T_max, block)["computed"] * block**2,
               ("tiled", "packed"): round(bm.computed_fraction * real * real)}
    entries[("tiled", "packed, plan reused")] = entries[("tiled", "packed")]
    lines = [f"Documents: {len(lengths)}, lengths {min(lengths)}..{max(lengths)} (median "
             f"{sorted(lengths)[len(lengths) // 2]}), {real} real tokens; padded to "
             f"{n} x {T_max} = {n * T_max} slots, **{1 - real / (n * T_max):.1%} of them "
             f"padding**; packed: one row of {real}. d = {d}, tiles of {block}, float32, "
             f"{threads} thread(s).",
             "",
             "| kernel | batching | mode | median ms | real tokens/s | packed/padded speed | "
             "peak live MiB | score entries computed / needed |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in ("fwd", "fwd+bwd"):
        for kernel in ("explicit", "tiled"):
            kinds = [b for (kk, b) in calls if kk == kernel]
            fns = {b: partial(_step, calls[(kernel, b)], mode) for b in kinds}
            t = compare(fns, repeats, threads=threads, warmup=1)
            for b in kinds:
                with torch.no_grad() if mode == "fwd" else torch.enable_grad():
                    peak = LiveTensorBytes.of(fns[b]) / MiB
                speed = t["padded"].median / t[b].median  # > 1: packing is faster
                lines.append(
                    f"| {kernel} | {b} | {mode} | {t[b].median * 1e3:.1f} | "
                    f"{real / t[b].median:,.0f} | "
                    f"{'1' if b == 'padded' else f'{speed:.2f}'} | {peak:.1f} | "
                    f"{entries[(kernel, b)] / needed:.2f} |")
    return "\n".join(lines)


def part_b(T: int, d: int, blocks: list[int], repeats: int, threads: int) -> str:
    torch.manual_seed(1)
    lengths = lognormal_lengths(64, T / 12, 1.0, 16, T, seed=1)
    ids, total = [], 0
    for i, n in enumerate(lengths):  # documents until the row is full; the last one is cut
        take = min(n, T - total)
        ids += [i] * take
        total += take
        if total == T:
            break
    ids += [ids[-1] + 1] * (T - total)
    masks = {"sliding window W=256": sliding_window_mod(256),
             f"document ({len(set(ids))} docs)": document_mod(torch.tensor(ids))}
    q, k, v = (torch.randn(1, 1, T, d) for _ in range(3))
    lines = [f"T = {T}, d = {d}, one head, float32, {threads} thread(s).", "",
             "| mask | tile | mode | empty tiles | computed share (tiles) | ms skipping | "
             "ms computing all | time skip/all | expected (computed tiles / all) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, mod in masks.items():
        for block in blocks:
            work = tiled_work(T, T, block, mask_mod=mod)
            share = work["computed"] / work["tiles"]
            for mode in ("fwd", "fwd+bwd"):
                qg, kg, vg = (t.clone().requires_grad_(mode != "fwd") for t in (q, k, v))
                fns = {skip: partial(_step, partial(tiled_attention, qg, kg, vg,
                                                    block_size=block, mask_mod=mod,
                                                    skip_empty=skip), mode)
                       for skip in (True, False)}
                t = compare(fns, repeats, threads=threads, warmup=1)
                lines.append(
                    f"| {name} | {block} | {mode} | {work['skipped']}/{work['tiles']} "
                    f"({work['skipped'] / work['tiles']:.0%}) | {share:.2f} | "
                    f"{t[True].median * 1e3:.1f} | {t[False].median * 1e3:.1f} | "
                    f"{t[True].median / t[False].median:.2f} | {share:.2f} |")
    return "\n".join(lines)


def part_c(T: int, d: int, repeats: int, threads: int) -> str:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    torch.set_num_threads(threads)
    ids = torch.tensor(sum(([i] * n for i, n in enumerate(
        lognormal_lengths(64, T / 12, 1.0, 16, T, seed=1))), []))[:T]
    mod = document_mod(ids)
    q, k, v = (torch.randn(1, 2, T, d) for _ in range(3))
    bm = create_block_mask(mod, 1, 1, T, T, device="cpu", BLOCK_SIZE=128)
    compiled = torch.compile(flex_attention)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            compiled(q, k, v, block_mask=bm)
    except Exception as err:  # report what happened, do not hide it
        return f"torch.compile(flex_attention) failed: {type(err).__name__}: {err}"
    first = time.perf_counter() - start
    dense = materialize(mod, T, T)  # (1, 1, T, T) True = may attend, for SDPA
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
        fns = {"flex compiled": lambda: compiled(q, k, v, block_mask=bm),
               "flex eager": lambda: flex_attention(q, k, v, block_mask=bm),
               "tiled (ours)": lambda: tiled_attention(q, k, v, mask_mod=mod, block_size=128),
               "sdpa, dense mask": lambda: torch.nn.functional.scaled_dot_product_attention(
                   q, k, v, attn_mask=dense)}
        with torch.no_grad():
            t = compare(fns, repeats, threads=threads, warmup=1)
    qg = q.clone().requires_grad_()
    try:
        compiled(qg, k, v, block_mask=bm).sum().backward()
        backward = "runs"
    except Exception as err:
        backward = f"refused: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
    base = t["flex compiled"].median
    lines = [f"Document mask, T = {T}, h = 2, d = {d}, forward, no grad, {threads} thread(s). "
             f"First compiled call (compile included): **{first:.1f} s**. Compiled backward "
             f"on the CPU: {backward}.", "",
             "| method | median ms | relative to compiled flex |", "|---|---|---|"]
    for name, tm in t.items():
        lines.append(f"| {name} | {tm.median * 1e3:.2f} | {tm.median / base:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    ap.add_argument("--no-compile", action="store_true", help="skip part (c)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", default=None,
                    help="also write the tables to this Markdown file (benchmarks/"
                    "results_masks.md) and their values to the .json next to it")
    from bench_results import add_load_argument, check_load, write_results

    add_load_argument(ap)
    args = ap.parse_args(argv)
    # The load rule ("How we measure"): a run that saves starts on a machine no busier
    # than its cores.
    load = check_load(args.allow_loaded) if args.save else None
    start = time.perf_counter()
    parts = [f"torch {torch.__version__}; {conditions()}\n"]
    print(parts[-1], flush=True)
    if args.quick:
        sizes = dict(lengths=lognormal_lengths(6, 24, 1.0, 4, 96), d=16, block=16, T=256,
                     blocks=[32], repeats=2)
    else:
        sizes = dict(lengths=lognormal_lengths(12, 128, 1.0, 16, 1024), d=64, block=128,
                     T=1024, blocks=[64, 128], repeats=3)
    parts.append("## (a) Padded versus packed\n\n" + part_a(
        sizes["lengths"], sizes["d"], sizes["block"], sizes["repeats"], args.threads) + "\n")
    print(parts[-1], flush=True)
    parts.append("## (b) Skipping empty tiles\n\n" + part_b(
        sizes["T"], sizes["d"], sizes["blocks"], sizes["repeats"], args.threads) + "\n")
    print(parts[-1], flush=True)
    c = "skipped (--no-compile)" if args.no_compile else part_c(sizes["T"], sizes["d"],
                                                                sizes["repeats"], args.threads)
    parts.append("## (c) Compiled FlexAttention\n\n" + c + "\n")
    print(parts[-1], flush=True)
    parts.append(f"Whole run: {time.perf_counter() - start:.0f} s.")
    if args.save:
        write_results(args.save, "\n".join(parts),
                      "Masks as functions: padded versus packed, block skipping, FlexAttention",
                      " ".join(["python benchmarks/bench_masks.py"]
                               + (sys.argv[1:] if argv is None else argv)),
                      kind="results_masks", load=load)


if __name__ == "__main__":
    main()
