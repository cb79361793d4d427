"""The causal-mask lab's checkers accept the right answer and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook import Attention, causal_mask
from attnbook.exercises.causal_mask import (
    check_cached_mask,
    check_changed_outputs,
    check_window_scores,
)

T = 5


@pytest.mark.parametrize("n_new, n_keys", [(1, 1), (1, 6), (3, 8), (4, 4), (2, 9)])
def test_cached_mask_right_answers_pass(n_new, n_keys):
    """The rows of the square mask that the new queries own, and the module's own slice (the
    chunked prefill of attnbook.kv_cache), are the right answer."""
    assert check_cached_mask(causal_mask(n_keys)[n_keys - n_new:], n_new, n_keys).ok
    assert check_cached_mask(Attention(4, 16).mask[n_keys - n_new:n_keys, :n_keys], n_new,
                             n_keys).ok
    assert "still empty" in check_cached_mask(..., n_new, n_keys).message


ONES = torch.ones(3, 8, dtype=torch.bool)


@pytest.mark.parametrize("answer, phrase", [
    (ONES.triu(1), "top-left corner"),
    (ONES.triu(5), "blocks each new token from its own key"),
    (ONES.triu(7), "see the next one"),
    (~ONES.triu(6), "True/False swapped"),
    (causal_mask(8), "whole square mask"),
    (causal_mask(8)[:3], "first n_new rows"),
    (causal_mask(3), "n_keys columns"),
    (torch.zeros(3, 8, dtype=torch.bool), "right for one new token"),
    (ONES.triu(6).int(), "bool"),
])
def test_cached_mask_mistakes_are_named(answer, phrase):
    fb = check_cached_mask(answer, 3, 8)
    assert not fb.ok and phrase in fb.message, fb.message


def test_cached_mask_agrees_with_the_kv_cache():
    """The checker's mask is the one that makes cached attention equal the full forward pass:
    the outputs of the last 3 of 8 tokens, computed from their queries and all 8 keys."""
    torch.manual_seed(0)
    m = Attention(4, 8).double()
    x = torch.randn(1, 8, 4, dtype=torch.float64)
    q, k, v = m.query(x)[0, 5:], m.key(x)[0], m.value(x)[0]
    blocked = torch.triu(torch.ones(3, 8, dtype=torch.bool), diagonal=6)
    assert check_cached_mask(blocked, 3, 8).ok
    w = torch.softmax((q @ k.T / 2).masked_fill(blocked, float("-inf")), dim=-1)
    assert torch.allclose(w @ v, m(x)[0, 5:])


def _window(T, w):
    gap = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    return (gap < 0) | (gap >= w)


@pytest.fixture
def scores():
    return torch.randn(T, T)


@pytest.mark.parametrize("w", [1, 2, 3, 5, 9])
def test_window_scores_right_answer_passes(scores, w):
    from attnbook.kv_cache import window_mask

    assert check_window_scores(scores.masked_fill(window_mask(T, w), float("-inf")), scores,
                               w).ok
    assert check_window_scores(scores.masked_fill(_window(T, w), float("-inf")).tolist(),
                               scores, w).ok


@pytest.mark.parametrize("make, phrase", [
    (lambda s: s.masked_fill(causal_mask(T), float("-inf")), "window is missing"),
    (lambda s: s.masked_fill(_window(T, 2), 0.0), "filled with 0"),
    (lambda s: s.masked_fill(~_window(T, 2), float("-inf")), "mask is inverted"),
    (lambda s: s.masked_fill(_window(T, 1), float("-inf")), "one key too narrow"),
    (lambda s: s.masked_fill(_window(T, 3), float("-inf")), "one key too wide"),
    (lambda s: s.masked_fill((torch.arange(T)[:, None] - torch.arange(T)).abs() >= 2,
                             float("-inf")), "band without the causal part"),
    (lambda s: s.masked_fill(torch.arange(T)[:, None] - torch.arange(T) >= 2, float("-inf")),
     "future left visible"),
    (lambda s: s, "nothing is masked"),
    (lambda s: torch.softmax(s.masked_fill(_window(T, 2), float("-inf")), -1),
     "attention weights"),
    (lambda s: s.masked_fill(_window(T, 2), -1e9), "large finite number"),
])
def test_window_scores_mistakes_are_named(scores, make, phrase):
    fb = check_window_scores(make(scores), scores, 2)  # every answer here is wrong for w = 2
    assert not fb.ok and phrase in fb.message, fb.message


def test_changed_outputs():
    pos = torch.arange(T)
    assert check_changed_outputs(pos >= 2, T, 2).ok
    assert check_changed_outputs([False, False, True, True, True], T, 2).ok
    cases = {"causality protects": pos <= 2, "own output": pos > 2,
             "every later token": pos == 2, "stops the tokens": torch.ones(T, dtype=torch.bool)}
    for phrase, answer in cases.items():
        fb = check_changed_outputs(answer, T, 2)
        assert not fb.ok and phrase in fb.message, fb.message


def test_changed_outputs_agree_with_the_module():
    """The checker's answer is what the module does: change token j, see which rows move."""
    m = Attention(4, T).double()
    x = torch.randn(1, T, 4, dtype=torch.float64)
    y = x.clone()
    y[0, 2] += 1.0
    changed = (m(x) - m(y)).abs().amax(dim=-1)[0] > 0
    assert check_changed_outputs(changed, T, 2).ok


@pytest.mark.parametrize("fill, words", [
    (lambda s, f: s.masked_fill(f | torch.eye(5, dtype=torch.bool), float("-inf")),
     "has -inf in 5 entries where the right answer does not"),
    (lambda s, f: s.masked_fill(f & (torch.arange(5)[:, None] > 0), float("-inf")),
     "lacks -inf in 4 entries where the right answer has it"),
])
def test_misplaced_minus_infinity_says_which_way(fill, words):
    """Issue 31: "has -inf in N entries ... or lacks it" now says which of the two it is."""
    from attnbook.exercises import check_tensor

    s = torch.randn(5, 5, dtype=torch.float64)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    fb = check_tensor(fill(s, future), s.masked_fill(future, float("-inf")))
    assert not fb.ok and words in fb.message, fb.message


def test_misplaced_minus_infinity_in_the_window_is_counted(scores):
    """A wrong window is told where its -inf are off, not called NaN."""
    fb = check_window_scores(scores.masked_fill(torch.eye(T, dtype=torch.bool), float("-inf")),
                             scores, 2)
    assert not fb.ok and "NaN" not in fb.message
    assert "has -inf in 5 entries where the right answer does not" in fb.message, fb.message
    halved = scores.masked_fill(_window(T, 2), float("-inf")) / 2
    fb = check_window_scores(halved, scores, 2)
    assert not fb.ok and "differs by up to" in fb.message, fb.message


def test_practice_checks_refuse_the_librarys_masks():
    """Issue 31: in the notebook the check applies the grade's method limits too."""
    ns = {"__name__": "__main__"}
    exec("import attnbook\n"  # noqa: S102 (the test's own code)
         "from attnbook.kv_cache import window_mask\n"
         "from attnbook.exercises.causal_mask import check_cached_mask, check_window_scores\n"
         "def cached_causal_mask(n_new, n_keys):\n"
         "    return attnbook.causal_mask(n_keys)[n_keys - n_new:]\n"
         "def window_scores(s, w):\n"
         "    return s.masked_fill(window_mask(s.size(-1), w), float('-inf'))\n"
         "import torch\n"
         "s = torch.randn(6, 6, dtype=torch.float64)\n"
         "first = check_cached_mask(cached_causal_mask(3, 8), n_new=3, n_keys=8)\n"
         "second = check_window_scores(window_scores(s, 3), s, 3)\n", ns)
    assert ns["first"].message.startswith("Right values, but cached_causal_mask uses "
                                          "causal_mask"), ns["first"].message
    assert ns["second"].message.startswith("Right values, but window_scores uses window_mask")


def test_a_mask_fixed_to_the_labs_input_fails_the_second_input():
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.causal_mask import check_cached_mask\n"
         "def cached_causal_mask(n_new, n_keys):\n"
         "    return torch.ones(3, 8, dtype=torch.bool).triu(6)\n"
         "result = check_cached_mask(cached_causal_mask(3, 8), n_new=3, n_keys=8)\n", ns)
    assert ns["result"].message.startswith("Right values on the lab's input, but not on a "
                                           "second input"), ns["result"].message
