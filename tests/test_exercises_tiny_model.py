"""The checkers of the lab "A tiny model that learns" accept right answers and name mistakes."""

from __future__ import annotations

import torch

from attnbook.exercises.tiny_model import check_accuracy, check_copy_targets, check_embedding
from attnbook.model import TinyConfig, TinyModel
from attnbook.tasks import IGNORE, copy_batch


def test_copy_targets_checker():
    x, y = copy_batch(4, length=10, delay=3, n_symbols=6, generator=torch.Generator())
    assert check_copy_targets(y, x, 3).ok
    assert "still empty" in check_copy_targets(..., x, 3).message

    def shifted(by, fill=IGNORE):
        out = torch.full_like(x, fill)
        out[:, by:] = x[:, :-by]
        return out

    future = torch.full_like(x, IGNORE)
    future[:, :-3] = x[:, 3:]
    cases = {"torch.roll": torch.roll(x, 3, dims=1), "from the future": future,
             "delay of 2": shifted(2), "delay of 4": shifted(4), "0 is a real token":
             shifted(3, fill=0)}
    for phrase, answer in cases.items():
        fb = check_copy_targets(answer, x, 3)
        assert not fb.ok and phrase in fb.message, fb.message


def test_copy_targets_checker_with_delay_one():
    x, y = copy_batch(2, length=5, delay=1, n_symbols=4, generator=torch.Generator())
    assert check_copy_targets(y, x, 1).ok
    two = torch.full_like(x, IGNORE)
    two[:, 2:] = x[:, :-2]
    assert "delay of 2" in check_copy_targets(two, x, 1).message


def test_embedding_checker():
    model = TinyModel(TinyConfig(6, 8, d_model=16, n_heads=2, n_layers=1))
    idx = torch.randint(6, (2, 8))
    with torch.no_grad():
        assert check_embedding(model.embed(idx), model, idx).ok
        tokens = model.tokens(idx)
        positions = model.positions(torch.arange(8))
        cases = {"token embeddings alone": tokens,
                 "position embeddings alone": positions.expand(2, 8, 16),
                 "looked up by token id": tokens + model.positions(idx)}
        for phrase, answer in cases.items():
            fb = check_embedding(answer, model, idx)
            assert not fb.ok and phrase in fb.message, fb.message


def test_accuracy_checker():
    logits = torch.randn(4, 6, 5)
    targets = torch.randint(5, (4, 6))
    targets[:, :2] = IGNORE
    pred = logits.argmax(-1)
    scored = targets != IGNORE
    acc = ((pred == targets) & scored).sum().item() / scored.sum().item()
    assert check_accuracy(acc, logits, targets).ok
    assert check_accuracy(torch.tensor(acc), logits, targets).ok
    right = ((pred == targets) & scored).sum().item()
    cases = {"IGNORE ones included": right / targets.numel(), "error rate": 1 - acc,
             "percentage": 100 * acc}
    for phrase, answer in cases.items():
        fb = check_accuracy(answer, logits, targets)
        assert not fb.ok and phrase in fb.message, fb.message
