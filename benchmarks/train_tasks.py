"""Train the tiny model on each synthetic task with the book's full configuration.

Prints, as a Markdown table, the training time and the held-out accuracy per task, plus one
run without position embeddings (the model of chapter 14 cannot copy without them). The tasks
have the library's default sizes (induction: 16 tokens over 16 letters), not the shorter
induction task that lab 14 trains its small configuration on.

Usage: python benchmarks/train_tasks.py --save benchmarks/train_results.md
(writes the table and, next to it, train_results.json with its values; the progress bars go
to stderr, the table to stdout)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import torch

from attnbook.lab.tasks import TASKS, get_task
from attnbook.lab.train import train
from attnbook.model import TinyConfig, TinyModel

# The full configuration (the lab trains a smaller one so that it runs in seconds).
FULL = {"d_model": 64, "n_heads": 4, "n_layers": 2, "mlp": True}
# Steps per task: copying and reversing are learned in ~100 steps; induction needs two
# layers to cooperate (a previous-token head, then an induction head) and takes longer.
STEPS = {"copy": 150, "reverse": 150, "induction": 600}
BATCH, LR, SEED = 64, 3e-3, 0
TITLE = "Training the tiny model on the synthetic tasks"


def run(name: str, **changes) -> dict:
    task = get_task(name)
    torch.manual_seed(SEED)
    config = TinyConfig(task.vocab_size, task.seq_len, **{**FULL, **changes})
    model = TinyModel(config)
    history = train(model, task, steps=STEPS[name], batch_size=BATCH, lr=LR, seed=SEED)
    below = next((i for i, loss in enumerate(history.losses) if loss < 0.05), None)
    return {"task": name, "params": model.num_parameters(), "seconds": history.seconds,
            "steps": STEPS[name],
            "accuracy": history.accuracy, "chance": task.chance, "first_below": below,
            "changes": changes}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, default=None,
                        help="also write the table to this Markdown file (benchmarks/"
                        "train_results.md) and its values to the .json next to it")
    from bench_results import add_load_argument, check_load, write_results

    add_load_argument(parser)
    args = parser.parse_args(argv)
    # The load rule ("How we measure"): its table has timings, so a run that saves starts on a
    # machine no busier than its cores.
    start_load = check_load(args.allow_loaded) if args.save else None
    # Matrices this small gain nothing from a second thread, and on a busy machine the
    # OpenMP threads wait on each other: one thread was ~20x faster here.
    torch.set_num_threads(1)
    rows = [run(name) for name in TASKS] + [run("copy", positions=False)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
        f"(load average {load:.1f} at the end, shared with other jobs), torch "
        f"{torch.__version__}, 1 thread. Configuration: {FULL}; batches of "
        f"{BATCH} sequences, AdamW lr {LR} (warm-up + cosine), seed {SEED}. Held-out "
        "accuracy: 2048 fresh sequences from a seed never used for training, scored "
        "positions only.", "",
        "| task | parameters | steps | training time (s) | ms per step | "
        "held-out accuracy | chance | first step with loss < 0.05 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        label = r["task"] + ("" if not r["changes"] else " (no position embeddings)")
        below = "never" if r["first_below"] is None else str(r["first_below"])
        ms = 1000 * r["seconds"] / r["steps"]
        lines.append(f"| {label} | {r['params']:,} | {r['steps']} | {r['seconds']:.1f} | "
                     f"{ms:.0f} | {r['accuracy']:.4f} | {r['chance']:.3f} | {below} |")
    ok = [r for r in rows if not r["changes"] and r["accuracy"] >= 0.99 and r["seconds"] <= 60]
    lines += ["", "Tasks at >= 99% held-out accuracy within 60 s: "
              f"{', '.join(r['task'] for r in ok) or 'none'}."]
    text = "\n".join(lines)
    print(f"# {TITLE}\n\n{text}")
    sys.stdout.flush()
    if args.save:  # the Markdown and the JSON of its values, side by side
        write_results(args.save, text, TITLE, " ".join(["python benchmarks/train_tasks.py"]
                                                       + (sys.argv[1:] if argv is None else argv)),
                      kind="train_results", load=start_load)


if __name__ == "__main__":
    main()
