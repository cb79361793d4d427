"""Figures for "A tiny model that learns": loss curves on the tasks, trained attention maps.

Trains the lab's small configuration, as lab 14 does (seconds per task on one CPU thread).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook.lab.plotting import plot_attention  # noqa: E402
from attnbook.lab.tasks import get_task  # noqa: E402
from attnbook.lab.train import train  # noqa: E402
from attnbook.model import TinyConfig, TinyModel  # noqa: E402
from figures import save  # noqa: E402

SMALL = {"d_model": 32, "n_heads": 2, "n_layers": 2, "mlp": False}  # the lab's configuration
RUNS = [("copy", {}, {}), ("reverse", {}, {}), ("induction", {"length": 10, "n_symbols": 8}, {}),
        ("copy", {}, {"positions": False})]


def trained(name: str, task_options: dict, changes: dict, steps: int = 200):
    task = get_task(name, **task_options)
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(task.vocab_size, task.seq_len, **{**SMALL, **changes}))
    history = train(model, task, steps=steps, batch_size=64, lr=1e-2, seed=0, progress=False)
    return task, model, history


def smooth(values: list[float], k: int = 10) -> torch.Tensor:
    v = torch.tensor(values)
    return torch.nn.functional.avg_pool1d(v[None, None], k, 1, padding=0)[0, 0]


def main(outdir: Path) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is much faster, and reproducible
    try:
        results = [(name, changes, *trained(name, opts, changes)) for name, opts, changes in RUNS]
    finally:
        torch.set_num_threads(threads)

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for name, changes, _task, _, history in results:
        label = f"{name}: held-out accuracy {history.accuracy:.2f}"
        style = {"ls": "--", "color": "grey"} if changes else {}
        if changes:
            label = f"{name} without positions: accuracy {history.accuracy:.2f}"
        ax.plot(range(9, len(history.losses)), smooth(history.losses), label=label, **style)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (mean of 10 steps)")
    ax.set_title("The small configuration (d = 32, 2 layers x 2 heads, 200 steps)")
    ax.legend(fontsize=8)
    save(fig, outdir, "tiny_loss.png")

    task, model = next((t, m) for name, _, t, m, _ in results if name == "induction")
    x, _ = task.batch(8, seed=2_147_483_647)  # held-out stream
    b = 0
    with torch.no_grad():
        _, weights = model(x[b:b + 1], return_weights=True)  # layers x (1, h, T, T)
    symbols = task.decode(x[b])
    p = symbols.index(symbols[-1])
    fig, axes = plt.subplots(2, 2, figsize=(10.5, 9.5))
    for layer in range(2):
        for head in range(2):
            plot_attention(weights[layer][0, head], symbols, ax=axes[layer, head],
                           title=f"layer {layer}, head {head}", annotate=True)
    fig.suptitle(f"Induction, held-out example: A = '{symbols[-1]}' at positions {p} and "
                 f"{len(symbols) - 1}; the answer B = '{symbols[p + 1]}' sits at {p + 1}.\n"
                 "Layer 0: each token looks at the token before it. Layer 1: the last token "
                 "looks at the token after the earlier A.", fontsize=10)
    fig.tight_layout()
    maps_path = save(fig, outdir, "tiny_induction_maps.png", dpi=110)
    print({name + ("-nopos" if changes else ""): (round(h.accuracy, 4), round(h.seconds, 1))
           for name, changes, _, _, h in results})
    return maps_path
