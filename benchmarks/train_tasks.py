"""Train the tiny model on each synthetic task with the book's full configuration.

Prints, as a Markdown table, the training time and the held-out accuracy per task, plus one
run without position embeddings (the model of chapter 14 cannot copy without them). The tasks
have the library's default sizes (induction: 16 tokens over 16 letters), not the shorter
induction task that lab 14 trains its small configuration on.

Usage: python benchmarks/train_tasks.py > benchmarks/train_results.md
(the progress bars go to stderr, the table to stdout)
"""

from __future__ import annotations

import os
import platform
import sys

import torch

from attnbook.model import TinyConfig, TinyModel
from attnbook.tasks import TASKS, get_task
from attnbook.train import train

# The full configuration (the lab trains a smaller one so that it runs in seconds).
FULL = {"d_model": 64, "n_heads": 4, "n_layers": 2, "mlp": True}
# Steps per task: copying and reversing are learned in ~100 steps; induction needs two
# layers to cooperate (a previous-token head, then an induction head) and takes longer.
STEPS = {"copy": 150, "reverse": 150, "induction": 600}
BATCH, LR, SEED = 64, 3e-3, 0


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


def main() -> None:
    # Matrices this small gain nothing from a second thread, and on a busy machine the
    # OpenMP threads wait on each other: one thread was ~20x faster here.
    torch.set_num_threads(1)
    rows = [run(name) for name in TASKS] + [run("copy", positions=False)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("# Training the tiny model on the synthetic tasks\n")
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
          f"(load average {load:.1f} at the end, shared with other jobs), torch "
          f"{torch.__version__}, 1 thread. Configuration: {FULL}; batches of "
          f"{BATCH} sequences, AdamW lr {LR} (warm-up + cosine), seed {SEED}. Held-out "
          "accuracy: 2048 fresh sequences from a seed never used for training, scored "
          "positions only.\n")
    print("| task | parameters | steps | training time (s) | ms per step | "
          "held-out accuracy | chance | first step with loss < 0.05 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        label = r["task"] + ("" if not r["changes"] else " (no position embeddings)")
        below = "never" if r["first_below"] is None else str(r["first_below"])
        ms = 1000 * r["seconds"] / r["steps"]
        print(f"| {label} | {r['params']:,} | {r['steps']} | {r['seconds']:.1f} | {ms:.0f} | "
              f"{r['accuracy']:.4f} | "
              f"{r['chance']:.3f} | {below} |")
    ok = [r for r in rows if not r["changes"] and r["accuracy"] >= 0.99 and r["seconds"] <= 60]
    print(f"\nTasks at >= 99% held-out accuracy within 60 s: "
          f"{', '.join(r['task'] for r in ok) or 'none'}.")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
