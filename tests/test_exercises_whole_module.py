"""The checkers of the lab "The whole module, verified" accept right answers, name mistakes, and
grade the exercises as functions on hidden inputs (issue 31)."""

from __future__ import annotations

import pytest
import torch

from attnbook import blocked_positions, causal_mask, to_additive_mask, to_sdpa_mask
from attnbook.exercises import hidden_cases
from attnbook.exercises.whole_module import (
    GRADED,
    check_key_padding_mask,
    check_sdpa_mask,
    check_split_in_proj,
)

# One right-padded and one left-padded sequence, as in the lab, so that every mistake changes
# the mask.
PAD = torch.tensor([[True, True, True, True, False], [False, False, True, True, True]])
B, T = PAD.shape
N_NEW = 2


# The book's solutions (the lab's solution cells), and one answer written another way.


def cached_sdpa_mask(padding_mask, n_new):
    n_keys = padding_mask.size(1)
    seen = torch.ones(n_new, n_keys, dtype=torch.bool).tril(diagonal=n_keys - n_new)
    return seen & padding_mask[:, None, :]


def cached_sdpa_mask_arange(padding_mask, n_new):
    n_keys = padding_mask.size(1)
    i = torch.arange(n_keys - n_new, n_keys)[:, None]  # the new queries' positions
    j = torch.arange(n_keys)[None, :]
    return ((j <= i) & padding_mask[:, None, :])[:, None]  # (B, 1, n_new, n_keys)


def key_padding_mask(attention_mask):
    return attention_mask == 0


def split_in_proj(in_proj_weight):
    return in_proj_weight.reshape(3, -1, in_proj_weight.size(1))


SOLUTIONS = {"check_sdpa_mask": cached_sdpa_mask, "check_key_padding_mask": key_padding_mask,
             "check_split_in_proj": split_in_proj}


@pytest.mark.parametrize("seed", [0, 1, 12345])
@pytest.mark.parametrize("name", sorted(GRADED))
def test_the_solutions_pass_every_hidden_case(name, seed):
    spec = GRADED[name]
    for case in hidden_cases(spec, seed):
        fb = spec.check(SOLUTIONS[name](*case.call), *case.check_args)
        assert fb.ok, (case.label, fb.message)


def test_hidden_cases_are_saved_as_plain_data():
    """The grader saves the arguments with torch.save and loads them with weights_only=True."""
    import io

    for spec in GRADED.values():
        buffer = io.BytesIO()
        torch.save([c.call for c in hidden_cases(spec, 3)], buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)


# Exercise 3: SDPA's attn_mask for a KV-cache step.


def test_sdpa_mask_right_answers():
    right = cached_sdpa_mask(PAD, N_NEW)
    assert check_sdpa_mask(right, PAD, n_new=N_NEW).ok
    assert check_sdpa_mask(cached_sdpa_mask_arange(PAD, N_NEW), PAD, N_NEW).ok  # (B, 1, n, L)
    # The whole prompt (n_new = T): the library's square mask, and a broadcast built by hand.
    assert check_sdpa_mask(to_sdpa_mask(blocked_positions(causal_mask(T), PAD)), PAD).ok
    assert check_sdpa_mask(~causal_mask(T) & PAD[:, None, :], PAD, T).ok
    assert "still empty" in check_sdpa_mask(..., PAD, N_NEW).message


SEEN = torch.ones(N_NEW, T, dtype=torch.bool).tril(diagonal=T - N_NEW)  # (n_new, T)
KEYS = PAD[:, None, :]
ALLOWED = SEEN & KEYS


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (~ALLOWED, "True = may attend"),
        (SEEN, "causal part only"),  # (n_new, T): broadcast like SDPA would
        (KEYS, "causal mask is missing"),  # (B, 1, T)
        (SEEN & ~KEYS, "padding flipped"),
        (to_additive_mask(~ALLOWED), "additive float mask"),
        (torch.ones(N_NEW, T, dtype=torch.bool).tril() & KEYS, "top-left corner"),
        (torch.ones(T, T, dtype=torch.bool).tril() & KEYS, "whole square mask"),
        (SEEN & PAD[:, -N_NEW:, None], "queries (rows)"),
        (torch.ones(N_NEW, T, dtype=torch.bool).tril(T - N_NEW - 1) & KEYS, "one too low"),
        (ALLOWED.long(), "dtype torch.int64"),
        (ALLOWED.float(), "add .bool()"),
        (torch.ones(2, 4, 4, dtype=torch.bool), "shape (2, 4, 4)"),
        ([[True, False]], "shape (1, 2)"),
        ((ALLOWED, ALLOWED), "should be a tensor"),
    ],
)
def test_sdpa_mask_mistakes_are_named(answer, phrase):
    fb = check_sdpa_mask(answer, PAD, n_new=N_NEW)
    assert not fb.ok and phrase in fb.message, fb.message


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (~causal_mask(T).T & KEYS, "transposed"),
        (~causal_mask(T) & PAD[:, :, None], "queries (rows)"),
    ],
)
def test_square_sdpa_mask_mistakes_are_named(answer, phrase):
    """n_new = n_keys, the whole prompt: the square mask's own mistakes."""
    fb = check_sdpa_mask(answer, PAD)
    assert not fb.ok and phrase in fb.message, fb.message


def test_a_diagonal_one_too_high_is_named():
    n = 3  # with n_new = 2 of 5 keys, one too high sees every key: the padding-only mistake
    high = torch.ones(n, T, dtype=torch.bool).tril(T - n + 1) & KEYS
    fb = check_sdpa_mask(high, PAD, n_new=n)
    assert not fb.ok and "one too high" in fb.message, fb.message


# Exercise 2: MHA's key_padding_mask from a tokenizer's attention_mask.

IDS_MASK = PAD.long()


def test_key_padding_mask_right_answers():
    assert check_key_padding_mask(IDS_MASK == 0, IDS_MASK).ok
    assert check_key_padding_mask(~IDS_MASK.bool(), IDS_MASK).ok
    assert check_key_padding_mask((IDS_MASK == 0).tolist(), IDS_MASK).ok


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (IDS_MASK.bool(), "not inverted"),
        (IDS_MASK, "not inverted"),
        (~IDS_MASK, "bitwise NOT of an integer tensor"),
        (1 - IDS_MASK, "dtype torch.int64"),
        (to_additive_mask(~PAD), "additive float mask"),
        (to_additive_mask(PAD), "-inf at the real tokens"),
        (torch.ones(B, T, T, dtype=torch.bool), "one entry per key"),
        ([[True, False]], "shape (1, 2)"),
        (None, "still empty"),
    ],
)
def test_key_padding_mask_mistakes_are_named(answer, phrase):
    fb = check_key_padding_mask(answer, IDS_MASK)
    assert not fb.ok and phrase in fb.message, fb.message


# Exercise 1: MHA's in_proj_weight split into our three weights.


def test_split_in_proj():
    mha = torch.nn.MultiheadAttention(6, 1, bias=False)
    w = mha.in_proj_weight.detach()
    q, k, v = w.chunk(3)
    assert check_split_in_proj(split_in_proj(w), w).ok
    assert check_split_in_proj(torch.stack(w.chunk(3)), w).ok
    assert check_split_in_proj(w.view(3, 6, 6).tolist(), w).ok  # nested lists of numbers
    cases = {
        "transposed": torch.stack([q.T, k.T, v.T]),
        "you have k, q, v": torch.stack([k, q, v]),
        "you have q, v, k": torch.stack([q, v, k]),
        "you have v, k, q": torch.stack([v, k, q]),
        "every third row": w.view(6, 3, 6).transpose(0, 1),
        "first block three times": torch.stack([q, q, q]),
        "split along dim 1": torch.stack(w.chunk(3, dim=1)),
        "in_proj_weight as it is": w,
        "tuple of three tensors": tuple(w.chunk(3)),
        "list of three tensors": list(w.chunk(3)),
        "shape (2, 6, 6)": torch.stack([q, k]),
        "still empty": ...,
        "should be a tensor": (q, "k", v),
    }
    for phrase, answer in cases.items():
        fb = check_split_in_proj(answer, w)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


# The practice checks apply the grade's rules (issue 31 §1).


def test_practice_check_refuses_the_librarys_converters():
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook import blocked_positions, causal_mask, to_sdpa_mask\n"
         "from attnbook.exercises.whole_module import check_sdpa_mask\n"
         "def cached_sdpa_mask(padding_mask, n_new):\n"
         "    L = padding_mask.size(1)\n"
         "    return to_sdpa_mask(blocked_positions(causal_mask(L), padding_mask))[:, L - n_new:]\n"
         "pad = torch.tensor([[True, True, True, True, False], [False, False, True, True, True]])\n"
         "result = check_sdpa_mask(cached_sdpa_mask(pad, 2), pad, n_new=2)\n", ns)
    message = ns["result"].message
    assert message.startswith("Right values, but cached_sdpa_mask uses "), message
    assert "to_sdpa_mask" in message and "blocked_positions" in message, message


@pytest.mark.parametrize("code, call", [
    ("def cached_sdpa_mask(padding_mask, n_new):\n"
     "    return torch.tensor([[[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]],\n"
     "                         [[0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]]).bool()\n",
     "check_sdpa_mask(cached_sdpa_mask(pad, 2), pad, n_new=2)"),
    ("def key_padding_mask(attention_mask):\n"
     "    return torch.tensor([[False, False, False, False, True],\n"
     "                         [True, True, False, False, False]])\n",
     "check_key_padding_mask(key_padding_mask(pad.long()), pad.long())"),
    ("def split_in_proj(in_proj_weight):\n"
     "    return in_proj_weight.reshape(3, 8, 8)\n",
     "check_split_in_proj(split_in_proj(w), w)"),
])
def test_an_answer_fixed_to_the_labs_input_fails_the_second_input(code, call):
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.whole_module import (check_key_padding_mask,\n"
         "    check_sdpa_mask, check_split_in_proj)\n"
         "pad = torch.tensor([[True, True, True, True, False], [False, False, True, True, True]])\n"
         "w = torch.randn(24, 8)\n" + code + f"result = {call}\n", ns)
    assert ns["result"].message.startswith("Right values on the lab's input, but not on a "
                                           "second input"), ns["result"].message
