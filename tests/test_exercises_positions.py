"""The positions lab's checkers accept right answers and name each typical mistake; the
exercises graded as functions pass the book's solutions on every hidden input."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnbook.exercises import hidden_cases
from attnbook.exercises.positions import (
    GRADED,
    check_alibi_slopes,
    check_relative_scores,
    check_rotate_pair,
    check_to_half,
)
from attnbook.positions import alibi_slopes, apply_rope

ROOT = Path(__file__).resolve().parents[1]


def _turn(pair, angle):
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])


PAIR = torch.tensor([1.0, 0.5], dtype=torch.float64)
M, THETA = 3, 10000.0 ** (-2 / 8)
_C, _S = math.cos(M * THETA), math.sin(M * THETA)
_SWAPPED = torch.stack([_S * PAIR[0] - _C * PAIR[1], _C * PAIR[0] + _S * PAIR[1]])


def test_right_rotation_passes_in_float32_and_float64():
    assert check_rotate_pair(_turn(PAIR, M * THETA), PAIR, M, THETA).ok
    assert check_rotate_pair(_turn(PAIR, M * THETA).float(), PAIR, M, THETA).ok
    assert "still empty" in check_rotate_pair(..., PAIR, M, THETA).message


@pytest.mark.parametrize("phrase, answer", [
    ("the other way", _turn(PAIR, -M * THETA)),
    ("by θ alone", _turn(PAIR, THETA)),
    ("cos and sin swapped", _SWAPPED),
    ("unrotated", PAIR.clone()),
    ("(m + 1)·θ", _turn(PAIR, (M + 1) * THETA)),
])
def test_rotation_mistakes_are_named(phrase, answer):
    fb = check_rotate_pair(answer, PAIR, M, THETA)
    assert not fb.ok and phrase in fb.message, fb.message


def _scores(q, k, q_pos, k_pos, layout="half"):
    return (apply_rope(q.expand(len(q_pos), -1), q_pos, layout=layout)
            @ apply_rope(k.expand(len(k_pos), -1), k_pos, layout=layout).T)


Q, K = torch.randn(2, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
QP, KP = torch.arange(6, 10), torch.arange(10)  # the lab's input: 4 new tokens after 6 cached


def test_right_score_matrix_passes_and_depends_on_the_distance_only():
    S = _scores(Q, K, QP, KP)
    assert S.shape == (4, 10)
    assert check_relative_scores(S, Q, K, QP, KP).ok
    assert check_relative_scores(S.float(), Q, K, QP, KP).ok
    assert check_relative_scores(_scores(Q, K, KP, KP)[6:], Q, K, QP, KP).ok
    for r in range(-3, 10):
        d = S.diagonal(offset=r)
        torch.testing.assert_close(d, d[0].expand_as(d))
    # one value of m - n is one score, whatever the positions
    torch.testing.assert_close(S[0, 0], _scores(Q, K, torch.tensor([506]),
                                               torch.tensor([500]))[0, 0])


def test_score_matrix_mistakes_are_named():
    n_q, n_k = torch.arange(4), torch.arange(13)
    cases = {
        "no rotation": Q.expand(4, -1) @ K.expand(10, -1).T,
        "only the query rotated": apply_rope(Q.expand(4, -1), QP) @ K.expand(10, -1).T,
        "only the key rotated": Q.expand(4, -1) @ apply_rope(K.expand(10, -1), KP).T,
        "transpose": _scores(Q, K, QP, KP).T,
        "not to its position q_pos[i]": _scores(Q, K, n_q, KP),
        "interleaved layout": _scores(Q, K, QP, KP, layout="interleaved"),
        "the wrong way": _scores(Q, K, -QP, -KP),
        "sqrt(d_h)": _scores(Q, K, QP, KP) / math.sqrt(8),
    }
    for phrase, answer in cases.items():
        fb = check_relative_scores(answer, Q, K, QP, KP)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)
    far_q, far_k = torch.arange(1000, 1003), torch.arange(990, 1003)
    for phrase, answer in {"not to its position k_pos[j]": _scores(Q, K, far_q, n_k),
                           "row and column numbers": _scores(Q, K, n_q[:3], n_k)}.items():
        fb = check_relative_scores(answer, Q, K, far_q, far_k)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)
    for bad in (None, ..., [1.0, 2.0], _scores(Q, K, QP, KP)[:3], (QP, KP)):
        fb = check_relative_scores(bad, Q, K, QP, KP)
        assert not fb.ok and fb.message.startswith("Not yet"), fb.message


def _to_half(w, n_heads):
    rows, d_in = w.shape
    d_h = rows // n_heads
    order = list(range(0, d_h, 2)) + list(range(1, d_h, 2))
    return w.reshape(n_heads, d_h, d_in)[:, order].reshape(rows, d_in)


W = torch.randn(16, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def test_right_conversion_passes():
    assert check_to_half(_to_half(W, 2), W, 2).ok


def test_conversion_mistakes_are_named():
    inverse = torch.argsort(torch.tensor(list(range(0, 8, 2)) + list(range(1, 8, 2))))
    cases = {
        "all the rows at once": _to_half(W, 1),
        "the inverse permutation": W.reshape(2, 8, 12)[:, inverse].reshape(16, 12),
        "unchanged": W.clone(),
        "the columns": _to_half(W.T.contiguous(), 1).T,
    }
    for phrase, answer in cases.items():
        fb = check_to_half(answer, W, 2)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_conversion_refuses_a_weight_that_does_not_split_into_heads():
    with pytest.raises(ValueError, match="n_heads"):
        check_to_half(W[:15], W[:15], 2)


def test_alibi_slopes_checker():
    i = torch.arange(1, 5, dtype=torch.float64)
    assert check_alibi_slopes(2.0 ** (-8 * i / 4), 4).ok
    cases = {"counted from 0": 2.0 ** (-8 * (i - 1) / 4), "without the 8": 2.0 ** (-i / 4),
             "reverse order": (2.0 ** (-8 * i / 4)).flip(0), "linear in i": 2.0 ** (-8 / i)}
    for phrase, answer in cases.items():
        fb = check_alibi_slopes(answer, 4)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def _head_slopes(h):
    """Another right answer: the paper's rule written with a loop over the heads."""
    n = 1
    while 2 * n <= h:
        n *= 2
    out = []
    for head in range(h):
        if head < n:
            out.append(2.0 ** (-8.0 * (head + 1) / n))
        else:  # the odd-numbered slopes of 2n: i = 1, 3, 5, ...
            out.append(2.0 ** (-8.0 * (2 * (head - n) + 1) / (2 * n)))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("h", [1, 2, 3, 5, 6, 7, 8, 12, 24])
def test_alibi_slopes_for_any_number_of_heads(h):
    assert torch.allclose(_head_slopes(h), alibi_slopes(h, torch.float64))
    assert check_alibi_slopes(_head_slopes(h), h).ok
    assert check_alibi_slopes(alibi_slopes(h), h).ok  # float32: powers of two are exact


def test_alibi_slopes_mistakes_for_six_heads():
    """h = 6, the lab's input: the slopes of 4, then 2^-1 and 2^-3 of 8."""
    right = torch.tensor([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3],
                         dtype=torch.float64)
    assert check_alibi_slopes(right, 6).ok
    assert check_alibi_slopes(right.tolist(), 6).ok
    eight = alibi_slopes(8, torch.float64)
    i = torch.arange(1, 7, dtype=torch.float64)
    cases = {
        "not a power of two": 2.0 ** (-8 * i / 6),
        "not its odd-numbered ones": torch.cat([right[:4], eight[:2]]),
        "n's own slopes again": torch.cat([right[:4], eight[1::2][:2]]),
        "put first": torch.cat([right[4:], right[:4]]),
        "cut to h heads": eight[:6],
        "steepest first": right.sort(descending=True).values,
        "reverse order": right.flip(0),
        "counted from 0": torch.cat([2.0 ** (-8 * (i[:4] - 1) / 4),
                                     (2.0 ** (-8 * (torch.arange(1, 9.0) - 1) / 8))[0::2][:2]]),
    }
    for phrase, answer in cases.items():
        fb = check_alibi_slopes(answer, 6)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)
    for bad in (None, ..., right[:4], "0.25"):
        fb = check_alibi_slopes(bad, 6)
        assert not fb.ok and fb.message.startswith("Not yet"), fb.message


def _solutions():
    def rotate_pair(pair, m, theta):
        return _turn(pair, m * theta)

    return {"rotate_pair": rotate_pair, "interleaved_to_half": _to_half,
            "rope_scores": _scores, "head_slopes": _head_slopes}


WRONG = {"rotate_pair": lambda pair, m, theta: _turn(pair, -m * theta),
         "interleaved_to_half": lambda w, n_heads: _to_half(w, 1),
         "rope_scores": lambda q, k, q_pos, k_pos: _scores(q, k, torch.arange(len(q_pos)),
                                                           torch.arange(len(k_pos))),
         "head_slopes": lambda h: 2.0 ** (-8 * torch.arange(1, h + 1.0) / h)}


def test_graded_functions_pass_every_hidden_input_and_mistakes_fail_on_them():
    right = _solutions()
    assert set(right) == {spec.function for spec in GRADED.values()}
    for spec in GRADED.values():
        for seed in (1, 2, 3):
            cases = hidden_cases(spec, seed)
            assert cases
            for case in cases:
                fb = spec.check(right[spec.function](*case.call), *case.check_args)
                assert fb.ok, (spec.function, case.label, fb.message)
        verdicts = [spec.check(WRONG[spec.function](*c.call), *c.check_args)
                    for c in hidden_cases(spec, 1)]
        assert not all(v.ok for v in verdicts), spec.function
        assert any("looks like" in v.message for v in verdicts), spec.function
    a, b = hidden_cases(GRADED["check_to_half"], 1), hidden_cases(GRADED["check_to_half"], 2)
    assert not torch.equal(a[0].call[0], b[0].call[0])  # the seed changes the inputs


def _run(source):
    ns = {"__name__": "__main__"}
    exec(source, ns)  # noqa: S102 (the test's own code)
    return ns


def test_practice_checks_refuse_the_librarys_code():
    ns = _run("import torch\n"
              "from attnbook.positions import alibi_slopes\n"
              "from attnbook.lab.position_lab import score_by_distance\n"
              "from attnbook.exercises.positions import check_alibi_slopes, "
              "check_relative_scores\n"
              "def head_slopes(h):\n"
              "    return alibi_slopes(h, torch.float64)\n"
              "def rope_scores(q, k, q_pos, k_pos):\n"
              "    return score_by_distance(q, k, (q_pos[:, None] - k_pos).flatten())"
              ".reshape(len(q_pos), len(k_pos))\n"
              "q, k = torch.randn(2, 8, dtype=torch.float64)\n"
              "qp, kp = torch.arange(6, 10), torch.arange(10)\n"
              "first = check_alibi_slopes(head_slopes(6), 6)\n"
              "second = check_relative_scores(rope_scores(q, k, qp, kp), q, k, qp, kp)\n")
    assert ns["first"].message.startswith("Right values, but head_slopes uses alibi_slopes"), \
        ns["first"].message
    assert ns["second"].message.startswith("Right values, but rope_scores uses "
                                           "score_by_distance"), ns["second"].message


def test_answers_fixed_to_the_labs_input_fail_the_second_input():
    ns = _run("import torch\n"
              "from attnbook.positions import apply_rope\n"
              "from attnbook.exercises.positions import check_alibi_slopes, "
              "check_relative_scores\n"
              "def head_slopes(h):\n"
              "    return torch.tensor([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])\n"
              "def rope_scores(q, k, q_pos, k_pos):\n"
              "    pos = torch.arange(10)\n"
              "    S = apply_rope(q.expand(10, 8), pos) @ apply_rope(k.expand(10, 8), pos).T\n"
              "    return S[6:]\n"
              "q, k = torch.randn(2, 8, dtype=torch.float64)\n"
              "qp, kp = torch.arange(6, 10), torch.arange(10)\n"
              "first = check_alibi_slopes(head_slopes(6), 6)\n"
              "second = check_relative_scores(rope_scores(q, k, qp, kp), q, k, qp, kp)\n")
    for key in ("first", "second"):
        assert ns[key].message.startswith("Right values on the lab's input, but not on a "
                                          "second input"), ns[key].message
    assert "Is something typed in" in ns["first"].message  # no known mistake explains it


def test_a_named_mistake_on_the_second_input_is_not_called_typed_in():
    """Issue 48: right at h = 6, wrong for powers of two (2^(-8/i)); at h = 2 that gives the
    slopes in reverse order too, so both are named, and "typed in?" is not asked."""
    ns = _run("import math\nimport torch\n"
              "from attnbook.exercises.positions import check_alibi_slopes\n"
              "def head_slopes(h):\n"
              "    n = 2 ** int(math.log2(h))\n"
              "    if n == h:\n"
              "        return torch.tensor([2.0 ** (-8 / i) for i in range(1, h + 1)])\n"
              "    s = [2.0 ** (-8 * i / n) for i in range(1, n + 1)]\n"
              "    s += [2.0 ** (-8 * i / (2 * n)) for i in range(1, 2 * (h - n), 2)]\n"
              "    return torch.tensor(s, dtype=torch.float64)\n"
              "first = check_alibi_slopes(head_slopes(6), 6)\n")
    message = ns["first"].message
    assert message.startswith("Right values on the lab's input, but not on a second input "
                              "(h = 2)"), message
    assert "2^(-8/i)" in message and "reverse order" in message, message
    assert "typed in" not in message


def test_apply_rope_under_another_name_is_refused():
    """Issue 48: the method limit holds however the function is imported."""
    for imports, call in (("from attnbook.positions import apply_rope as turn", "turn"),
                          ("import attnbook.positions as P", "P.apply_rope"),
                          ("from attnbook import apply_rope\nturn = apply_rope", "turn")):
        ns = _run("import torch\n" + imports + "\n"
                  "from attnbook.exercises.positions import check_rotate_pair\n"
                  "def rotate_pair(pair, m, theta):\n"
                  "    x = torch.zeros(1, 4, dtype=pair.dtype)\n"
                  "    x[0, 2:] = pair                     # pair 1 of a head of width 4\n"
                  f"    return {call}(x, torch.tensor([m]), base=theta ** -2.0,"
                  " layout='interleaved')[0, 2:]\n"
                  "pair = torch.tensor([1.0, 0.5], dtype=torch.float64)\n"
                  "first = check_rotate_pair(rotate_pair(pair, 3, 10000.0 ** -0.25), pair, 3, "
                  "10000.0 ** -0.25)\n")
        assert ns["first"].message.startswith("Right values, but rotate_pair uses apply_rope"), (
            imports, ns["first"].message)


def test_the_method_limits_name_real_callables():
    """Issue 48: every listed name is something a student could call (the library, torch or
    the lab's own cells); private helpers are caught but not listed."""
    import importlib
    import json

    from attnbook.exercises import mask_functions, positions

    where = [importlib.import_module(m) for m in (
        "attnbook", "attnbook.positions", "attnbook.masks", "attnbook.lab.position_lab",
        "torch", "torch.autograd", "torch.autograd.functional", "torch.func",
        "torch.nn.attention.flex_attention")]
    labs = "".join(json.dumps(json.load(open(ROOT / "notebooks" / n)))
                   for n in ("20_positions.ipynb", "21_mask_functions.ipynb"))
    for spec in [*positions.GRADED.values(), *mask_functions.GRADED.values()]:
        for name in spec.forbidden:
            real = any(callable(getattr(m, name, None)) for m in where) or \
                name == "backward" or f"def {name}(" in labs
            assert real, (spec.function, name)
