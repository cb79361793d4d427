"""The synthetic tasks: shapes, answers where the task says, reproducible from a seed."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.lab.tasks import IGNORE, TASKS, copy_batch, get_task, induction_batch, reverse_batch


@pytest.mark.parametrize("name", TASKS)
def test_batches_have_the_task_shape_and_vocabulary(name):
    task = get_task(name)
    x, y = task.batch(32, seed=1)
    assert x.shape == y.shape == (32, task.seq_len)
    assert x.dtype == y.dtype == torch.long
    assert 0 <= x.min() and x.max() < task.vocab_size
    scored = y[y != IGNORE]
    assert scored.numel() > 0 and 0 <= scored.min() and scored.max() < task.vocab_size


@pytest.mark.parametrize("name", TASKS)
def test_a_seed_gives_the_same_batch_and_a_generator_a_stream(name):
    task = get_task(name)
    a, b = task.batch(8, seed=3), task.batch(8, seed=3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    g = torch.Generator().manual_seed(3)
    first, second = task.batch(8, generator=g), task.batch(8, generator=g)
    assert torch.equal(first[0], a[0]) and not torch.equal(first[0], second[0])


def test_copy_answers_are_the_tokens_delay_steps_back():
    x, y = copy_batch(16, length=10, delay=4, n_symbols=7, generator=torch.Generator())
    assert (y[:, :4] == IGNORE).all()
    assert torch.equal(y[:, 4:], x[:, :-4])


def test_copy_rejects_a_delay_outside_the_sequence():
    for delay in (0, 10):
        with pytest.raises(ValueError, match="delay"):
            copy_batch(2, length=10, delay=delay)


def test_reverse_emits_the_symbols_backwards_after_the_separator():
    n, n_symbols = 5, 6
    x, y = reverse_batch(16, n=n, n_symbols=n_symbols, generator=torch.Generator())
    assert x.shape == (16, 2 * n)
    assert (x[:, n] == n_symbols).all() and (x[:, :n] < n_symbols).all()
    assert (y[:, :n] == IGNORE).all()
    assert torch.equal(y[:, n:], x[:, :n].flip(1))
    # Teacher forcing: after the separator the input is the answer of the step before.
    assert torch.equal(x[:, n + 1:], y[:, n:-1])


def test_induction_answer_is_the_token_after_the_earlier_copy_of_the_last_token():
    x, y = induction_batch(200, length=12, n_symbols=9, generator=torch.Generator())
    assert (y[:, :-1] == IGNORE).all()
    for row, target in zip(x, y[:, -1]):
        A = row[-1]
        where = (row == A).nonzero().flatten()
        assert len(where) == 2, "A appears exactly twice"
        p = where[0].item()
        assert p + 1 <= 12 - 3 and row[p + 1] == target and target != A


def test_induction_pair_positions_and_answers_vary():
    x, y = induction_batch(500, length=12, n_symbols=9, generator=torch.Generator())
    first = torch.stack([(row == row[-1]).nonzero()[0, 0] for row in x])
    assert len(first.unique()) == 12 - 3
    assert len(y[:, -1].unique()) == 9


def test_get_task_options_and_errors():
    task = get_task("copy", delay=2, n_symbols=5)
    assert task.vocab_size == 5 and task.chance == pytest.approx(0.2)
    assert get_task("reverse", n=4).seq_len == 8 and get_task("reverse").vocab_size == 11
    assert get_task("induction").chance == pytest.approx(1 / 15)
    with pytest.raises(ValueError, match="unknown task"):
        get_task("sort")
    with pytest.raises(ValueError, match="length >= 4"):
        induction_batch(2, length=3)


def test_decode_gives_letters_and_the_separator():
    task = get_task("reverse", n=3, n_symbols=4)
    x, _ = task.batch(1, seed=0)
    symbols = task.decode(x[0])
    assert symbols[3] == "|" and all(s in "abcd" for s in symbols[:3])


def test_copy_set_baseline_small_cases_by_hand():
    from attnbook.lab.tasks import copy_set_baseline
    # delay 1, 2 symbols: t = 1 always right; t = 2 right unless the two differ (then 1/2)
    acc, nats = copy_set_baseline(length=3, delay=1, n_symbols=2)
    assert acc == pytest.approx((1 + 0.75) / 2)
    assert nats == pytest.approx((0 + 0.5 * math.log(2)) / 2)
    assert copy_set_baseline(length=2, delay=1, n_symbols=5) == (1.0, 0.0)
    with pytest.raises(ValueError, match="delay"):
        copy_set_baseline(length=4, delay=4)


def test_copy_set_baseline_agrees_with_sampling_the_best_set_predictor():
    """Simulate the predictor that guesses the most frequent earlier token (it sees no order)
    on the copy task's own batches: its accuracy and cross-entropy match the exact values."""
    from attnbook.lab.tasks import copy_set_baseline
    acc, nats = copy_set_baseline()
    assert round(acc, 3) == 0.304 and round(nats, 2) == 1.62  # chapter 14's numbers
    x, y = get_task("copy").batch(4000, seed=5)  # (B, 16)
    right, loss = [], []
    for t in range(3, 16):
        counts = torch.nn.functional.one_hot(x[:, :t], 10).sum(1)  # (B, 10) of x_0 .. x_{t-1}
        right.append(counts.argmax(1) == y[:, t])
        loss.append(-torch.log(counts.gather(1, y[:, t : t + 1]).squeeze(1) / t))
    sampled_acc = torch.cat(right).double().mean().item()
    sampled_nats = torch.cat(loss).double().mean().item()
    assert abs(sampled_acc - acc) < 0.01  # standard error about 0.002
    assert abs(sampled_nats - nats) < 0.02
