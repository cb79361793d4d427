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
             "    return allowed_matrix(lambda b, h, q, k: ROW[q, k], 9)\n")
    # Issue 48: the matrix returned as it is, without a mask_mod, is right on the lab's row.
    plain = ("def document_window_allowed(document_ids, w):\n"
             "    i, j = torch.arange(len(document_ids))[:, None], torch.arange(9)[None, :]\n"
             "    same = document_ids[:, None] == document_ids[None, :]\n"
             "    return same & (i >= j) & (i - j < w)\n")
    # Issue 48: apply_rope's neighbours here: the library's mask_mod under another name.
    renamed = ("from attnbook.masks import document_mod as dm, sliding_window_mod as sw\n"
               "def document_window_allowed(document_ids, w):\n"
               "    a, c = dm(document_ids), sw(w)\n"
               "    return allowed_matrix(lambda b, h, q, k: a(b, h, q, k) & c(b, h, q, k),"
               " len(document_ids))\n")
    for body, phrase in ((library, "Right values, but document_window_allowed uses and_mods"),
                         (fixed, "not on a second input"),
                         (plain, "does not use allowed_matrix, which the exercise asks for"),
                         (renamed, "uses document_mod, sliding_window_mod")):
        ns = {"__name__": "__main__"}
        exec(common + body + "result = check_document_mod(document_window_allowed(doc, 3), doc, "  # noqa: S102
             "window=3)\n", ns)
        assert not ns["result"].ok and phrase in ns["result"].message, ns["result"].message


def test_allowed_matrix_refuses_a_tensor_for_a_mask_mod():
    """Issue 48: a plain tensor passed as the mask_mod, or returned by one whatever indices it is
    asked about, is refused with a message that says what a mask_mod is."""
    M = _window_solution(DOC, 3)
    with pytest.raises(TypeError, match="takes a mask_mod, a function .* not a Tensor"):
        allowed_matrix(M, DOC.numel())
    with pytest.raises(TypeError, match="computed beforehand"):
        allowed_matrix(lambda b, h, q, k: M, DOC.numel())
    assert torch.equal(allowed_matrix(lambda b, h, q, k: M[q, k], DOC.numel()), M)  # a table


def test_a_window_one_key_too_wide_is_told_apart_from_no_window():
    """Issue 48: with a document longer than w + 1 the two differ; where they coincide (every
    document at most w + 1 long), both are named."""
    long_doc = torch.tensor([0, 0, 1, 1, 1, 1, 1, 2, 2])
    wide = allowed_matrix(lambda b, h, q, k: (long_doc[q] == long_doc[k]) & (q >= k)
                          & (q - k <= 3), 9)
    fb = check_document_mod(wide, long_doc, window=3)
    assert "one key too wide" in fb.message and "without the window" not in fb.message, fb.message
    fb = check_document_mod(_mod(lambda b, h, q, k: (DOC[q] == DOC[k]) & (q >= k)
                                 & (q - k <= 3)), DOC, window=3)
    assert "without the window" in fb.message and "one key too wide" in fb.message, fb.message


def test_a_wrong_mask_says_how_many_entries_differ_and_where():
    """Issue 48: not "differs by up to 1" for a True/False mask."""
    wrong = _window_solution(DOC, 3).clone()
    wrong[8, 0], wrong[4, 4] = True, False
    fb = check_document_mod(wrong, DOC, window=3)
    assert "differs in 2 of 81 entries" in fb.message, fb.message
    assert "True where the right answer is False at (8, 0)" in fb.message
    assert "False where the right answer is True at (4, 4)" in fb.message
    assert "up to" not in fb.message


def test_tile_counts_messages_read_as_plurals_and_t_q_for_both_axes_is_named():
    """Issue 48: "your list of tile counts is still empty"; a mask that is not square catches
    one length used for both axes, in the lab's case and in a hidden one."""
    causal = torch.arange(10)[:, None] >= torch.arange(10)[None, :]
    assert "your list of tile counts is still empty" in check_tile_counts(..., causal, 4, 4).message
    cached = torch.arange(6)[:, None] + 4 >= torch.arange(10)[None, :]  # the lab's case

    def one_length(allowed, bm, bn):
        T = allowed.shape[0]
        counts = [0, 0, 0]
        for a in range(0, T, bm):
            for c in range(0, T, bn):
                tile = allowed[a:a + bm, c:c + bn]
                counts[0 if not tile.any() else 2 if tile.all() else 1] += 1
        return counts

    assert check_tile_counts([2, 3, 4], cached, 2, 4).ok
    fb = check_tile_counts(one_length(cached, 2, 4), cached, 2, 4)
    assert not fb.ok and "T_q (the number of queries), used for both axes" in fb.message
    for order in ([4, 3, 2], [3, 2, 4], [2, 4, 3]):  # every other order is wrong
        assert not check_tile_counts(order, cached, 2, 4).ok
    cases = hidden_cases(GRADED["check_tile_counts"], 0)
    assert any(c.check_args[0].shape[0] != c.check_args[0].shape[1] for c in cases)
    assert not all(GRADED["check_tile_counts"].check(one_length(*c.call), *c.check_args).ok
                   for c in cases)


def test_softcap_grad_may_not_use_autograd_under_any_name():
    """Issue 48: the forbidden names are real callables, caught however imported."""
    common = ("import torch\nfrom attnbook.exercises.mask_functions import check_softcap_grad\n"
              "scores3 = torch.tensor([-80.0, -5.0, 0.0, 30.0], dtype=torch.float64)\n")
    for body in ("from torch.autograd import grad as g\n"
                 "def softcap_grad(scores, cap):\n"
                 "    x = scores.clone().requires_grad_()\n"
                 "    return g((cap * torch.tanh(x / cap)).sum(), x)[0]\n",
                 "from torch.autograd.functional import jacobian as J\n"
                 "def softcap_grad(scores, cap):\n"
                 "    return J(lambda x: cap * torch.tanh(x / cap), scores).diagonal()\n"):
        ns = {"__name__": "__main__"}
        exec(common + body + "result = check_softcap_grad(softcap_grad(scores3, 50.0), "  # noqa: S102
             "scores3, 50.0)\n", ns)
        assert "Right values, but softcap_grad uses" in ns["result"].message, ns["result"].message


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


def test_the_grader_applies_the_same_required_name_and_names_each_mistake():
    """Issue 48, as the grader judges a hand-in (scripts/grading/judge.py): a function that does
    not use allowed_matrix is not graded; a named mistake on every hidden input is not called
    hard-coded."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from grading import judge, labs

    spec = GRADED["check_document_mod"]
    ex = labs.Exercise("document_mod", "check_document_mod", "attnbook.exercises.mask_functions",
                       "check_document_mod(answer, doc, window=3)", 0, "answer", [],
                       function="document_window_allowed")
    cases = hidden_cases(spec, 5)
    v = judge.Verdict("document_mod", 0.0, 1.0, "")
    judge._judge_function(v, ex, spec, {"function": {"defined": True, "names": ["torch"]}},
                          cases, {}, {})
    assert "does not use allowed_matrix" in v.message and "method" in v.flags, v.message
    # Right on the lab's input, the blocked set (a named mistake) on every hidden one: before,
    # the grader added "is the answer hard-coded?".
    results = [{"kind": "tensor", "value": ~_window_solution(*c.call)} for c in cases]
    v = judge.Verdict("document_mod", 0.0, 1.0, "")
    visible = _window_solution(DOC, 3)
    judge._judge_function(v, ex, spec, {"function": {"defined": True, "results": results,
                                                     "names": ["allowed_matrix"]},
                                        "answer": {"kind": "tensor", "value": visible},
                                        "args": [{"kind": "tensor", "value": DOC}],
                                        "kwargs": {"window": {"kind": "plain", "value": 3}}},
                          cases, {}, {})
    assert v.message.startswith(f"Right on 0 of {len(cases)} hidden inputs"), v.message
    assert "blocked set" in v.message and "hard-coded" not in v.message, v.message
