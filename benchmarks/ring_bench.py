"""Ring attention on real gloo processes: time, work and peak memory per rank, for P = 1, 2, 4.

Usage: python benchmarks/ring_bench.py [--T 4096] [--B 2] [--d 64] [--worlds 1 2 4]
                                       [--kernels tiled fused] [--repeats 3]

Every rank shards the same causal sequence and times the forward and backward pass of
``attnbook.ring.ring_attention`` with each per-step kernel (``tiled``: chapter 10's Python
loop; ``fused``: PyTorch's CPU flash kernel, which returns the log-sum-exp the merge needs),
interleaved by ``attnbook.lab.measure.compare`` (warm-up, then repeats, median and spread). It
reports per rank: the scores it computes (work), the median wall time of the pass, the seconds one
more pass spends in the per-step attention (waits excluded), and the peak rise of its
resident set during a last pass (its inputs included). Printed as Markdown tables, the
second one the fused kernel's speed-up.

All ranks share this machine's cores: with more ranks than cores, the wall time measures the
slowest rank plus contention, not the speed-up of P devices; compute seconds per rank show the
balance. Each rank runs one thread.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

# Freed blocks go back to the OS at once, so the resident set follows the live tensors.
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from bench_memory import peak_above_baseline  # noqa: E402

from attnbook import ring  # noqa: E402
from attnbook.lab.measure import compare, conditions  # noqa: E402

MiB = 2**20


def _timed(fn, clock):
    """``fn`` that adds its seconds to ``clock[clock["now"]]`` (the kernel being timed)."""
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        clock[clock["now"]] += time.perf_counter() - start
        return result
    return wrapper


def _rank(rank, world, port, args, path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    clock = {"now": None, **{kernel: 0.0 for kernel in args.kernels}}  # per-step attention
    ring.attend_pair = _timed(ring.attend_pair, clock)
    ring.pair_grads = _timed(ring.pair_grads, clock)
    rows = []
    for layout in args.layouts:
        g = torch.Generator().manual_seed(0)
        full = [torch.randn(args.B, args.T, args.d, generator=g) for _ in range(4)]
        q, k, v, _ = ring.shard_inputs(*full[:3], None, rank, world, layout)
        dout = ring.shard(full[3], rank, world, layout)
        del full

        def forward_backward(kernel, layout=layout, q=q, k=k, v=v, dout=dout):
            clock["now"] = kernel
            qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
            dist.barrier()  # every rank starts the pass together
            ring.ring_attention(qs, ks, vs, None, layout=layout, kernel=kernel).backward(dout)

        # Every rank runs the same rounds (no time budget), so the collectives stay matched.
        timing = compare({kernel: (lambda kernel=kernel: forward_backward(kernel))
                          for kernel in args.kernels}, repeats=args.repeats, warmup=1,
                         threads=1)
        work = ring.visible_scores(args.T, world, layout)[rank]
        for kernel in args.kernels:
            clock[kernel] = 0.0  # the compute seconds of one more pass, not watched for memory
            forward_backward(kernel)
            compute = clock[kernel]
            peak = peak_above_baseline(lambda kernel=kernel: forward_backward(kernel))
            rows.append((layout, kernel, rank, work, compute, timing[kernel].median,
                         timing[kernel].spread, peak))
    gathered = [None] * world
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        torch.save([r for part in gathered for r in part], path)
    dist.destroy_process_group()


def run(world: int, args) -> list[tuple]:
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        path = os.path.join(tmp, "rows.pt")
        mp.spawn(_rank, args=(world, port, args, path), nprocs=world)
        return torch.load(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--T", type=int, default=4096)
    parser.add_argument("--B", type=int, default=2)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--layouts", nargs="+", default=["contiguous", "zigzag"])
    parser.add_argument("--kernels", nargs="+", default=["tiled", "fused"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shard_mib = args.B * args.T * args.d * 4 / MiB  # one q for the whole sequence
    print(f"causal ring attention, forward + backward, B={args.B}, T={args.T}, d={args.d}, "
          f"float32, gloo on 127.0.0.1, one thread per rank, median of {args.repeats} "
          f"(kernels interleaved); {conditions()} at the start\n")
    print("| P | layout | kernel | rank | scores (M) | compute (s) | wall (s) | spread "
          "| peak rise (MiB) | one shard of q (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    speedups = []
    for world in args.worlds:
        rows = sorted(run(world, args))
        for layout, kernel, rank, work, compute, wall, spread, peak in rows:
            print(f"| {world} | {layout} | {kernel} | {rank} | {work / 1e6:.2f} | "
                  f"{compute:.3f} | {wall:.3f} | ±{50 * spread:.0f}% | {peak:.1f} | "
                  f"{shard_mib / world:.2f} |")
        if {"tiled", "fused"} <= set(args.kernels):
            for layout in args.layouts:
                by = {kernel: [r for r in rows if r[0] == layout and r[1] == kernel]
                      for kernel in ("tiled", "fused")}
                compute = [sum(r[4] for r in by[k]) for k in ("tiled", "fused")]
                wall = [max(r[5] for r in by[k]) for k in ("tiled", "fused")]
                speedups.append((world, layout, *compute, *wall))
    if speedups:
        print("\n| P | layout | compute, all ranks: tiled (s) | fused (s) | speed-up "
              "| wall: tiled (s) | fused (s) | speed-up |")
        print("|---|---|---|---|---|---|---|---|")
        for world, layout, ct, cf, wt, wf in speedups:
            print(f"| {world} | {layout} | {ct:.3f} | {cf:.3f} | {ct / cf:.1f}× | {wt:.3f} | "
                  f"{wf:.3f} | {wt / wf:.1f}× |")
    print(f"\n{conditions()} at the end")


if __name__ == "__main__":
    main()
