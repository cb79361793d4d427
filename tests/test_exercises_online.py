"""Checkers of the lab "Online softmax and tiled attention"."""

import torch

from attnbook.exercises.online import check_merged_output, check_merged_sum, merge_stats
from attnbook.online import online_softmax_stats


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


def _thirds():
    torch.manual_seed(2)
    s = torch.randn(4, 9, dtype=torch.float64) * 3
    s[2, 3:6] = float("-inf")  # row 2: the middle block is masked
    s[3] = float("-inf")  # row 3: no visible key
    stats = []
    for blk in (slice(0, 3), slice(3, 6), slice(6, 9)):
        stats += list(online_softmax_stats(s[:, blk], 3))
    return s, stats


def test_merged_sum_of_three_blocks():
    s, stats = _thirds()
    m1, l1, m2, l2, m3, l3 = stats
    m = s.amax(-1, keepdim=True)
    right = (s - m.masked_fill(m.isinf(), 0.0)).exp().sum(-1, keepdim=True)
    assert right[3].item() == 0.0
    assert check_merged_sum(right, *stats).ok
    m12, l12 = merge_stats(m1, l1, m2, l2)
    assert check_merged_sum(merge_stats(m12, l12, m3, l3)[1], *stats).ok  # merged pairwise
    shift = m.masked_fill(m.isinf(), 0.0)
    for answer, phrase in [(l1 + l2 + l3, "rescaled"),
                           (l1 * (shift - m1).exp() + l2 * (shift - m2).exp()
                            + l3 * (shift - m3).exp(), "sign"),
                           (l1 * m1.exp() + l2 * m2.exp() + l3 * m3.exp(), "relative to 0"),
                           (l12, "third left out"), (l12 + l3, "l3 added as it is"),
                           (l1 * (m1 - shift).exp() + l2 + l3 * (m3 - shift).exp(),
                            "block 2's sum not rescaled")]:
        fb = check_merged_sum(answer, *stats)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_nan_in_the_rows_that_see_nothing_is_named():
    """The merge without the shift of an empty row: exp(-inf - (-inf)) = NaN there only."""
    _, (m1, l1, m2, l2, m3, l3) = _thirds()
    m = torch.maximum(torch.maximum(m1, m2), m3)
    naive = l1 * (m1 - m).exp() + l2 * (m2 - m).exp() + l3 * (m3 - m).exp()
    assert torch.isnan(naive[3]).all() and not torch.isnan(naive[:3]).any()
    fb = check_merged_sum(naive, m1, l1, m2, l2, m3, l3)
    assert not fb.ok and "Shift by 0 where the maximum is -inf" in fb.message, fb.message


def test_practice_check_refuses_the_librarys_merge():
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.online import check_merged_sum, merge_stats\n"
         "from attnbook.online import online_softmax_stats\n"
         "s = torch.randn(3, 9, dtype=torch.float64)\n"
         "st = [t for b in range(3) for t in online_softmax_stats(s[:, 3 * b:3 * b + 3], 3)]\n"
         "def merged_sum(m1, l1, m2, l2, m3, l3):\n"
         "    m, l = merge_stats(m1, l1, m2, l2)\n"
         "    return merge_stats(m, l, m3, l3)[1]\n"
         "result = check_merged_sum(merged_sum(*st), *st)\n", ns)
    assert ns["result"].message.startswith("Right values, but merged_sum uses merge_stats")


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
