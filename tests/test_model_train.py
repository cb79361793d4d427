"""The tiny model and its training loop: shapes, causality, why positions matter, it learns."""

from __future__ import annotations

import re

import pytest
import torch

from attnbook.lab.tasks import get_task
from attnbook.lab.train import evaluate, sequence_loss, train
from attnbook.model import TinyConfig, TinyModel
from attnbook.multihead import MultiHeadAttention


def test_model_shapes_and_weights():
    cfg = TinyConfig(vocab_size=7, context_length=9, d_model=16, n_heads=4, n_layers=2)
    model = TinyModel(cfg)
    idx = torch.randint(7, (3, 9))
    logits, weights = model(idx, return_weights=True)
    assert logits.shape == (3, 9, 7)
    assert len(weights) == 2 and all(w.shape == (3, 4, 9, 9) for w in weights)
    assert all(isinstance(b.attn, MultiHeadAttention) for b in model.blocks)
    torch.testing.assert_close(model(idx), logits)  # fused path vs explicit: rounding only


def test_parameter_count():
    V, T, d, L = 7, 9, 16, 2
    model = TinyModel(TinyConfig(V, T, d, n_heads=2, n_layers=L, mlp=True))
    per_block = 4 * d * d + 2 * (2 * d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    expected = V * d + T * d + L * per_block + 2 * d + (d * V + V)
    assert model.num_parameters() == expected
    no_mlp = TinyModel(TinyConfig(V, T, d, n_heads=2, n_layers=1, mlp=False, positions=False))
    assert no_mlp.num_parameters() == V * d + 4 * d * d + 2 * d + 2 * d + d * V + V


def test_model_is_causal():
    model = TinyModel(TinyConfig(5, 8, 16, 2, 2))
    idx = torch.randint(5, (2, 8))
    changed = idx.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 5
    torch.testing.assert_close(model(changed)[:, :5], model(idx)[:, :5])


def test_without_positions_one_layer_cannot_see_the_order_of_earlier_tokens():
    torch.manual_seed(1)
    idx = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 2]])
    shuffled = torch.tensor([[5, 3, 0, 6, 1, 4, 2, 2]])  # same tokens before the last one
    blind = TinyModel(TinyConfig(7, 8, 16, 2, n_layers=1, positions=False))
    torch.testing.assert_close(blind(shuffled)[:, -1], blind(idx)[:, -1])
    seeing = TinyModel(TinyConfig(7, 8, 16, 2, n_layers=1, positions=True))
    assert not torch.allclose(seeing(shuffled)[:, -1], seeing(idx)[:, -1])


def test_attention_without_mask_or_positions_is_permutation_equivariant():
    m = MultiHeadAttention(8, 6, 2).double()
    m.mask.fill_(False)  # switch the causal mask off: every token sees every token
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    torch.testing.assert_close(m(x[:, perm]), m(x)[:, perm], rtol=1e-12, atol=1e-12)


def test_sequence_loss_skips_ignored_positions():
    logits = torch.randn(2, 3, 4)
    y = torch.tensor([[-100, 1, 2], [3, -100, -100]])
    picked = torch.stack([logits[0, 1], logits[0, 2], logits[1, 0]])
    expected = torch.nn.functional.cross_entropy(picked, torch.tensor([1, 2, 3]))
    torch.testing.assert_close(sequence_loss(logits, y), expected)


def test_a_miniature_model_learns_to_copy(one_thread):
    task = get_task("copy", length=8, delay=2, n_symbols=6)
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(task.vocab_size, task.seq_len, d_model=32, n_heads=2,
                                 n_layers=1, mlp=False))
    before = evaluate(model, task, n_sequences=256)
    history = train(model, task, steps=150, batch_size=32, lr=1e-2, progress=False,
                    eval_sequences=512)
    assert len(history.losses) == 150 and history.seconds > 0
    assert before < 0.4  # chance is 1/6
    assert history.accuracy > 0.9, history.accuracy
    assert history.losses[-1] < 0.5 * history.losses[0]


def test_training_is_reproducible(one_thread):
    task = get_task("copy", length=6, delay=1, n_symbols=4)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyModel(TinyConfig(task.vocab_size, task.seq_len, 16, 2, 1, mlp=False))
        runs.append(train(model, task, steps=5, batch_size=8, progress=False,
                          eval_sequences=64))
    assert runs[0].losses == runs[1].losses and runs[0].accuracy == runs[1].accuracy


def test_evaluate_restores_training_mode():
    task = get_task("induction", length=6, n_symbols=4)
    model = TinyModel(TinyConfig(task.vocab_size, task.seq_len, 8, 2, 1))
    model.train()
    acc = evaluate(model, task, n_sequences=100, batch_size=30)
    assert 0.0 <= acc <= 1.0 and model.training


@pytest.mark.parametrize(("ids", "error", "words"), [
    (lambda V: torch.randint(V, (5,)), ValueError, "unsqueeze(0)"),
    (lambda V: torch.randint(V, (2, 5)).float(), TypeError, "ids.long()"),
    (lambda V: torch.full((2, 5), V), ValueError, "vocab_size - 1"),
    (lambda V: torch.full((2, 5), -1), ValueError, "vocab_size - 1"),
])
def test_token_ids_are_checked_by_name(ids, error, words):
    cfg = TinyConfig(vocab_size=7, context_length=12, d_model=16, n_heads=4, n_layers=1)
    model = TinyModel(cfg)
    for call in (lambda i: model(i), lambda i: model.generate(i, 2),
                 lambda i: model.step(i, model.new_caches(i.size(0) if i.dim() else 1))):
        with pytest.raises(error, match=re.escape(words)):
            call(ids(cfg.vocab_size))


def test_config_and_generate_refuse_nonsense_sizes():
    with pytest.raises(ValueError, match="vocab_size"):
        TinyConfig(vocab_size=0, context_length=8)
    with pytest.raises(ValueError, match="n_layers"):
        TinyConfig(vocab_size=5, context_length=8, n_layers=0)
    model = TinyModel(TinyConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2))
    with pytest.raises(ValueError, match="n must be"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), -1)
