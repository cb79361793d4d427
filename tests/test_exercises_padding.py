"""The padding lab's checkers accept the right answer and name each typical mistake; the
exercises are functions graded on hidden inputs (issue 31)."""

from __future__ import annotations

import pytest
import torch
from conftest import book_solutions

from attnbook import Attention, blocked_positions, causal_mask, masked_softmax
from attnbook.exercises import hidden_cases
from attnbook.exercises.padding import GRADED, check_blocked, check_empty_rows, empty_rows
from attnbook.seed import Attention as Seed

SOLUTIONS = book_solutions("05_padding")


def test_the_lab_has_the_two_functions():
    assert {c: f.__name__ for c, f in SOLUTIONS.items()} == {
        c: spec.function for c, spec in GRADED.items()}


@pytest.mark.parametrize("check", sorted(GRADED))
@pytest.mark.parametrize("seed", [0, 1, 7, 2024])
def test_the_books_solution_passes_every_hidden_case(check, seed):
    spec = GRADED[check]
    for case in hidden_cases(spec, seed):
        fb = spec.check(SOLUTIONS[check](*case.call), *case.check_args)
        assert fb.ok, (case.label, fb.message)


# Exercise 1: step_blocked(padding_mask, n_new), as in the lab: the left-padded batch of
# 6, 3 and 1 tokens, the last 2 tokens new.

LEFT = torch.tensor([[True] * 6, [False] * 3 + [True] * 3, [False] * 5 + [True]])
L, N = 6, 2


def _step(offset):
    return torch.ones(N, L, dtype=torch.bool).triu(offset + 1)


def test_step_blocked_right_answers():
    right = SOLUTIONS["check_blocked"](LEFT, N)
    assert check_blocked(right, LEFT, N).message == "Correct: your blocked matrix matches."
    assert torch.equal(right, blocked_positions(causal_mask(L), LEFT)[:, L - N:])
    assert check_blocked(right.tolist(), LEFT, N).ok
    assert "still empty" in check_blocked(..., LEFT, N).message


def test_step_blocked_is_what_the_module_computes():
    """The new queries' outputs, computed from their rows of the matrix, equal the full pass."""
    torch.manual_seed(0)
    m = Attention(4, L).double()
    x = torch.randn(3, L, 4, dtype=torch.float64)
    blocked = SOLUTIONS["check_blocked"](LEFT, N)  # (B, N, L)
    q, k, v = m.query(x)[:, L - N:], m.key(x), m.value(x)
    w = masked_softmax(q @ k.transpose(1, 2) / 2, blocked)  # an empty row: weights 0
    assert torch.allclose(w @ v, m(x, LEFT)[:, L - N:])


PAD_KEYS = ~LEFT[:, None, :]


@pytest.mark.parametrize("answer, phrase", [
    (_step(4) | ~LEFT[:, 4:, None], "masked queries (rows) instead of keys"),
    (_step(4) | LEFT[:, None, :], "without inverting it"),
    (PAD_KEYS.expand(3, N, L), "causal mask is missing"),
    (_step(4) & PAD_KEYS, "instead of |"),
    (~(_step(4) | PAD_KEYS), "allowed positions"),
    (_step(0) | PAD_KEYS, "top-left corner"),
    (causal_mask(L) | PAD_KEYS, "whole square (B, L, L)"),
    (causal_mask(N) | ~LEFT[:, None, 4:], "new keys alone"),
    (_step(3) | PAD_KEYS, "one too low"),
    ((_step(4) | PAD_KEYS).int(), "bool"),
    (causal_mask(L), "shape (6, 6)"),
])
def test_step_blocked_mistakes_are_named(answer, phrase):
    fb = check_blocked(answer, LEFT, N)
    assert not fb.ok and phrase in fb.message, fb.message


def test_the_causal_part_alone_is_named_on_a_mixed_batch():
    """With the new tokens' own padding (right padding), masking rows and the causal part
    alone are told apart."""
    right_padded = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    fb = check_blocked(_step(4).expand(2, N, L), right_padded, N)
    assert not fb.ok and "padding keys are missing" in fb.message, fb.message
    fb = check_blocked(_step(4) | ~right_padded[:, 4:, None], right_padded, N)
    assert not fb.ok and "masked queries" in fb.message, fb.message


# The square blocked matrix of an older edition (n_new left out: every position a query).

PAD = torch.tensor([[True, True, True, False, False],
                    [False, False, True, True, True],
                    [True, True, True, True, True]])
T = PAD.size(1)
CAUSAL = causal_mask(T)


@pytest.mark.parametrize("answer, phrase", [
    (CAUSAL | ~PAD[:, :, None], "masked queries (rows) instead of keys (columns)"),
    (CAUSAL | PAD[:, None, :], "without inverting it"),
    (CAUSAL | ~PAD[:, None, :] | ~PAD[:, :, None], "both rows and columns"),
    (~PAD[:, None, :].expand(3, T, T), "causal mask is missing"),
    (CAUSAL.expand(3, T, T), "padding keys are missing"),
    (CAUSAL & ~PAD[:, None, :], "instead of |"),
    (~(CAUSAL | ~PAD[:, None, :]), "allowed positions"),
])
def test_square_blocked_mistakes_are_named(answer, phrase):
    assert check_blocked(CAUSAL | ~PAD[:, None, :], PAD).ok
    fb = check_blocked(answer, PAD)
    assert not fb.ok and phrase in fb.message, fb.message


@pytest.mark.parametrize("answer", [None, ..., [1, 2], "mask", (LEFT, LEFT),
                                    torch.zeros(3, N, L, dtype=torch.float16)])
def test_step_blocked_bad_input_is_told_not_raised(answer):
    fb = check_blocked(answer, LEFT, N)
    assert not fb.ok and fb.message.startswith("Not yet"), fb.message


# Exercise 2: window_empty_rows(padding_mask, w), as in the lab: the right-padded batch, w = 2.

RIGHT = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [True] + [False] * 5])


def test_empty_rows_are_where_the_seed_gives_nan():
    original = Seed(4, T)
    out = original(torch.randn(3, T, 4), PAD)
    assert torch.equal(torch.isnan(out).any(dim=-1), empty_rows(PAD))
    assert empty_rows(PAD).tolist() == [[False] * 5, [True, True, False, False, False],
                                        [False] * 5]


def test_window_empty_rows_right_answers():
    right = SOLUTIONS["check_empty_rows"](RIGHT, 2)
    assert right.tolist() == [[False] * 6, [False] * 4 + [True] * 2, [False] * 2 + [True] * 4]
    assert check_empty_rows(right, RIGHT, 2).ok
    assert check_empty_rows(right.tolist(), RIGHT, 2).ok
    assert torch.equal(SOLUTIONS["check_empty_rows"](PAD, T), empty_rows(PAD))


def test_window_empty_rows_are_where_a_plain_softmax_gives_nan():
    """A window's empty rows are where torch.softmax over the windowed, padded scores is NaN."""
    from attnbook.kv_cache import window_mask

    s = torch.randn(3, 6, 6, dtype=torch.float64)
    blocked = window_mask(6, 2) | ~RIGHT[:, None, :]
    nan = torch.softmax(s.masked_fill(blocked, float("-inf")), dim=-1).isnan().any(dim=-1)
    assert torch.equal(nan, SOLUTIONS["check_empty_rows"](RIGHT, 2))


@pytest.mark.parametrize("answer, phrase", [
    (empty_rows(RIGHT), "causal mask alone"),
    (~RIGHT, "every padded position"),
    (RIGHT, "the real tokens"),
    (torch.zeros(3, 6, dtype=torch.bool), "causal mask alone"),  # right padding: none
    ((~RIGHT).any(dim=-1, keepdim=True).expand(3, 6), "a real query always sees itself"),
    (empty_rows(RIGHT, 3), "one key too wide"),
    ((torch.arange(6)[:, None] - torch.arange(6) < 0) | (torch.arange(6)[:, None]
                                                         - torch.arange(6) >= 2)
     | ~RIGHT[:, None, :], "blocked matrix itself"),
])
def test_window_empty_rows_mistakes_are_named(answer, phrase):
    fb = check_empty_rows(answer, RIGHT, 2)
    assert not fb.ok and phrase in fb.message, fb.message


def test_window_off_by_one_and_any_are_named_on_a_wider_window():
    mixed = torch.tensor([[True, False, True, False, False, False, False],
                          [False, False, True, True, False, False, False]])
    fb = check_empty_rows(empty_rows(mixed, 2), mixed, 3)
    assert not fb.ok and "one key too narrow" in fb.message, fb.message
    pad = (~mixed).long()
    anyp = torch.stack([(pad[:, max(0, i - 2):i + 1] > 0).any(-1) for i in range(7)], -1)
    fb = check_empty_rows(anyp, mixed, 3)
    assert not fb.ok and "all, not any" in fb.message, fb.message


def test_square_empty_rows_of_an_older_edition():
    expected = torch.zeros(3, T, dtype=torch.bool)
    expected[1, :2] = True
    assert check_empty_rows(expected, PAD).ok
    fb = check_empty_rows(~PAD, PAD)
    assert not fb.ok and "every padded position" in fb.message


@pytest.mark.parametrize("answer", [None, ..., [1, 2], "rows", (RIGHT, RIGHT)])
def test_window_empty_rows_bad_input_is_told_not_raised(answer):
    fb = check_empty_rows(answer, RIGHT, 2)
    assert not fb.ok and fb.message.startswith("Not yet"), fb.message


# The practice checks apply the grade's rules (issue 31 §1).


def _run(source: str) -> dict:
    ns = {"__name__": "__main__"}
    exec(source, ns)  # noqa: S102 (the test's own code)
    return ns


PRELUDE = ("import torch\n"
           "from attnbook.exercises.padding import check_blocked, check_empty_rows\n"
           "pm_l = torch.tensor([[True] * 6, [False] * 3 + [True] * 3, [False] * 5 + [True]])\n"
           "pm = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [True] + [False] * 5])\n")


def test_practice_checks_refuse_the_librarys_masks():
    ns = _run(PRELUDE + (
        "from attnbook import blocked_positions, causal_mask\n"
        "from attnbook.kv_cache import window_mask\n"
        "def step_blocked(padding_mask, n_new):\n"
        "    L = padding_mask.size(-1)\n"
        "    return blocked_positions(causal_mask(L), padding_mask)[:, L - n_new:]\n"
        "def window_empty_rows(padding_mask, w):\n"
        "    T = padding_mask.size(-1)\n"
        "    return (window_mask(T, w) | ~padding_mask[:, None, :]).all(-1)\n"
        "first = check_blocked(step_blocked(pm_l, 2), pm_l, 2)\n"
        "second = check_empty_rows(window_empty_rows(pm, 2), pm, 2)\n"))
    assert ns["first"].message.startswith("Right values, but step_blocked uses "
                                          "blocked_positions, causal_mask"), ns["first"].message
    assert ns["second"].message.startswith("Right values, but window_empty_rows uses "
                                           "window_mask"), ns["second"].message


def test_practice_checks_accept_the_right_functions():
    ns = _run(PRELUDE + (
        "def step_blocked(padding_mask, n_new):\n"
        "    B, L = padding_mask.shape\n"
        "    future = torch.ones(n_new, L, dtype=torch.bool).triu(L - n_new + 1)\n"
        "    return future | padding_mask.logical_not().unsqueeze(1)\n"
        "def window_empty_rows(padding_mask, w):\n"
        "    T = padding_mask.size(-1)\n"
        "    i = torch.arange(T)\n"
        "    sees = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - w)\n"
        "    return ~(sees & padding_mask[:, None, :]).any(-1)\n"
        "first = check_blocked(step_blocked(pm_l, 2), pm_l, 2)\n"
        "second = check_empty_rows(window_empty_rows(pm, 2), pm, 2)\n"))
    for key in ("first", "second"):
        assert ns[key].message.startswith("Correct"), ns[key].message


def test_functions_fixed_to_the_labs_input_fail_the_second_input():
    ns = _run(PRELUDE + (
        "def step_blocked(padding_mask, n_new):\n"
        "    return torch.ones(2, 6, dtype=torch.bool).triu(5) | ~padding_mask[:, None, :]\n"
        "def window_empty_rows(padding_mask, w):\n"
        "    return torch.tensor([[False] * 6, [False] * 4 + [True] * 2, "
        "[False] * 2 + [True] * 4])\n"
        "first = check_blocked(step_blocked(pm_l, 2), pm_l, 2)\n"
        "second = check_empty_rows(window_empty_rows(pm, 2), pm, 2)\n"))
    for key in ("first", "second"):
        assert ns[key].message.startswith("Right values on the lab's input, but not on a "
                                          "second input"), ns[key].message
