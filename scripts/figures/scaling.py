"""Chapter 3's figures: Var(q·k) = d, saturation and gradients against d, one row at d = 1024."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnbook.lab.saturation import (  # noqa: E402
    SCALES,
    dot_products,
    entropy,
    gradient_sweep,
    max_weight,
    saturation_sweep,
    score_rows,
    variance_sweep,
)
from attnbook.softmax import stable_softmax  # noqa: E402
from figures import save  # noqa: E402

DS = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
KEYS = 16
STYLE = {"none": ("tab:red", "o", "no scaling"),
         "sqrt(d)": ("tab:blue", "s", r"$\div\sqrt{d}$"),
         "d": ("tab:gray", "^", r"$\div d$")}


def _log2_axis(ax):
    ax.set_xscale("log", base=2)
    ax.set_xticks(DS, [str(d) for d in DS])
    ax.set_xlabel("width d of q and k")


def variance(outdir: Path) -> Path:
    rows = variance_sweep(DS, n=4000, seed=0)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    ds = [r["d"] for r in rows]
    left.plot(ds, ds, color="0.6", lw=1, label="theory: Var = d")
    left.plot(ds, [r["var"] for r in rows], "o", color="tab:red", label=r"measured Var($q\cdot k$)")
    left.plot(ds, [1.0] * len(ds), color="0.6", lw=1, ls="--")
    left.plot(ds, [r["var_over_d"] for r in rows], "s", color="tab:blue",
              label=r"measured Var($q\cdot k/\sqrt{d}$)")
    _log2_axis(left)
    left.set_yscale("log", base=2)
    left.set_ylabel("variance (4000 pairs)")
    left.set_title("The variance of a dot product grows like d")
    left.legend(frameon=False, fontsize=8)

    grid = torch.linspace(-4, 4, 200)
    for d, colour in ((4, "tab:orange"), (64, "tab:green"), (1024, "tab:blue")):
        s = dot_products(d, 4000, seed=d) / math.sqrt(d)
        right.hist(s.numpy(), bins=60, range=(-4, 4), density=True, histtype="step",
                   color=colour, label=f"d = {d}")
    right.plot(grid, torch.exp(-grid**2 / 2) / math.sqrt(2 * math.pi), color="black", lw=1,
               ls="--", label="N(0, 1)")
    right.set_xlabel(r"scaled score $q\cdot k/\sqrt{d}$")
    right.set_ylabel("density")
    right.set_title("After scaling: the same spread at every d")
    right.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return save(fig, outdir, "scale_variance.png")


def saturation(outdir: Path) -> Path:
    rows = saturation_sweep(DS, rows=400, keys=KEYS, seed=0)
    grads = gradient_sweep(DS, rows=400, keys=KEYS, seed=0)
    panels = [("spread", "logit spread (std of a row)", True, None, rows),
              ("max_weight", "largest weight", False, 1 / KEYS, rows),
              ("entropy", "entropy of the weights (nats)", False, math.log(KEYS), rows),
              ("jacobian_norm", r"softmax Jacobian norm $\|J\|_2$", True, 1 / KEYS, rows),
              ("grad_per_entry", r"gradient per entry, $\|\partial L/\partial q\| / \sqrt{d}$",
               True, None, grads)]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.6))
    for ax, (key, label, log, uniform, data) in zip(axes.flat, panels):
        for scale in SCALES:
            colour, marker, name = STYLE[scale]
            ys = [max(r[key], 1e-12) for r in data if r["scale"] == scale]
            ax.plot(DS, ys, marker=marker, color=colour, ms=4, label=name)
        if uniform is not None:
            ax.axhline(uniform, color="0.6", lw=1, ls="--", label="uniform weights")
        if log:
            ax.set_yscale("log")
        ax.set_title(label, fontsize=10)
    by = {(r["d"], r["scale"]): r["grad"] for r in grads}
    ax = axes[1, 2]
    ax.plot(DS, [by[d, "none"] / by[d, "sqrt(d)"] for d in DS], "o-", color="tab:purple", ms=4)
    ax.axhline(1, color="0.6", lw=1, ls="--")
    ax.set_yscale("log")
    ax.set_title(r"gradient ratio, no scaling / $\div\sqrt{d}$", fontsize=10)
    for ax in axes.flat:
        _log2_axis(ax)
        ax.tick_params(axis="x", labelsize=8)
    axes[0, 0].legend(frameon=False, fontsize=8)
    fig.suptitle(f"Median over 400 rows of {KEYS} keys; q, k, v and the upstream gradient with "
                 "N(0, 1) entries", fontsize=10)
    fig.tight_layout()
    return save(fig, outdir, "scale_saturation.png")


def one_row(outdir: Path) -> Path:
    d = 1024
    raw = score_rows(d, 1, KEYS, "none", seed=7)[0]  # (KEYS,)
    fig, axes = plt.subplots(1, 3, figsize=(11, 2.9), sharey=True)
    for ax, (scale, tau) in zip(axes, (("none", 1), ("sqrt(d)", 32), ("d", 1024))):
        w = stable_softmax(raw / tau)
        colour, _, name = STYLE[scale]
        ax.bar(range(KEYS), w.numpy(), color=colour)
        ax.set_ylim(0, 1.05)
        ax.set_xticks(range(0, KEYS, 3))
        ax.set_xlabel("key j")
        ax.set_title(f"{name} (temperature τ = {tau})\nlargest weight {max_weight(w):.2f}, "
                     f"entropy {entropy(w):.2f}", fontsize=9)
    axes[0].set_ylabel("weight")
    fig.suptitle(f"One query against {KEYS} keys at d = {d}", fontsize=10)
    fig.tight_layout()
    return save(fig, outdir, "scale_rows.png")


def main(outdir: Path) -> Path:
    variance(outdir)
    one_row(outdir)
    return saturation(outdir)
