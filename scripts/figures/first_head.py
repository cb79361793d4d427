"""Chapter 2's trained head: a previous-token head's attention map before and after training."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook.lab.first_head import previous_token_weight, train_first_head  # noqa: E402
from figures import save  # noqa: E402

PROBE_SEED = 7  # the held-out sequence whose map is drawn (the lab draws the same one)
# The statistic in the titles is the one the chapter quotes: the mean over Lab 2's held-out batch.
HELD_OUT = 256, 1  # (sequences, seed), as in the lab's run.task.batch(256, seed=1)


def main(outdir: Path) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = train_first_head(seed=0)
    finally:
        torch.set_num_threads(threads)
    x, _ = run.task.batch(1, seed=PROBE_SEED)  # (1, T)
    x_test, _ = run.task.batch(HELD_OUT[0], seed=HELD_OUT[1])  # (B, T)
    labels = run.task.decode(x[0])
    T = len(labels)
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.6))
    for col, (name, model) in enumerate((("untrained", run.model_at(0)),
                                         (f"after {run.snapshots[-1][0]} steps", run.model))):
        s, a = model.attention_map(x[0])  # (T, T) each
        with torch.no_grad():
            prev = previous_token_weight(model(x_test, return_weights=True)[1])  # over B, T
        vmax = float(s[torch.isfinite(s)].abs().max())
        ax_s, ax_a = axes[2 * col], axes[2 * col + 1]
        ax_s.imshow(s.masked_fill(~torch.isfinite(s), 0), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax_s.imshow(torch.where(torch.isfinite(s), float("nan"), 1.0), cmap="Greys", vmin=0,
                    vmax=4)  # blocked entries in light grey
        ax_s.set_title(f"{name}: scaled scores S", fontsize=10)
        ax_a.imshow(a, cmap="Blues", vmin=0, vmax=1)
        ax_a.set_title(f"{name}: weights A\nprevious token, mean of {HELD_OUT[0]} "
                       f"held-out sequences: {prev:.2f}", fontsize=9)
        for ax in (ax_s, ax_a):
            ax.set_xticks(range(T), labels, fontsize=7)
            ax.set_yticks(range(T), labels, fontsize=7)
            ax.set_xlabel("key j")
        ax_s.set_ylabel("query i")
    fig.tight_layout()
    return save(fig, outdir, "scores_first_head.png")
