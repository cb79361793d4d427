"""A small, readable training loop for the tiny model, and an evaluation on held-out sequences.

The data are generated on the fly from a seeded generator, so every batch is new (there is
no fixed training set to memorise) and a run is reproducible. Held-out sequences come from a
different seed than the training stream.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .tasks import IGNORE, Task

EVAL_SEED = 2_147_483_647
"""Seed of the held-out sequences: a stream the training seeds (small integers) never produce."""


@dataclass
class History:
    """What a training run produced.

    Attributes:
        losses: the training loss of every step.
        accuracy: held-out accuracy on the scored positions after training.
        seconds: wall-clock time of the training loop.
    """

    losses: list[float] = field(default_factory=list)
    accuracy: float = float("nan")
    seconds: float = 0.0


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the scored positions (targets equal to IGNORE are skipped).

    Shape:
        logits: (B, T, V), targets: (B, T) -> ()
    """
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def evaluate(model: torch.nn.Module, task: Task, n_sequences: int = 2048,
             seed: int = EVAL_SEED, batch_size: int = 512) -> float:
    """Accuracy of the model's most likely token on the scored positions of held-out sequences.

    Args:
        model: maps (B, T) token ids to (B, T, V) logits.
        task: the task to draw sequences from.
        n_sequences: how many held-out sequences to score.
        seed: seed of the held-out stream (not one used for training).
        batch_size: sequences per forward pass.

    Returns:
        The fraction of scored positions predicted correctly, in [0, 1].
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    correct = total = 0
    for start in range(0, n_sequences, batch_size):
        x, y = task.batch(min(batch_size, n_sequences - start), generator=g)
        x, y = x.to(device), y.to(device)
        pred = model(x).argmax(dim=-1)  # (B, T)
        scored = y != IGNORE  # (B, T)
        correct += (pred[scored] == y[scored]).sum().item()
        total += scored.sum().item()
    model.train(was_training)
    return correct / total


def train(model: torch.nn.Module, task: Task, steps: int = 1000, batch_size: int = 64,
          lr: float = 3e-3, seed: int = 0, progress: bool = True,
          eval_sequences: int = 2048) -> History:
    """Train ``model`` on freshly generated batches of ``task`` with AdamW.

    The learning rate warms up over the first 5% of steps, then follows a cosine down to zero:
    a large step size early, small careful steps at the end.

    Args:
        model: maps (B, T) token ids to (B, T, V) logits; trained in place.
        task: where the batches come from.
        steps: number of optimiser steps.
        batch_size: sequences per step.
        lr: peak learning rate.
        seed: seed of the training batches (the model's initial weights are the caller's).
        progress: show a tqdm progress bar.
        eval_sequences: held-out sequences scored at the end.

    Returns:
        A :class:`History` with the loss of every step and the held-out accuracy.
    """
    device = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    history = History()
    model.train()
    start = time.perf_counter()
    bar = tqdm(range(steps), desc=f"training on {task.name}", disable=not progress)
    for step in bar:
        x, y = task.batch(batch_size, generator=g)  # (B, T) each
        x, y = x.to(device), y.to(device)
        loss = sequence_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # guards against rare spikes
        optimizer.step()
        schedule.step()
        history.losses.append(loss.item())
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    history.seconds = time.perf_counter() - start
    history.accuracy = evaluate(model, task, n_sequences=eval_sequences)
    return history
