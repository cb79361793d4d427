"""What one generation step computes, without and with a KV cache."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from figures import save  # noqa: E402


def main(outdir: Path) -> Path:
    T, t = 10, 7  # the step that produces token t's output
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, cached in zip(axes, [False, True]):
        grid = np.zeros((T, T))
        lower = np.tril(np.ones((t + 1, t + 1)))
        if cached:
            grid[t, : t + 1] = 2  # only the new query's row
            grid[:t, :t] = np.where(lower[:t, :t] > 0, 0.6, 0)  # earlier work, not redone
        else:
            grid[: t + 1, : t + 1] = lower * 2  # every row recomputed
        cmap = matplotlib.colors.ListedColormap(["white", "#dde6f3", "tab:blue"])
        ax.imshow(np.digitize(grid, [0.5, 1.5]), cmap=cmap, vmin=0, vmax=2)
        ax.set_xticks(range(T))
        ax.set_yticks(range(T))
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
        for k in range(T + 1):
            ax.axhline(k - 0.5, color="lightgrey", lw=0.5)
            ax.axvline(k - 0.5, color="lightgrey", lw=0.5)
        title = ("KV cache: one row, keys and values read from the cache" if cached
                 else "recompute: every row of scores again")
        ax.set_title(title, fontsize=9)
        if cached:
            ax.annotate("K, V cached for j < 7", (3, 8.4), ha="center", fontsize=8)
    fig.suptitle(f"The step that outputs token {t}: the work in blue", fontsize=10)
    return save(fig, outdir, "kv_step_work.png")
