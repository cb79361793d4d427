"""attnbook.lab.first_head: one head, trained in seconds, learns to look at the previous token."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.lab.first_head import FirstHead, previous_token_weight, train_first_head


def test_shapes_and_the_map():
    torch.manual_seed(0)
    model = FirstHead(vocab_size=7, context_length=9, d_model=8)
    idx = torch.randint(7, (3, 9))
    logits, w = model(idx, return_weights=True)
    assert logits.shape == (3, 9, 7) and w.shape == (3, 9, 9)
    s, a = model.attention_map(idx[0])
    assert s.shape == a.shape == (9, 9)
    assert torch.isinf(s[0, 1:]).all() and torch.isfinite(s.tril()).all()  # causal
    torch.testing.assert_close(a, torch.softmax(s, dim=-1))
    torch.testing.assert_close(a, w[0])


def test_score_scale_sqrt_d_gives_raw_scores():
    torch.manual_seed(0)
    d = 16
    model = FirstHead(5, 6, d, score_scale=math.sqrt(d))
    idx = torch.randint(5, (6,))
    s, _ = model.attention_map(idx)
    x = model.tokens(idx) + model.positions(torch.arange(6))
    raw = model.attn.query(x) @ model.attn.key(x).T  # (T, T): QKᵀ, not divided
    torch.testing.assert_close(s.tril(), raw.detach().tril())


def test_previous_token_weight():
    eye_below = torch.diag(torch.ones(4), -1)[:5, :5]  # all weight one place back
    assert previous_token_weight(eye_below).item() == 1.0
    assert previous_token_weight(torch.full((2, 5, 5), 0.2)).item() == pytest.approx(0.2)


def test_trains_to_a_previous_token_head(one_thread):
    run = train_first_head(seed=0)
    assert run.history.accuracy > 0.99
    assert run.history.seconds < 20
    x, _ = run.task.batch(128, seed=1)
    _, w = run.model(x, return_weights=True)
    assert previous_token_weight(w).item() > 0.9
    # Before training the weights are spread out: far from the previous-token pattern.
    steps = [step for step, _ in run.snapshots]
    assert steps[0] == 0 and steps[-1] == 100 and steps == sorted(steps)
    _, w0 = run.model_at(0)(x, return_weights=True)
    assert previous_token_weight(w0).item() < 0.4
    # The final snapshot is the trained model.
    torch.testing.assert_close(run.model_at(steps[-1])(x), run.model(x))


def test_training_is_reproducible(one_thread):
    a = train_first_head(seed=3, steps=20, snapshot_every=0)
    b = train_first_head(seed=3, steps=20, snapshot_every=0)
    assert a.history.losses == b.history.losses
    assert [s for s, _ in a.snapshots] == [20]
