"""Lab helpers for chapter 20 (positions): the rotary widget, the score against relative
distance, RoFormer's bound, and the extrapolation measurement. Only the book's figures and
Lab 20 use them; the attention code a reader imports lives in ``attnbook.positions``."""

from __future__ import annotations

import math

import torch

from ..positions import apply_rope, rope_frequencies
from .tasks import IGNORE, Task
from .train import EVAL_SEED, sequence_loss


def score_by_distance(q: torch.Tensor, k: torch.Tensor, distances, base: float = 10000.0,
                      layout: str = "half") -> torch.Tensor:
    """The rotary score <R_m q, R_n k> for every relative distance r = m - n in ``distances``.

    The query sits at m = r + o and the key at n = o, with the smallest offset o >= 0 that keeps
    both positions non-negative (the score depends on r alone, so o does not matter).

    Shape:
        q, k: (d_h,); distances: (R,) integers -> (R,)
    """
    r = torch.as_tensor(distances, dtype=torch.long)  # (R,)
    offset = max(0, -int(r.min()))
    d_h = q.shape[-1]
    Q = apply_rope(q.expand(len(r), d_h), r + offset, base=base, layout=layout)  # (R, d_h)
    K = apply_rope(k.expand(len(r), d_h), torch.full_like(r, offset), base=base,
                   layout=layout)  # (R, d_h)
    return (Q * K).sum(-1)  # (R,)


def roformer_bound(d_h: int, distances, base: float = 10000.0) -> torch.Tensor:
    """RoFormer's decay factor (2/d_h) * sum_{c=1}^{d_h/2} |S_c(r)|, S_c(r) = sum_{j<c} e^{i r θ_j}.

    By summation by parts, |score(r)| <= max_j |h_{j+1} - h_j| * sum_c |S_c(r)|, where h_j is
    the complex product of the j-th pairs of q and k: a bound on a sum for fixed q and k, which
    says nothing about what a trained model's scores do.

    Shape:
        distances: (R,) -> (R,)
    """
    theta = rope_frequencies(d_h, base=base, dtype=torch.float64)  # (d_h/2,)
    r = torch.as_tensor(distances, dtype=torch.float64)  # (R,)
    phases = torch.polar(torch.ones(len(r), len(theta), dtype=torch.float64),
                         r[:, None] * theta)  # (R, d_h/2): e^{i r θ_j}
    partial = phases.cumsum(dim=1).abs()  # (R, d_h/2): |S_c(r)|, c = 1 .. d_h/2
    return partial.mean(dim=1)


def pair_of(x: torch.Tensor, c: int, layout: str = "half") -> torch.Tensor:
    """The c-th rotated pair of features of ``x``: (..., d_h) -> (..., 2)."""
    d_h = x.shape[-1]
    if layout == "half":
        return torch.stack([x[..., c], x[..., c + d_h // 2]], dim=-1)
    return x[..., 2 * c: 2 * c + 2]


def draw_rope_view(m: int, n: int, c: int, q: torch.Tensor, k: torch.Tensor,
                   base: float = 10000.0, max_distance: int = 15):
    """The widget's view: pair c of q at position m and of k at position n, and the score
    against m - n (the whole vector, and this pair's share). Returns the figure."""
    import matplotlib.pyplot as plt

    d_h = q.shape[-1]
    theta = rope_frequencies(d_h, base=base, dtype=torch.float64)[c].item()
    qm = apply_rope(q[None], torch.tensor([m]), base=base)[0]  # (d_h,)
    kn = apply_rope(k[None], torch.tensor([n]), base=base)[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    for vec, rotated, colour, label in ((q, qm, "tab:blue", f"q at m = {m}"),
                                        (k, kn, "tab:orange", f"k at n = {n}")):
        a, b = pair_of(vec, c).tolist(), pair_of(rotated, c).tolist()
        left.annotate("", xy=a, xytext=(0, 0),
                      arrowprops={"arrowstyle": "->", "color": colour, "alpha": 0.35, "ls": "--"})
        left.annotate("", xy=b, xytext=(0, 0), arrowprops={"arrowstyle": "->", "color": colour})
        left.plot([], [], color=colour, label=label)
    lim = 1.15 * max(pair_of(q, c).norm().item(), pair_of(k, c).norm().item())
    left.set_xlim(-lim, lim)
    left.set_ylim(-lim, lim)
    left.set_aspect("equal")
    left.axhline(0, color="0.85", lw=0.8)
    left.axvline(0, color="0.85", lw=0.8)
    left.set_title(f"pair {c}: θ = {theta:.3g}, angle between them {(m - n) * theta:+.2f} rad",
                   fontsize=9)
    left.legend(fontsize=8, loc="lower left", frameon=False)

    r = torch.arange(-max_distance, max_distance + 1)
    whole = score_by_distance(q, k, r, base=base)
    pq, pk = pair_of(q, c), pair_of(k, c)
    share = torch.stack([torch.dot(pq, _turn(pk, -float(ri) * theta)) for ri in r.tolist()])
    right.plot(r, whole, color="black", label="score q·k, all pairs")
    right.plot(r, share, color="tab:green", ls="--", label=f"pair {c}'s share")
    right.axvline(m - n, color="tab:red", lw=1)
    right.plot([m - n], [whole[m - n + max_distance].item()], "o", color="tab:red")
    right.set_xlabel("relative distance m - n")
    right.set_ylabel("score")
    right.set_title(f"score {whole[m - n + max_distance].item():+.2f} at m - n = {m - n}",
                    fontsize=9)
    right.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def _turn(pair: torch.Tensor, angle: float) -> torch.Tensor:
    """A 2-vector turned counter-clockwise by ``angle``."""
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])


@torch.no_grad()
def extrapolation(model: torch.nn.Module, task: Task, trained_length: int,
                  n_sequences: int = 512, seed: int = EVAL_SEED) -> tuple[float, float]:
    """Held-out accuracy and loss of ``model`` on ``task``, at the positions it never saw.

    When the task's sequences are longer than ``trained_length``, only the positions
    t >= trained_length are scored (the new ones); otherwise every scored position is.

    Returns:
        (accuracy in [0, 1], mean cross-entropy in nats)
    """
    was_training = model.training
    model.eval()
    x, y = task.batch(n_sequences, seed=seed)  # (B, L) each
    if task.seq_len > trained_length:
        y = y.clone()
        y[:, :trained_length] = IGNORE  # score the new positions only
    logits = model(x)  # (B, L, V)
    scored = y != IGNORE
    accuracy = (logits.argmax(-1)[scored] == y[scored]).double().mean().item()
    loss = sequence_loss(logits, y).item()
    model.train(was_training)
    return accuracy, loss
