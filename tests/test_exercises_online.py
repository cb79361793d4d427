"""Checkers of the lab "Online softmax and tiled attention"."""

import torch

from attnbook.exercises.online import check_merged_output, check_merged_sum, merge_stats


def _halves():
    torch.manual_seed(1)
    s = torch.randn(3, 8, dtype=torch.float64) * 3
    v = torch.randn(8, 2, dtype=torch.float64)
    parts = []
    for blk in (slice(0, 4), slice(4, 8)):
        m = s[:, blk].amax(-1, keepdim=True)
        e = (s[:, blk] - m).exp()
        l = e.sum(-1, keepdim=True)
        parts.append((m, l, (e / l) @ v[blk]))
    return s, v, parts


def test_merged_sum():
    s, _, [(m1, l1, _), (m2, l2, _)] = _halves()
    m, right = merge_stats(m1, l1, m2, l2)
    torch.testing.assert_close(right, (s - m).exp().sum(-1, keepdim=True))
    assert check_merged_sum(right, m1, l1, m2, l2).ok
    for answer, phrase in [(l1 + l2, "rescaled"), (l1 * (m - m1).exp() + l2 * (m - m2).exp(),
                                                   "sign"),
                           (l1 * m1.exp() + l2 * m2.exp(), "relative to 0")]:
        fb = check_merged_sum(answer, m1, l1, m2, l2)
        assert not fb.ok and phrase in fb.message, fb.message


def test_merged_output():
    s, v, [(m1, l1, o1), (m2, l2, o2)] = _halves()
    right = torch.softmax(s, -1) @ v
    assert check_merged_output(right, o1, m1, l1, o2, m2, l2).ok
    for answer, phrase in [((o1 + o2) / 2, "plain average"), (o1 + o2, "not sums"),
                           ((l1 * o1 + l2 * o2) / (l1 + l2), "without rescaling")]:
        fb = check_merged_output(answer, o1, m1, l1, o2, m2, l2)
        assert not fb.ok and phrase in fb.message, fb.message


def test_the_l_factors_left_out_are_named():
    """Issue 31: 'differs by up to 0.06' was all a learner heard for this one."""
    _, _, [(m1, l1, o1), (m2, l2, o2)] = _halves()
    m = torch.maximum(m1, m2)
    e1, e2 = (m1 - m).exp(), (m2 - m).exp()
    l = l1 * e1 + l2 * e2
    for answer in ((e1 * o1 + e2 * o2) / (e1 + e2), (e1 * o1 + e2 * o2) / l):
        fb = check_merged_output(answer, o1, m1, l1, o2, m2, l2)
        assert not fb.ok and "ℓ factors left out" in fb.message, fb.message
