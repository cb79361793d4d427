"""Checkers of the lab "Masks as functions" accept right answers and name each typical mistake."""

from __future__ import annotations

import pytest
import torch

from attnbook.exercises import hidden_cases
from attnbook.exercises.mask_functions import (
    GRADED,
    allowed_matrix,
    check_document_mod,
    check_softcap_grad,
    check_tile_counts,
)

DOC = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])


def _mod(fn):
    return allowed_matrix(fn, DOC.numel())


def test_document_mod_right_answer_passes():
    right = _mod(lambda b, h, q, k: (DOC[q] == DOC[k]) & (q >= k))
    assert check_document_mod(right, DOC).ok
    assert "still empty" in check_document_mod(_mod(lambda b, h, q, k: ...), DOC).message


@pytest.mark.parametrize("fn, phrase", [
    (lambda b, h, q, k: DOC[q] == DOC[k], "same-document test alone"),
    (lambda b, h, q, k: q >= k, "causal mask alone"),
    (lambda b, h, q, k: ~((DOC[q] == DOC[k]) & (q >= k)), "blocked set"),
    (lambda b, h, q, k: (DOC[q] == DOC[k]) & (q > k), "strict inequality"),
    (lambda b, h, q, k: (DOC[k] <= DOC[q]) & (q >= k), "earlier documents"),
    (lambda b, h, q, k: (q == DOC[k]) & (q >= k), "index document_ids"),
    (lambda b, h, q, k: ((DOC[q] == DOC[k]) & (q >= k)).int(), "must return bool"),
])
def test_document_mod_mistakes_are_named(fn, phrase):
    fb = check_document_mod(_mod(fn), DOC)
    assert not fb.ok and phrase in fb.message, fb.message


def _window_solution(document_ids, w):
    def mod(b, h, q, k):
        return (document_ids[q] == document_ids[k]) & (q >= k) & (q - k < w)
    return allowed_matrix(mod, T=len(document_ids))


def test_windowed_document_mask_right_answer_passes():
    assert check_document_mod(_window_solution(DOC, 3), DOC, window=3).ok
    # A window wider than every document is the plain document mask.
    assert check_document_mod(_window_solution(DOC, 9), DOC, window=9).ok
    assert check_document_mod(_mod(lambda b, h, q, k: (DOC[q] == DOC[k]) & (q >= k)), DOC,
                              window=9).ok


@pytest.mark.parametrize("fn, w, phrase", [
    (lambda b, h, q, k: (DOC[q] == DOC[k]) & (q >= k), 3, "without the window"),
    # With w = 3 and documents of at most 4 tokens, one too wide is the whole document: w = 2.
    (lambda b, h, q, k: (DOC[q] == DOC[k]) & (q >= k) & (q - k <= 2), 2, "one key too wide"),
    (lambda b, h, q, k: (DOC[q] == DOC[k]) & (q >= k) & (q - k < 2), 3, "one key too narrow"),
    (lambda b, h, q, k: (DOC[q] == DOC[k]) & ((q - k).abs() < 3), 3, "on both sides"),
    (lambda b, h, q, k: (q >= k) & (q - k < 3), 3, "causal mask alone"),
    (lambda b, h, q, k: (DOC[q] == DOC[k]) & (q > k) & (q - k < 3), 3, "strict inequality"),
    (lambda b, h, q, k: ~((DOC[q] == DOC[k]) & (q >= k) & (q - k < 3)), 3, "blocked set"),
])
def test_windowed_document_mask_mistakes_are_named(fn, w, phrase):
    fb = check_document_mod(_mod(fn), DOC, window=w)
    assert not fb.ok and phrase in fb.message, fb.message


def test_document_window_practice_check_refuses_the_library_and_a_fixed_row():
    """In the notebook, the library's mask_mods give "Right values, but ..." and a mask typed in
    for the lab's row fails the second input, as the grade would."""
    common = ("import torch\n"
              "from attnbook.exercises.mask_functions import allowed_matrix, check_document_mod\n"
              "from attnbook.masks import and_mods, document_mod, sliding_window_mod\n"
              "doc = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])\n")
    library = ("def document_window_allowed(document_ids, w):\n"
               "    mod = and_mods(document_mod(document_ids), sliding_window_mod(w))\n"
               "    return allowed_matrix(mod, T=len(document_ids))\n")
    fixed = ("ROW = allowed_matrix(lambda b, h, q, k: (doc[q] == doc[k]) & (q >= k) & (q - k < 3),"
             " 9)\n"
             "def document_window_allowed(document_ids, w):\n"
             "    return ROW\n")
    for body, phrase in ((library, "Right values, but document_window_allowed uses and_mods"),
                         (fixed, "not on a second input")):
        ns = {"__name__": "__main__"}
        exec(common + body + "result = check_document_mod(document_window_allowed(doc, 3), doc, "  # noqa: S102
             "window=3)\n", ns)
        assert not ns["result"].ok and phrase in ns["result"].message, ns["result"].message


def test_allowed_matrix_explains_python_and():
    with pytest.raises(TypeError, match="& | ~"):
        allowed_matrix(lambda b, h, q, k: (DOC[q] == DOC[k]) and (q >= k), DOC.numel())
    with pytest.raises(TypeError, match="bool tensor"):
        allowed_matrix(lambda b, h, q, k: True, 4)


def test_tile_counts_right_answers_pass():
    T = 10
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    causal = i >= j
    # tiles of 4: rows [0,4) [4,8) [8,10); the diagonal tiles are partial, below them full
    assert check_tile_counts([3, 3, 3], causal, 4, 4).ok
    assert check_tile_counts(torch.tensor([3, 3, 3]), causal, 4, 4).ok
    # non-square tiles: 5 row blocks of 2, 4 column blocks of 3 (the last one has one key)
    fb = check_tile_counts([8, 5, 7], causal, 2, 3)
    assert fb.ok, fb.message


@pytest.mark.parametrize("answer, phrase", [
    ([3, 3, 3][::-1], None),  # symmetric here: flipping gives the right answer back
    ([45, 0, 55], "entries"),
    ([3, 0, 6], "partial tiles counted as full"),
    ([6, 0, 3], "partial tiles counted as empty"),
    ([1, 2, 1], "last, shorter tiles"),
    ([3, 3, 2], "do not add up to the 9 tiles"),
    (..., "still empty"),
])
def test_tile_counts_mistakes_are_named(answer, phrase):
    T = 10
    causal = torch.arange(T)[:, None] >= torch.arange(T)[None, :]
    fb = check_tile_counts(answer, causal, 4, 4)
    if phrase is None:
        assert fb.ok
    else:
        assert not fb.ok and phrase in fb.message, fb.message


def test_tile_counts_swapped_blocks_and_flipped_kinds():
    T = 10
    causal = torch.arange(T)[:, None] >= torch.arange(T)[None, :]
    right = check_tile_counts([8, 5, 7], causal, 2, 3)
    assert right.ok
    fb = check_tile_counts([7, 5, 8], causal, 2, 3)
    assert not fb.ok and "swapped: an empty tile" in fb.message, fb.message
    fb = check_tile_counts([5, 5, 10], causal, 2, 3)  # the counts of 3 x 2 tiles
    assert not fb.ok and "b_m and b_n swapped" in fb.message, fb.message


def test_softcap_grad_checker():
    s = torch.tensor([-40.0, -3.0, 0.0, 2.0, 25.0], dtype=torch.float64)
    cap = 10.0
    x = s.clone().requires_grad_()
    (cap * torch.tanh(x / cap)).sum().backward()
    assert check_softcap_grad(x.grad, s, cap).ok
    t = torch.tanh(s / cap)
    for answer, phrase in [(cap * t, "softcapped score itself"),
                           (1 - torch.tanh(s) ** 2, "not at s / cap"),
                           (1 - t, "without the square"), ((1 - t**2) / cap, "extra 1 / cap"),
                           (cap * (1 - t**2), "chain rule"), (torch.ones(5), "all ones")]:
        fb = check_softcap_grad(answer, s, cap)
        assert not fb.ok and phrase in fb.message, fb.message


def _tile_counts_solution(allowed, block_m, block_n):
    T_q, T_k = allowed.shape
    counts = [0, 0, 0]
    for a in range(0, T_q, block_m):
        for c in range(0, T_k, block_n):
            tile = allowed[a:a + block_m, c:c + block_n]
            counts[0 if not tile.any() else 2 if tile.all() else 1] += 1
    return counts


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_graded_functions_pass_their_hidden_cases_and_wrong_ones_fail(seed):
    solutions = {"check_tile_counts": _tile_counts_solution,
                 "check_softcap_grad": lambda s, cap: 1 - torch.tanh(s / cap) ** 2,
                 "check_document_mod": _window_solution}
    wrong = {"check_tile_counts": lambda a, bm, bn: _tile_counts_solution(a, bn, bm)[::-1],
             "check_softcap_grad": lambda s, cap: 1 - torch.tanh(s) ** 2,
             "check_document_mod": lambda ids, w: _window_solution(ids, len(ids))}
    for name, spec in GRADED.items():
        cases = hidden_cases(spec, seed)
        assert len(cases) >= 3
        for case in cases:
            assert spec.check(solutions[name](*case.call), *case.check_args).ok, case.label
        assert not all(spec.check(wrong[name](*c.call), *c.check_args).ok for c in cases)
    assert [c.check_args[0].tolist() for c in hidden_cases(GRADED["check_tile_counts"], 3)] == \
        [c.check_args[0].tolist() for c in hidden_cases(GRADED["check_tile_counts"], 3)]
