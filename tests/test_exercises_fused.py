"""Checkers of the lab "The fused kernel" accept right answers, name mistakes, and grade the
exercises as functions on hidden inputs (issue 31)."""

import pytest
import torch
import torch.nn.functional as F

from attnbook.exercises import hidden_cases
from attnbook.exercises.fused import GRADED, check_empty_rows, check_sdpa_mask
from attnbook.fused import empty_rows, sdpa_mask
from attnbook.kv_cache import window_mask
from attnbook.masks import causal_mask

# The lab's input: one left-padded and one right-padded sequence; a window of 2.
PAD = torch.tensor([[False, True, True, True, True], [True, True, True, False, False]])
B, T = PAD.shape
W = 2


# The book's solutions (the lab's solution cells), and answers written other ways.


def window_sdpa_mask(padding_mask, w):
    pos = torch.arange(padding_mask.size(1))
    behind = pos[:, None] - pos[None, :]
    return (((behind >= 0) & (behind < w)) & padding_mask[:, None, :])[:, None]


def window_empty_rows(padding_mask, w):
    seen = padding_mask.long().cumsum(dim=-1)
    gone = F.pad(seen, (w, 0))[:, :-w]
    return seen == gone


def window_empty_rows_from_the_mask(padding_mask, w):
    return ~window_sdpa_mask(padding_mask, w).any(dim=-1)[:, 0]


SOLUTIONS = {"check_sdpa_mask": window_sdpa_mask, "check_empty_rows": window_empty_rows}


@pytest.mark.parametrize("seed", [0, 1, 12345])
@pytest.mark.parametrize("name", sorted(GRADED))
def test_the_solutions_pass_every_hidden_case(name, seed):
    spec = GRADED[name]
    for case in hidden_cases(spec, seed):
        fb = spec.check(SOLUTIONS[name](*case.call), *case.check_args)
        assert fb.ok, (case.label, fb.message)
        if name == "check_empty_rows":
            assert spec.check(window_empty_rows_from_the_mask(*case.call), *case.check_args).ok


def test_the_hidden_cases_include_an_empty_row_that_padding_alone_does_not_make():
    """Some hidden case has a row emptied by the window only, so the no-window answer fails."""
    found = False
    for case in hidden_cases(GRADED["check_empty_rows"], 0):
        pad, w = case.call
        found |= bool((window_empty_rows(pad, w) & ~empty_rows(pad)).any())
    assert found


def test_window_mask_right_answers():
    right = window_sdpa_mask(PAD, W)
    assert check_sdpa_mask(right, PAD, window=W).ok
    assert check_sdpa_mask(right[:, 0], PAD, W).ok  # (B, T, T)
    library = ~window_mask(T, W) & PAD[:, None, :]  # the library's band, for comparison
    assert check_sdpa_mask(library, PAD, W).ok
    # No window: the plain merged mask of the library.
    assert check_sdpa_mask(sdpa_mask(PAD, T), PAD).ok
    assert "still empty" in check_sdpa_mask(..., PAD, W).message


def _band(lo, hi):
    gap = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    return (gap >= lo) & (gap < hi)


KEYS = PAD[:, None, :]


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (~(_band(0, W) & KEYS), "True = blocked"),
        (_band(0, W) & PAD[:, :, None], "queries (rows)"),
        (_band(0, W).expand(B, T, T), "window part only"),
        (_band(0, W), "window part only"),  # (T, T), broadcast as SDPA would
        (KEYS.expand(B, T, T), "padding part only"),
        (_band(0, W).T & KEYS, "upside down"),
        (~causal_mask(T) & KEYS, "without the window"),
        (_band(0, W + 1) & KEYS, "one key too wide"),
        (_band(0, W - 1) & KEYS, "one key too narrow"),
        (_band(-W + 1, W) & KEYS, "without the causal part"),
        ((_band(0, W) & KEYS).float(), "SDPA adds a float mask"),
        ((_band(0, W) & KEYS).long(), "dtype torch.int64"),
        (torch.ones(2, 4, 4, dtype=torch.bool), "shape (2, 4, 4)"),
        ("mask", "should be a tensor"),
    ],
)
def test_window_mask_mistakes_are_named(answer, phrase):
    fb = check_sdpa_mask(answer, PAD, window=W)
    assert not fb.ok and phrase in fb.message, fb.message


def test_window_empty_rows_right_answers():
    right = window_empty_rows(PAD, W)
    assert right.tolist() == [[True, False, False, False, False],
                              [False, False, False, False, True]]
    assert check_empty_rows(right, PAD, window=W).ok
    assert check_empty_rows(right.tolist(), PAD, W).ok
    assert check_empty_rows(empty_rows(PAD), PAD).ok  # no window: the library's rows


def test_window_empty_rows_mistakes_are_named():
    pad = torch.tensor([[False, False, True, True, False, False, False, False, True]])
    right = window_empty_rows(pad, 3)
    cases = {
        "padded queries": ~pad,
        "real tokens": pad,
        "opposite": ~right,
        "no empty row": torch.zeros_like(right),
        "without the window": empty_rows(pad),
        "one key too wide": window_empty_rows(pad, 4),
        "one key too narrow": window_empty_rows(pad, 2),
        "dtype torch.int64": right.long(),
        "shape (1, 8)": right[:, :8],
    }
    for phrase, answer in cases.items():
        fb = check_empty_rows(answer, pad, window=3)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_practice_checks_refuse_the_librarys_masks():
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.fused import empty_rows, sdpa_mask\n"
         "from attnbook.kv_cache import window_mask\n"
         "from attnbook.exercises.fused import check_empty_rows, check_sdpa_mask\n"
         "def window_sdpa_mask(padding_mask, w):\n"
         "    T = padding_mask.size(1)\n"
         "    return sdpa_mask(padding_mask, T) & ~window_mask(T, w)\n"
         "def window_empty_rows(padding_mask, w):\n"
         "    return ~window_sdpa_mask(padding_mask, w).any(-1)[:, 0]\n"
         "pad = torch.tensor([[False, True, True, True, True], [True, True, True, False, False]])\n"
         "first = check_sdpa_mask(window_sdpa_mask(pad, 2), pad, window=2)\n"
         "second = check_empty_rows(window_empty_rows(pad, 2), pad, window=2)\n", ns)
    first, second = ns["first"].message, ns["second"].message
    assert first.startswith("Right values, but window_sdpa_mask uses sdpa_mask, window_mask"), first
    assert second.startswith("Right values, but window_empty_rows uses window_mask"), second


@pytest.mark.parametrize("code, call", [
    ("def window_sdpa_mask(padding_mask, w):\n"
     "    return torch.tensor([[[0, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 1, 1, 0, 0],\n"
     "                          [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]],\n"
     "                         [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0],\n"
     "                          [0, 0, 1, 0, 0], [0, 0, 0, 0, 0]]]).bool()\n",
     "check_sdpa_mask(window_sdpa_mask(pad, 2), pad, window=2)"),
    ("def window_empty_rows(padding_mask, w):\n"
     "    return torch.tensor([[True, False, False, False, False],\n"
     "                         [False, False, False, False, True]])\n",
     "check_empty_rows(window_empty_rows(pad, 2), pad, window=2)"),
])
def test_an_answer_fixed_to_the_labs_input_fails_the_second_input(code, call):
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.fused import check_empty_rows, check_sdpa_mask\n"
         "pad = torch.tensor([[False, True, True, True, True], [True, True, True, False, False]])\n"
         + code + f"result = {call}\n", ns)
    assert ns["result"].message.startswith("Right values on the lab's input, but not on a "
                                           "second input"), ns["result"].message
