"""A first trained head: one attention layer that learns to look at the previous token.

Chapters 1 to 8 show untrained attention, whose weights are close to uniform. This module
trains the smallest model in which attention has to mean something: token embeddings plus
learned position embeddings, one :class:`attnbook.Attention`, and a linear readout, on the copy
task with delay 1 (predict the token just before, :func:`attnbook.lab.tasks.copy_batch`). There is
no residual connection, so the readout sees only what attention gathered: to answer, the head
must put its weight on the previous token. One attention layer sees the keys up to a query as
a set (every key is compared by content alone), so the position embeddings are what let a query
find "the token one place back". Training reuses :func:`attnbook.lab.train.train`; a forward
pre-hook copies the weights every few steps, so the lab can replay how the attention map
sharpens.

Shape legend: B batch, T tokens, d model width, V vocabulary size.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from ..attention import Attention
from .tasks import Task, get_task
from .train import History, train


class FirstHead(nn.Module):
    """Token and position embeddings, one attention head, and a linear readout.

    Args:
        vocab_size: number of token ids V.
        context_length: longest sequence T the model reads.
        d_model: width d of the token vectors.
        score_scale: multiplies the queries before step 2; 1 (the default) gives the usual
            scaled scores QKᵀ/√d, ``sqrt(d_model)`` gives raw scores QKᵀ (chapter 3).

    Shape:
        idx: (B, T) token ids -> logits (B, T, V); with ``return_weights=True`` also the
        attention weights (B, T, T).
    """

    def __init__(self, vocab_size: int, context_length: int, d_model: int = 32,
                 score_scale: float = 1.0):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(context_length, d_model)
        self.attn = Attention(d_model, context_length)
        self.readout = nn.Linear(d_model, vocab_size)
        self.score_scale = score_scale

    def forward(self, idx: torch.Tensor, *, return_weights: bool = False):
        """Next-token logits for every position, and optionally the attention weights."""
        T = idx.size(1)
        x = self.tokens(idx) + self.positions(torch.arange(T, device=idx.device))  # (B, T, d)
        if self.score_scale == 1.0:
            out, weights = self.attn(x, return_weights=True)  # (B, T, d), (B, T, T)
        else:  # scaling q by c multiplies every score by c: c = sqrt(d) undoes step 3
            q, k, v = self.attn.query(x), self.attn.key(x), self.attn.value(x)  # (B, T, d)
            out, weights = self.attn.attend(self.score_scale * q, k, v)
        logits = self.readout(out)  # (B, T, V): no residual, only what attention gathered
        return (logits, weights) if return_weights else logits

    @torch.no_grad()
    def attention_map(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The scaled scores S (blocked entries set to -inf) and the weights A for ``idx``.

        Shape:
            idx: (T,) or (1, T) -> S: (T, T), A: (T, T)
        """
        idx = idx.reshape(1, -1)
        T = idx.size(1)
        x = self.tokens(idx) + self.positions(torch.arange(T, device=idx.device))  # (1, T, d)
        q, k = self.score_scale * self.attn.query(x), self.attn.key(x)  # (1, T, d)
        s = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5  # (1, T, T)
        s = s.masked_fill(self.attn.mask[:T, :T], float("-inf"))
        return s[0], self(idx, return_weights=True)[1][0]


@dataclass
class FirstHeadRun:
    """A trained :class:`FirstHead`, its task, its training history and weight snapshots.

    Attributes:
        model: the trained model.
        task: the copy task it was trained on.
        history: losses, held-out accuracy and seconds (see :class:`attnbook.lab.train.History`).
        snapshots: ``(step, state_dict)`` pairs: the weights after that many training steps.
    """

    model: FirstHead
    task: Task
    history: History
    snapshots: list[tuple[int, dict]] = field(default_factory=list)

    def model_at(self, step: int) -> FirstHead:
        """A copy of the model with the weights of the snapshot taken at ``step``."""
        state = dict(self.snapshots)[step]
        model = copy.deepcopy(self.model)
        model.load_state_dict(state)
        return model.eval()


def train_first_head(d_model: int = 32, length: int = 12, n_symbols: int = 10,
                     steps: int = 100, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
                     snapshot_every: int = 10, score_scale: float = 1.0,
                     eval_sequences: int = 512, perturb: float = 0.0,
                     perturb_seed: int = 0) -> FirstHeadRun:
    """Train a :class:`FirstHead` on the copy task with delay 1, keeping weight snapshots.

    Args:
        d_model: width d of the model.
        length: tokens per sequence T.
        n_symbols: vocabulary size V.
        steps: optimiser steps (AdamW with warm-up and cosine decay,
            :func:`attnbook.lab.train.train`).
        batch_size: sequences per step.
        lr: peak learning rate.
        seed: seeds the initial weights and the training batches.
        snapshot_every: copy the weights every this many steps (0: none); the weights before
            training (step 0) and after the last step are always kept.
        score_scale: see :class:`FirstHead` (1: scaled scores; sqrt(d_model): raw scores).
        eval_sequences: held-out sequences scored at the end.
        perturb: multiply every initial weight by ``1 + perturb * N(0, 1)`` (0: leave them), to
            see how much a run depends on its last bits (1e-6 is about eight times float32's
            spacing near 1, 2**-23 = 1.2e-7; two CPUs' kernels differ in the last of those bits).
        perturb_seed: seeds that perturbation (the batches keep ``seed``).

    Returns:
        A :class:`FirstHeadRun`.
    """
    task = get_task("copy", length=length, delay=1, n_symbols=n_symbols)
    with torch.random.fork_rng(devices=[]):  # seed the initial weights, leave the global RNG be
        torch.manual_seed(seed)
        model = FirstHead(task.vocab_size, length, d_model, score_scale)
    if perturb:
        noise = torch.Generator().manual_seed(perturb_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + perturb * torch.randn(p.shape, generator=noise, dtype=p.dtype))
    snapshots: list[tuple[int, dict]] = []
    calls = 0

    def keep(module, args):
        # train() calls the model once per step; evaluation (eval mode) is not a step.
        nonlocal calls
        if module.training:
            if snapshot_every and calls % snapshot_every == 0:
                snapshots.append((calls, copy.deepcopy(module.state_dict())))
            calls += 1

    hook = model.register_forward_pre_hook(keep)
    try:
        history = train(model, task, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                        progress=False, eval_sequences=eval_sequences)
    finally:
        hook.remove()
    if not snapshots or snapshots[-1][0] != steps:
        snapshots.append((steps, copy.deepcopy(model.state_dict())))
    return FirstHeadRun(model.eval(), task, history, snapshots)


def previous_token_weight(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each query puts on the token just before it (queries 1 to T - 1).

    Shape:
        weights: (..., T, T) -> ()
    """
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean()
