"""Checks for the lab "A tiny model that learns"."""

from __future__ import annotations

import torch

from ..tasks import IGNORE
from . import Feedback, check_tensor


def check_copy_targets(answer, x: torch.Tensor, delay: int) -> Feedback:
    """Exercise: the copy task's targets, y[t] = x[t - delay], IGNORE for t < delay.

    Shape:
        x: (B, T); answer: (B, T)
    """

    def shifted(by: int, fill: int = IGNORE) -> torch.Tensor:
        y = torch.full_like(x, fill)
        if by > 0:
            y[:, by:] = x[:, :-by]
        else:
            y[:, :by] = x[:, -by:]
        return y

    mistakes = {
        "torch.roll, which wraps the last tokens around to the front: there is nothing to "
        "copy yet at t < delay, so those targets must be IGNORE": torch.roll(x, delay, dims=1),
        "targets from the future, x[t + delay]: a causal model cannot see them":
            shifted(-delay),
        f"a delay of {delay + 1}, not {delay} (off by one)": shifted(delay + 1),
        "0 for the first targets: 0 is a real token (a); use IGNORE = -100 so they are not "
        "scored": shifted(delay, fill=0),
    }
    if delay > 1:
        mistakes[f"a delay of {delay - 1}, not {delay} (off by one)"] = shifted(delay - 1)
    return check_tensor(answer, shifted(delay), mistakes, name="the target tensor", atol=0, rtol=0)


def check_embedding(answer, model, idx: torch.Tensor) -> Feedback:
    """Exercise: the model's input, token embedding + position embedding.

    Shape:
        idx: (B, T); answer: (B, T, d)
    """
    T = idx.size(1)
    tokens = model.tokens(idx)  # (B, T, d)
    positions = model.positions(torch.arange(T, device=idx.device))  # (T, d)
    mistakes = {
        "the token embeddings alone: without positions the model cannot tell order":
            tokens,
        "the position embeddings alone: the tokens themselves are missing":
            positions.expand_as(tokens),
        "positions looked up by token id (model.positions(idx)); look them up by position, "
        "torch.arange(T)": tokens + model.positions(idx),
    }
    return check_tensor(answer, tokens + positions, mistakes, name="the embedded input")


def check_accuracy(answer, logits: torch.Tensor, targets: torch.Tensor) -> Feedback:
    """Exercise: the fraction of scored positions whose most likely token is the target.

    Shape:
        logits: (B, T, V), targets: (B, T); answer: a number
    """
    pred = logits.argmax(dim=-1)  # (B, T)
    scored = targets != IGNORE
    right = (pred == targets) & scored
    accuracy = right.sum() / scored.sum()
    mistakes = {
        "an accuracy over every position, the IGNORE ones included: count only targets "
        "!= IGNORE": right.sum() / targets.numel(),
        "an error rate (1 - accuracy)": 1 - accuracy,
        "a percentage: give the fraction, in [0, 1]": 100 * accuracy,
    }
    return check_tensor(answer, accuracy, mistakes, name="the accuracy", atol=1e-6, rtol=0)
