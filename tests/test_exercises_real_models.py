"""The checker of the lab "The attention of real models" accepts the right split of GPT-NeoX's
fused projection, agrees with the converter and transformers, and names each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook.exercises import hidden_cases
from attnbook.exercises.real_models import GRADED, check_split_qkv

H, D_H, D = 3, 2, 5
W = torch.randn(3 * H * D_H, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def right(W, h, d_h):
    rows = W.view(h, 3, d_h, -1)
    return tuple(rows[:, i].reshape(h * d_h, -1) for i in range(3))


def test_right_split_passes_and_equals_the_converter_on_gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXModel

    from attnbook.convert import from_transformers

    assert check_split_qkv(right(W, H, D_H), W, H, D_H).ok
    assert "still empty" in check_split_qkv(..., W, H, D_H).message
    config = GPTNeoXConfig(hidden_size=24, num_attention_heads=3, num_hidden_layers=1,
                           intermediate_size=8, vocab_size=5)
    layer = GPTNeoXModel(config).layers[0].attention
    m = from_transformers(layer, config)
    fused = layer.query_key_value.weight
    assert check_split_qkv((m.query.weight, m.key.weight, m.value.weight), fused, 3, 8).ok


@pytest.mark.parametrize("answer, phrase", [
    (W.chunk(3), "three blocks of rows"),
    (tuple(W.view(H, D_H, 3, D)[:, :, i].reshape(H * D_H, D) for i in range(3)),
     "every third row"),
    (tuple(W.view(D_H, 3, H, D)[:, i].reshape(H * D_H, D) for i in range(3)), "swapped"),
    (tuple(right(W, H, D_H)[i] for i in (1, 0, 2)), "order (k, q, v)"),
    (tuple(right(W, H, D_H)[i] for i in (2, 1, 0)), "order (v, k, q)"),
    (right(W, H, D_H)[:2], "three matrices"),
    ((W[:6], W[:6], W[:5]), "one shape"),
])
def test_mistakes_are_named(answer, phrase):
    fb = check_split_qkv(answer, W, H, D_H)
    assert not fb.ok and phrase in fb.message, fb.message


def test_hidden_cases_pass_the_right_function_and_catch_chunk():
    spec = GRADED["check_split_qkv"]
    for case in hidden_cases(spec, seed=3):
        assert spec.check(right(*case.call), *case.check_args).ok, case.label
    caught = [not spec.check(case.call[0].chunk(3), *case.check_args).ok
              for case in hidden_cases(spec, seed=3)]
    assert all(caught)
