"""The weighted-sum lab's checkers accept right answers and name each typical mistake."""

from __future__ import annotations

import torch

from attnbook import causal_mask
from attnbook.exercises.weighted_sum import (
    check_hull_bound,
    check_outputs,
    check_permuted_outputs,
)
from attnbook.softmax import stable_softmax


def _example(T=5, d=3):
    """Scores, weights and the values and keys with one token per column, (d, T)."""
    s = torch.randn(T, T, dtype=torch.float64)
    return (s, torch.softmax(s, -1), torch.randn(d, T, dtype=torch.float64),
            torch.randn(d, T))


def test_outputs_right_answer_passes():
    s, A, Vt, Kt = _example()
    assert check_outputs(Vt @ A.T, A, Vt, Kt, s).ok
    assert check_outputs((A @ Vt.T).T.float(), A, Vt, Kt).ok  # the row layout, transposed back


def test_outputs_mistakes_are_named():
    s, A, Vt, Kt = _example()
    cases = {
        "who attends to token i": Vt @ A,
        "keys": Kt.double() @ A.T,
        "row layout": A @ Vt.T,
        "raw scores": Vt @ s.T,
    }
    for phrase, answer in cases.items():
        fb = check_outputs(answer, A, Vt, Kt, s)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_outputs_mistakes_that_need_T_equal_to_d():
    s, A, Vt, Kt = _example(T=4, d=4)
    for phrase, answer in {"features of one token": A @ Vt, "elementwise": Vt * A.T}.items():
        fb = check_outputs(answer, A, Vt, Kt, s)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_outputs_a_wrong_shape_is_named():
    s, A, Vt, Kt = _example()
    fb = check_outputs(torch.zeros(3), A, Vt, Kt, s)
    assert not fb.ok and "shape (3,)" in fb.message


def test_hull_bound():
    v = torch.tensor([[0.5, 1.0], [2.0, 0.0], [-1.0, 1.0], [3.0, 2.0], [1.0, -1.0]])
    assert check_hull_bound(torch.tensor([0.5, 2.0, 2.0, 3.0, 3.0]), v).ok
    x = v[:, 0].double()
    cases = {
        "over all tokens": torch.full((5,), 3.0),
        "own value": x,
        "running sum": x.cumsum(0),
        "running mean": x.cumsum(0) / torch.arange(1, 6),
        "running minimum": x.cummin(0).values,
    }
    for phrase, answer in cases.items():
        fb = check_hull_bound(answer, v)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_unshuffled_outputs():
    y = torch.randn(4, 3)
    perm = torch.tensor([2, 0, 3, 1])  # not its own inverse
    y_perm = y[perm]  # the outputs for x[perm]
    assert check_permuted_outputs(y, y_perm, perm).ok
    cases = {"not invariant": y_perm, "a second time": y_perm[perm]}
    for phrase, answer in cases.items():
        fb = check_permuted_outputs(answer, y_perm, perm)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)
    y4 = torch.randn(4, 4)
    fb = check_permuted_outputs(y4[:, torch.argsort(perm)], y4, perm)
    assert not fb.ok and "features put back" in fb.message, fb.message


def test_unshuffled_outputs_agree_with_attention():
    """Unmasked attention on x[perm] gives y[perm]; the check's answer takes it back to y."""
    from attnbook import Attention
    from attnbook.scores import attention_scores, scale_scores
    from attnbook.weighted_sum import weighted_sum

    m = Attention(3, 8).double()
    x = torch.randn(5, 3, dtype=torch.float64)

    def no_mask(x):
        q, k, v = m.query(x), m.key(x), m.value(x)
        return weighted_sum(stable_softmax(scale_scores(attention_scores(q, k), 3)), v)

    perm = torch.tensor([1, 4, 0, 2, 3])
    with torch.no_grad():
        assert check_permuted_outputs(no_mask(x), no_mask(x[perm]), perm).ok


def test_outputs_without_the_causal_mask_is_named():
    T, d = 4, 3
    q, k, v = (torch.randn(T, d, dtype=torch.float64) for _ in range(3))
    scores = q @ k.T / d ** 0.5
    weights = stable_softmax(scores.masked_fill(causal_mask(T), float("-inf")))
    assert check_outputs(v.T @ weights.T, weights, v.T, k.T, scores).ok
    fb = check_outputs(v.T @ stable_softmax(scores).T, weights, v.T, k.T, scores)
    assert not fb.ok and "without the causal mask" in fb.message, fb.message


def test_practice_check_catches_a_typed_in_list():
    """Issue 31: a list typed in from the lab's input is right there and nowhere else."""
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.weighted_sum import check_hull_bound\n"
         "V2 = torch.tensor([[0.5, 1.0], [-1.0, 0.3], [1.5, -0.5], [0.8, 2.0], [2.5, 0.0]],\n"
         "                  dtype=torch.float64)\n"
         "def hull_bound(V):\n    return [0.5, 0.5, 1.5, 1.5, 2.5]\n"
         "result = check_hull_bound(hull_bound(V2), V2)\n", ns)
    assert not ns["result"].ok and "second input" in ns["result"].message


def test_cummax_without_values_is_named():
    """Issue 31: both the pair itself and the (2, T) tensor the grader captures of it."""
    v = torch.randn(6, 2, dtype=torch.float64)
    pair = v[:, 0].cummax(dim=0)
    for answer in (pair, torch.stack([pair.values, pair.indices.double()])):
        fb = check_hull_bound(answer, v)
        assert not fb.ok and ".values" in fb.message, fb.message
    assert check_hull_bound(pair.values, v).ok
