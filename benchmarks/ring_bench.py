"""Ring attention on real gloo processes: time, work and peak memory per rank, for P = 1, 2, 4.

Usage: python benchmarks/ring_bench.py [--T 4096] [--B 2] [--d 64] [--worlds 1 2 4]

Every rank shards the same causal sequence, runs the forward and backward pass of
``attnbook.ring.ring_attention`` twice (a warm-up, then the measured run), and reports:
the scores it computes (work), the seconds it spends computing (the per-step tiled attention,
waits excluded), the wall time of the whole pass, and the peak rise of its resident set above
what it held before (its inputs included). Printed as a Markdown table.

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

MiB = 2**20


def _timed(fn, clock):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        fn(*args, **kwargs)
        clock[0] += time.perf_counter() - start
    return wrapper


def _rank(rank, world, port, args, path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    clock = [0.0]  # seconds inside the per-step attention, waits excluded
    ring.fold_shard = _timed(ring.fold_shard, clock)
    ring.shard_grads = _timed(ring.shard_grads, clock)
    rows = []
    for layout in args.layouts:
        g = torch.Generator().manual_seed(0)
        full = [torch.randn(args.B, args.T, args.d, generator=g) for _ in range(4)]
        q, k, v, _ = ring.shard_inputs(*full[:3], None, rank, world, layout)
        dout = ring.shard(full[3], rank, world, layout)
        del full
        for _attempt in range(2):
            qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
            dist.barrier()
            clock[0] = 0.0
            walls = []

            def forward_backward(qs=qs, ks=ks, vs=vs, layout=layout, dout=dout, walls=walls):
                start = time.perf_counter()
                ring.ring_attention(qs, ks, vs, None, layout=layout).backward(dout)
                walls.append(time.perf_counter() - start)

            peak = peak_above_baseline(forward_backward)
            wall = walls[0]
            del qs, ks, vs
        work = ring.visible_scores(args.T, world, layout)[rank]
        rows.append((layout, rank, work, clock[0], wall, peak))
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
    args = parser.parse_args()
    shard_mib = lambda P: args.B * args.T / P * args.d * 4 / MiB  # noqa: E731
    print(f"causal ring attention, forward + backward, B={args.B}, T={args.T}, d={args.d}, "
          f"float32, gloo on 127.0.0.1, {os.cpu_count()} CPU cores, one thread per rank\n")
    print("| P | layout | rank | scores (M) | compute (s) | wall (s) | peak rise (MiB) "
          "| one shard of q (MiB) |")
    print("|---|---|---|---|---|---|---|---|")
    for world in args.worlds:
        for layout, rank, work, compute, wall, peak in sorted(run(world, args)):
            print(f"| {world} | {layout} | {rank} | {work / 1e6:.2f} | {compute:.3f} | "
                  f"{wall:.3f} | {peak:.1f} | {shard_mib(world):.2f} |")


if __name__ == "__main__":
    main()
