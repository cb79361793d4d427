"""The causal-mask lab's checkers accept the right answer and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook import Attention, causal_mask
from attnbook.exercises.causal_mask import (
    check_causal_mask,
    check_changed_outputs,
    check_masked_scores,
)

T = 5


def test_causal_mask_right_answers_pass():
    ones = torch.ones(T, T, dtype=torch.bool)
    assert check_causal_mask(torch.triu(ones, diagonal=1), T).ok
    assert check_causal_mask(causal_mask(T), T).ok
    assert check_causal_mask(Attention(4, 9).mask[:T, :T], T).ok
    assert "still empty" in check_causal_mask(..., T).message


@pytest.mark.parametrize("answer, phrase", [
    (torch.tril(torch.ones(T, T, dtype=torch.bool)), "allowed set"),
    (~torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), "True/False swapped"),
    (torch.triu(torch.ones(T, T, dtype=torch.bool)), "blocks each token from itself"),
    (torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1), "strict past"),
    (torch.ones(T, T, dtype=torch.bool), "blocks every key"),
    (torch.zeros(T, T, dtype=torch.bool), "sees the future"),
    (torch.triu(torch.ones(T, T), diagonal=1), "bool"),
    (causal_mask(T + 2), "shape (7, 7)"),
])
def test_causal_mask_mistakes_are_named(answer, phrase):
    fb = check_causal_mask(answer, T)
    assert not fb.ok and phrase in fb.message, fb.message


@pytest.fixture
def scores():
    return torch.randn(T, T)


def test_masked_scores_right_answer_passes(scores):
    right = scores.masked_fill(causal_mask(T), float("-inf"))
    assert check_masked_scores(right, scores).ok
    assert check_masked_scores(scores + torch.zeros(T, T).masked_fill(causal_mask(T),
                                                                      float("-inf")), scores).ok


@pytest.mark.parametrize("make, phrase", [
    (lambda s, m: s.masked_fill(m, 0.0), "filled with 0"),
    (lambda s, m: s.masked_fill(~m, float("-inf")), "mask is inverted"),
    (lambda s, m: s.masked_fill(torch.triu(torch.ones_like(m)), float("-inf")), "diagonal"),
    (lambda s, m: s.masked_fill(torch.tril(torch.ones_like(m), -1), float("-inf")),
     "strict past"),
    (lambda s, m: s, "nothing is masked"),
    (lambda s, m: s.masked_fill(m, -1e9), "large finite number"),
    (lambda s, m: s.masked_fill(m, -1e4), "float16"),
    (lambda s, m: s.masked_fill(m, torch.finfo(s.dtype).min), "-inf"),
])
def test_masked_scores_mistakes_are_named(scores, make, phrase):
    fb = check_masked_scores(make(scores, causal_mask(T)), scores)
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


def test_masked_scores_with_minus_inf_in_the_wrong_places_is_not_called_nan(scores):
    """The right answer holds -inf too: a wrong one is told where its -inf are off."""
    wrong = scores.masked_fill(torch.eye(T, dtype=torch.bool), float("-inf"))
    fb = check_masked_scores(wrong, scores)
    assert not fb.ok and "NaN or inf" not in fb.message
    assert (f"has -inf in {T} entries where the right answer does not, and lacks it in "
            f"{T * (T - 1) // 2} entries") in fb.message, fb.message
    # The -inf right, the kept entries changed: the difference is measured on those.
    halved = scores.masked_fill(causal_mask(T), float("-inf")) / 2
    fb = check_masked_scores(halved, scores)
    assert not fb.ok and "differs by up to" in fb.message, fb.message


def test_practice_check_refuses_the_librarys_causal_mask():
    """Issue 31: in the notebook the check applies the grade's method limit too."""
    ns = {"__name__": "__main__"}
    exec("import attnbook\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.causal_mask import check_causal_mask\n"
         "def my_causal_mask(T):\n    return attnbook.causal_mask(T)\n"
         "result = check_causal_mask(my_causal_mask(5), T=5)\n", ns)
    assert not ns["result"].ok
    assert ns["result"].message.startswith("Right values, but my_causal_mask uses causal_mask")


def test_the_weights_instead_of_the_masked_scores_are_named():
    from attnbook.exercises.causal_mask import check_masked_scores

    s = torch.randn(5, 5, dtype=torch.float64)
    masked = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    fb = check_masked_scores(torch.softmax(masked, -1), s)
    assert not fb.ok and "attention weights" in fb.message, fb.message


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
