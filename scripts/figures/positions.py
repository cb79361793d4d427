"""Chapter 20's figure: RoPE's score against the relative distance, with RoFormer's bound."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook.lab.position_lab import roformer_bound, score_by_distance  # noqa: E402
from figures import save  # noqa: E402

D_H, MAX_R = 64, 256


def main(outdir: Path) -> Path:
    r = torch.arange(MAX_R + 1)
    bound = roformer_bound(D_H, r)  # (R,)
    ones = torch.ones(D_H, dtype=torch.float64)
    flat = score_by_distance(ones, ones, r)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, D_H, generator=g, dtype=torch.float64)
    wander = score_by_distance(q, k, r)
    fig, ax = plt.subplots(figsize=(6.8, 3.4))
    ax.plot(r, bound / bound[0], color="black", lw=1.5, label="RoFormer's factor (2/d_h) Σ|S_c(r)|")
    ax.plot(r, flat / flat[0], color="tab:blue", label="score, q = k = (1, ..., 1)")
    ax.plot(r, wander / wander.abs().max(), color="tab:orange", lw=1,
            label="score, one random q, k (÷ its largest |score|)")
    ax.axhline(0, color="0.8", lw=0.8)
    ax.set_xlabel("relative distance r = m - n")
    ax.set_ylabel("normalised score")
    ax.set_title(f"d_h = {D_H}, base 10^4: a bound that decays, a score that need not",
                 fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    return save(fig, outdir, "pos_score_distance.png")
