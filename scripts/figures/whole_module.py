"""Chapter 8: one forward pass traced tensor by tensor, and how closely PyTorch agrees with it."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from attnbook import (  # noqa: E402
    Attention,
    attention_scores,
    blocked_positions,
    masked_softmax,
    scale_scores,
)
from attnbook.seed import Attention as Seed  # noqa: E402
from figures import save  # noqa: E402

TOKENS = ["the", "cat", "sat", "on", "<pad>"]
FLOOR = 1e-17  # where a difference of exactly 0 is drawn
PAD = torch.tensor([[True, True, True, True, False], [True, True, True, True, True]])


def trace(outdir: Path) -> Path:
    """Every intermediate tensor of one forward pass (sequence 0 of 2), with its shape."""
    torch.manual_seed(0)
    B, T, d = 2, 5, 8
    m = Attention(d_model=d, context_length=16)
    x = torch.randn(B, T, d)
    with torch.no_grad():
        q, k, v = m.query(x), m.key(x), m.value(x)  # (B, T, d)
        raw = attention_scores(q, k)  # (B, T, T)
        scores = scale_scores(raw, d)  # (B, T, T)
        blocked = blocked_positions(m.mask[:T, :T], PAD)  # (B, T, T)
        weights = masked_softmax(scores, blocked)  # (B, T, T)
        y = weights @ v  # (B, T, d)
    panels = [
        ("x", x, "(B, T, d)"), ("q = query(x)", q, "(B, T, d)"), ("k = key(x)", k, "(B, T, d)"),
        ("v = value(x)", v, "(B, T, d)"), ("scores / √d", scores, "(B, T, T)"),
        ("blocked", blocked, "(B, T, T)"), ("weights", weights, "(B, T, T)"),
        ("y = weights @ v", y, "(B, T, d)"),
    ]
    fig, axes = plt.subplots(2, 4, figsize=(12, 5.6),
                             gridspec_kw={"width_ratios": [8, 8, 8, 8], "hspace": 0.55})
    for n, (ax, (name, t, shape)) in enumerate(zip(axes.flat, panels)):
        a = t[0].float().numpy()
        if name == "blocked":
            ax.imshow(a, cmap="Greys", vmin=0, vmax=1.6)
            for i, j in zip(*np.nonzero(a)):
                ax.text(j, i, "×", ha="center", va="center", fontsize=10, color="white")
        elif name == "weights":
            ax.imshow(a, cmap="Blues", vmin=0, vmax=1)
        else:
            lim = float(np.abs(a).max())
            ax.imshow(a, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        dims = tuple(t.shape)
        ax.set_title(f"{n + 1}. {name}\n{shape} = {dims}", fontsize=10)
        ax.set_yticks(range(T), TOKENS, fontsize=8)
        if dims[-1] == T:
            ax.set_xticks(range(T), TOKENS, rotation=60, fontsize=8)
        else:
            ax.set_xticks([0, d - 1], ["0", f"{d - 1}"], fontsize=8)
            ax.set_xlabel("feature", fontsize=8)
    fig.suptitle("One forward pass of attnbook.Attention, sequence 0 of a batch of 2 "
                 "(its last token is padding)", fontsize=11)
    return save(fig, outdir, "whole_trace.png", dpi=120)


def max_differences(dtype: torch.dtype, T: int, d: int = 64, B: int = 2, seeds: int = 5):
    """Largest |ours - reference| over a few random modules: SDPA, MHA, the original module."""
    worst = {"scaled_dot_product_attention": 0.0, "nn.MultiheadAttention": 0.0,
             "the original module": 0.0}
    for s in range(seeds):
        torch.manual_seed(s)
        m = Attention(d, T).to(dtype)
        x = torch.randn(B, T, d, dtype=dtype)
        mha = nn.MultiheadAttention(d, 1, bias=False, batch_first=True).to(dtype)
        original = Seed(d, T).to(dtype)
        original.load_state_dict(m.state_dict())
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.cat([m.query.weight, m.key.weight, m.value.weight]))
            mha.out_proj.weight.copy_(torch.eye(d, dtype=dtype))
            y = m(x)
            refs = {
                "scaled_dot_product_attention": F.scaled_dot_product_attention(
                    m.query(x), m.key(x), m.value(x), is_causal=True),
                # Masks written out, not taken from the module: a reference shares no code.
                "nn.MultiheadAttention": mha(x, x, x, need_weights=False, attn_mask=~torch.ones(
                    T, T, dtype=torch.bool).tril())[0],
                "the original module": original(x),
            }
        for name, ref in refs.items():
            worst[name] = max(worst[name], (y - ref).abs().max().item())
    return worst


def agreement(outdir: Path) -> Path:
    """Max |difference| from three references against T, in float32 and float64."""
    Ts = [2, 4, 8, 16, 32, 64, 128, 256]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    markers = {"scaled_dot_product_attention": "o", "nn.MultiheadAttention": "s",
               "the original module": "^"}
    for ax, dtype, tol in zip(axes, (torch.float32, torch.float64), (1e-5, 1e-12)):
        rows = [max_differences(dtype, T) for T in Ts]
        for name, marker in markers.items():
            vals = [max(r[name], FLOOR) for r in rows]  # exactly 0 would vanish on a log axis
            ax.plot(Ts, vals, marker=marker, label=name, alpha=0.8)
            for T, r in zip(Ts, rows):
                if r[name] == 0:
                    ax.annotate("0 (bit-identical)", (T, FLOOR), xytext=(6, -3),
                                textcoords="offset points", fontsize=8)
        eps = torch.finfo(dtype).eps
        ax.axhline(eps, color="grey", ls=":", lw=1)
        ax.text(Ts[-1], eps / 4, f"machine epsilon {eps:.1e}", fontsize=8, color="grey",
                ha="right", va="top")
        ax.axhline(tol, color="tab:red", ls="--", lw=1)
        ax.text(Ts[-1], tol * 2, f"tolerance the lab states: {tol:g}", fontsize=8,
                color="tab:red", ha="right")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T  (d = 64, B = 2, 5 random modules)")
        ax.set_title(str(dtype).replace("torch.", ""))
    axes[0].set_ylabel("max |ours - reference|")
    axes[0].set_ylim(FLOOR / 3, 1e-3)
    axes[0].legend(fontsize=8, loc="lower right")
    return save(fig, outdir, "whole_agreement.png", dpi=120)


def main(outdir: Path) -> Path:
    trace(outdir)
    return agreement(outdir)
