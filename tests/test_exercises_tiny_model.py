"""The checkers of the lab "A tiny model that learns" accept right answers on every hidden case,
name the typical mistakes, and apply the grade's rules in the notebook."""

from __future__ import annotations

import pytest
import torch

from attnbook.exercises import hidden_cases
from attnbook.exercises.tiny_model import (
    GRADED,
    check_accuracy,
    check_copy_targets,
    check_embedding,
)
from attnbook.lab.tasks import IGNORE, copy_batch
from attnbook.model import TinyConfig, TinyModel


def copy_targets(x, delay):
    y = torch.full_like(x, IGNORE)
    y[:, delay:] = x[:, : x.size(1) - delay]
    return y


def copy_targets_by_cat(x, delay):
    """Another right answer: IGNORE columns, then the inputs cut short."""
    d = min(delay, x.size(1))
    return torch.cat([torch.full_like(x[:, :d], IGNORE), x[:, : x.size(1) - d]], dim=1)


def embed_chunk(idx, token_table, position_table, start):
    where = torch.arange(start, start + idx.size(1))
    return token_table[idx] + position_table[where]


def embed_chunk_functional(idx, token_table, position_table, start):
    T = idx.size(1)
    return (torch.nn.functional.embedding(idx, token_table)
            + position_table.narrow(0, start, T))


def top_k_accuracy(logits, targets, k):
    scored = targets != IGNORE
    hit = (logits.topk(k, dim=-1).indices == targets[..., None]).any(-1) & scored
    return (hit.sum() / scored.sum()).item()


def top_k_accuracy_by_rank(logits, targets, k):
    """Another right answer: the target's rank (how many logits beat it) is below k."""
    scored = targets != IGNORE
    own = logits.gather(-1, targets.clamp(min=0)[..., None])  # (B, T, 1)
    rank = (logits > own).sum(-1)
    return ((rank < k) & scored).sum().item() / scored.sum().item()


@pytest.mark.parametrize("seed", [0, 1, 7, 2024])
def test_right_answers_pass_every_hidden_case(seed):
    for name, solve in (("check_copy_targets", copy_targets),
                        ("check_copy_targets", copy_targets_by_cat),
                        ("check_embedding", embed_chunk),
                        ("check_embedding", embed_chunk_functional),
                        ("check_accuracy", top_k_accuracy),
                        ("check_accuracy", top_k_accuracy_by_rank)):
        spec = GRADED[name]
        for case in hidden_cases(spec, seed):
            fb = spec.check(solve(*case.call), *case.check_args)
            assert fb.ok, (name, case.label, fb.message)


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
             shifted(3, fill=0), "no shift": x, "T - delay = 7 columns": x[:, :-3],
             "should be a tensor": "targets", "shape": torch.zeros(4, 9)}
    for phrase, answer in cases.items():
        fb = check_copy_targets(answer, x, 3)
        assert not fb.ok and phrase in fb.message, fb.message


def test_copy_targets_checker_with_delay_one():
    x, y = copy_batch(2, length=5, delay=1, n_symbols=4, generator=torch.Generator())
    assert check_copy_targets(y, x, 1).ok
    two = torch.full_like(x, IGNORE)
    two[:, 2:] = x[:, :-2]
    assert "delay of 2" in check_copy_targets(two, x, 1).message


@pytest.fixture
def tables():
    model = TinyModel(TinyConfig(6, 10, d_model=16, n_heads=2, n_layers=1))
    idx = torch.randint(6, (2, 10))
    return model, idx, model.tokens.weight.detach(), model.positions.weight.detach()


def test_embedding_agrees_with_the_model(tables):
    model, idx, tok, pos = tables
    with torch.no_grad():
        assert check_embedding(model.embed(idx[:, 6:], start=6), idx[:, 6:], tok, pos, 6).ok
        assert check_embedding(model.embed(idx)[:, 6:], idx[:, 6:], tok, pos, 6).ok
        assert check_embedding(model.embed(idx), idx, tok, pos, 0).ok


def test_embedding_mistakes_are_named(tables):
    _, idx, tok, pos = tables
    chunk, T = idx[:, 6:], 4
    tokens = tok[chunk]
    cases = {"counted from 0": tokens + pos[:T],
             "token embeddings alone": tokens,
             "position embeddings alone": pos[6:10].expand(2, T, 16),
             "looked up by token id": tokens + pos[chunk],
             "one position vector for every token": tokens + pos[6],
             "one too early": tokens + pos[5:9],
             "still empty": None,
             "shape": tokens[:, :, :8]}
    for phrase, answer in cases.items():
        fb = check_embedding(answer, chunk, tok, pos, 6)
        assert not fb.ok and phrase in fb.message, fb.message
    fb = check_embedding(tok[idx[:, 2:6]] + pos[3:7], idx[:, 2:6], tok, pos, 2)
    assert not fb.ok and "one too far" in fb.message, fb.message


@pytest.fixture
def scored_logits():
    torch.manual_seed(5)
    logits = torch.randn(16, 6, 10)
    targets = torch.randint(10, (16, 6))
    targets[:, :2] = IGNORE
    return logits, targets


def test_accuracy_right_answer_in_every_form(scored_logits):
    logits, targets = scored_logits
    acc = top_k_accuracy(logits, targets, 3)
    for answer in (acc, torch.tensor(acc), torch.tensor(acc, dtype=torch.float64)):
        assert check_accuracy(answer, logits, targets, 3).ok
    assert check_accuracy(top_k_accuracy(logits, targets, 1), logits, targets, 1).ok


def test_accuracy_mistakes_are_named(scored_logits):
    logits, targets = scored_logits
    k = 3
    scored = targets != IGNORE

    def share(top):
        return ((top == targets[..., None]).any(-1) & scored).sum().item() / scored.sum().item()

    acc = top_k_accuracy(logits, targets, k)
    hit = (logits.topk(k, -1).indices == targets[..., None]).any(-1)
    cases = {"top-1 accuracy": share(logits.argmax(-1, keepdim=True)),
             "least likely": share(logits.topk(k, -1, largest=False).indices),
             "IGNORE ones included": hit.sum().item() / targets.numel(),
             "error rate": 1 - acc, "percentage": 100 * acc, "divided by k": acc / k,
             "one guess too many": share(logits.topk(k + 1, -1).indices),
             "one guess too few": share(logits.topk(k - 1, -1).indices),
             "still empty": None, "should be a tensor": "0.5"}
    for phrase, answer in cases.items():
        fb = check_accuracy(answer, logits, targets, k)
        assert not fb.ok and phrase in fb.message, fb.message


def test_practice_checks_refuse_the_models_embed():
    """Issue 31: in the notebook the check applies the grade's method limits."""
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.model import TinyConfig, TinyModel\n"
         "from attnbook.exercises.tiny_model import check_embedding\n"
         "model = TinyModel(TinyConfig(6, 10, d_model=16, n_heads=2, n_layers=1))\n"
         "def embed_chunk(idx, token_table, position_table, start):\n"
         "    with torch.no_grad():\n"
         "        return model.embed(idx, start=start)\n"
         "idx = torch.randint(6, (2, 4))\n"
         "tok, pos = model.tokens.weight.detach(), model.positions.weight.detach()\n"
         "result = check_embedding(embed_chunk(idx, tok, pos, 6), idx, tok, pos, 6)\n", ns)
    assert ns["result"].message.startswith("Right values, but embed_chunk uses embed"), \
        ns["result"].message


def test_answers_fixed_to_the_labs_input_fail_the_second_input():
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.lab.tasks import IGNORE\n"
         "from attnbook.exercises.tiny_model import check_copy_targets, check_accuracy\n"
         "def copy_targets(x, delay):\n"
         "    y = torch.full_like(x, IGNORE)\n"
         "    y[:, 3:] = x[:, :-3]\n"
         "    return y\n"
         "def top_k_accuracy(logits, targets, k):\n"
         "    return 0.5\n"
         "x = torch.randint(10, (4, 16))\n"
         "first = check_copy_targets(copy_targets(x, 3), x, 3)\n"
         "logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0], [0.0, 1.0, 2.0, 3.0]]])\n"
         "targets = torch.tensor([[1, 0]])\n"
         "second = check_accuracy(top_k_accuracy(logits, targets, 2), logits, targets, 2)\n",
         ns)
    for verdict in (ns["first"], ns["second"]):
        assert verdict.message.startswith("Right values on the lab's input, but not on a "
                                          "second input"), verdict.message
