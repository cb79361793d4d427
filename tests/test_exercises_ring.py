"""Checkers of the lab "Ring attention": right answers pass on every hidden input, each typical
mistake is named, and the practice checks apply the grade's rules."""

import pytest
import torch

from attnbook.exercises import hidden_cases
from attnbook.exercises.ring import (
    GRADED,
    check_contiguous_work,
    check_holder_rank,
    check_ring_output,
    merge_steps,
)
from attnbook.online import tiled_attention_forward
from attnbook.ring import simulate_ring, visible_scores


def test_holder_rank():
    assert check_holder_rank(3, owner=1, step=2, world=4).ok
    assert check_holder_rank(torch.tensor(3), owner=1, step=2, world=4).ok
    assert check_holder_rank(0, owner=3, step=1, world=4).ok  # wraps around
    for answer, (owner, step, world), phrase in [
            (2, (1, 3, 4), "read along a row"), (4, (1, 3, 4), "modulo the world size"),
            (1, (1, 3, 4), "at step 0 the shard is still on its owner"),
            (3, (1, 3, 4), "moved t times"), (2, (2, 3, 7), "the owner itself")]:
        fb = check_holder_rank(answer, owner=owner, step=step, world=world)
        assert not fb.ok and phrase in fb.message, (answer, fb.message)
    fb = check_holder_rank(-1, owner=1, step=2, world=4)
    assert not fb.ok and "wrong way" in fb.message, fb.message
    for bad in (None, ..., [3], "3"):
        fb = check_holder_rank(bad, owner=1, step=2, world=4)
        assert not fb.ok and fb.message.startswith("Not yet"), fb.message


def test_holder_rank_agrees_with_the_ring():
    """Rank r holds the shard of (r - t) mod P at step t (the lab's table): the holder of
    owner's shard is the rank whose source is owner."""
    for P in (1, 3, 4, 7):
        for t in range(P):
            for r in range(P):
                assert check_holder_rank(r, owner=(r - t) % P, step=t, world=P).ok


def _steps():
    """Three key shards of 4 keys seen by 4 queries (square, as ring chunks are); query 0 sees
    no key at all (an empty row)."""
    torch.manual_seed(2)
    q = torch.randn(4, 3, dtype=torch.float64)
    ks = [torch.randn(4, 3, dtype=torch.float64) for _ in range(3)]
    vs = [torch.randn(4, 2, dtype=torch.float64) for _ in range(3)]
    pad = torch.ones(1, 4, dtype=torch.bool)
    outs, lses = [], []
    for k, v in zip(ks, vs):
        out, lse = tiled_attention_forward(q[None], k[None], v[None], pad, False, 2)
        out, lse = out[0].clone(), lse[0].clone()
        out[0], lse[0] = 0.0, float("-inf")  # query 0: every key masked
        outs.append(out)
        lses.append(lse)
    s = torch.cat([q @ k.T / 3**0.5 for k in ks], -1)
    s[0] = float("-inf")
    return torch.stack(outs), torch.stack(lses), s, torch.cat(vs)


def test_merge_steps_is_attention_over_every_shard():
    outs, lses, s, v = _steps()
    right = torch.softmax(s[1:], -1) @ v
    merged = merge_steps(outs, lses)
    torch.testing.assert_close(merged[1:], right)
    assert (merged[0] == 0).all()
    assert check_ring_output(merged, outs, lses).ok
    assert check_ring_output(merged.float(), outs, lses).ok
    assert check_ring_output(merged.tolist(), outs, lses).ok


def _merge_by_folding(outs, lses):
    """Another right answer: fold the steps one by one (the chapter's recurrence)."""
    m = torch.full_like(lses[0], float("-inf"))
    l, o = torch.zeros_like(lses[0]), torch.zeros_like(outs[0])
    for out, lse in zip(outs, lses):
        new = torch.maximum(m, lse)
        shift = torch.where(torch.isinf(new), torch.zeros_like(new), new)
        a, b = torch.exp(m - shift), torch.exp(lse - shift)
        m, l, o = new, a * l + b, a * o + b * out
    return o / torch.where(l == 0, torch.ones_like(l), l)


def test_ring_output_mistakes():
    outs, lses, _, _ = _steps()
    w = torch.exp(lses - lses.amax(0).nan_to_num(neginf=0.0))
    for answer, phrase in [(outs.mean(0), "plain average"), (outs.sum(0), "sum of the steps"),
                           (outs[-1], "last step"), (outs[0], "own shard"),
                           ((w * outs).sum(0), "not divided by the total"),
                           ((torch.softmax(lses, 1).nan_to_num(0.0) * outs).sum(0),
                            "over the queries")]:
        fb = check_ring_output(answer, outs, lses)
        assert not fb.ok and phrase in fb.message, fb.message
    e = lses.exp()
    fb = check_ring_output((e * outs).sum(0) / e.sum(0), outs, lses)
    assert not fb.ok and "NaN on a row that saw no key" in fb.message, fb.message
    assert "empty" in check_ring_output(..., outs, lses).message
    fb = check_ring_output((merge_steps(outs, lses), lses.amax(0)), outs, lses)
    assert not fb.ok and "pair of tensors" in fb.message, fb.message
    for bad in (None, [1.0, 2.0], merge_steps(outs, lses)[1:]):
        fb = check_ring_output(bad, outs, lses)
        assert not fb.ok and fb.message.startswith("Not yet"), fb.message


def _unshifted(outs, lses):
    e = torch.exp(lses)
    total = e.sum(0)
    return (e * outs).sum(0) / total.masked_fill(total == 0, 1.0)


def test_unshifted_exp_is_named_on_large_log_sum_exps():
    """exp(lse) without the shift is right on the lab's input, wrong when the scores are
    large: inf / inf (NaN) near +900, 0 near -900."""
    cases = {c.label: c for c in hidden_cases(GRADED["check_ring_output"], 1)}
    high = next(c for label, c in cases.items() if "near 900" in label)
    fb = check_ring_output(_unshifted(*high.call), *high.check_args)
    assert not fb.ok and "overflows" in fb.message, fb.message
    low = next(c for label, c in cases.items() if "near -900" in label)
    fb = check_ring_output(_unshifted(*low.call), *low.check_args)
    assert not fb.ok and "underflows" in fb.message, fb.message
    outs, lses, _, _ = _steps()
    assert check_ring_output(_unshifted(outs, lses), outs, lses).ok


def test_contiguous_work():
    T, P = 32, 4
    right = visible_scores(T, P, "contiguous")
    assert check_contiguous_work(right, T, P).ok
    c = T // (2 * P)
    for answer, phrase in [(visible_scores(T, P, "zigzag"), "zigzag"),
                           ([r - 2 * c for r in right], "without its diagonal"),
                           ([r + c * (c - 1) for r in right], "counted whole"),
                           ([T * T / (2 * P)] * P, "about the average"),
                           (right[::-1], "reverse order"),
                           (visible_scores(T, P, "contiguous", causal=False), "no causal mask")]:
        fb = check_contiguous_work(answer, T, P)
        assert not fb.ok and phrase in fb.message, fb.message


def test_contiguous_work_with_padding():
    """T = 30, P = 4, the lab's input: chunks of 4, the last with 2 real tokens."""
    right = [36, 100, 164, 165]
    assert visible_scores(30, 4, "contiguous") == right
    assert check_contiguous_work(right, 30, 4).ok
    assert check_contiguous_work(torch.tensor(right), 30, 4).ok
    for answer, phrase in [(visible_scores(32, 4, "contiguous"), "padded tokens counted"),
                           ([30 * 31 / 2 / 4] * 4, "the mean"),
                           (visible_scores(24, 4, "contiguous"), "floor(T / 2P)")]:
        fb = check_contiguous_work(answer, 30, 4)
        assert not fb.ok and phrase in fb.message, fb.message
    for bad in (None, ..., [36, 100, 164], "36"):
        fb = check_contiguous_work(bad, 30, 4)
        assert not fb.ok and fb.message.startswith("Not yet"), fb.message


def _contiguous_work(T, world):
    """The book's solution: each chunk's real tokens see every earlier token and its own
    triangle."""
    c = -(-T // (2 * world))
    counts = []
    for r in range(world):
        total = 0
        for a in (2 * r, 2 * r + 1):
            s = max(0, min(c, T - a * c))
            total += s * a * c + s * (s + 1) // 2
        counts.append(total)
    return counts


def test_contiguous_work_counts_what_the_ring_computes():
    """The counts are the (query, key) pairs the simulated ring attends: equal when T is a
    multiple of 2P; with padding the ring also computes the masked padded places, which the
    exercise leaves out."""
    from attnbook.lab.ring_trace import trace_ring

    for T, P, padded in ((64, 4, False), (13, 2, True)):
        tr = trace_ring(*(torch.randn(1, T, 2, dtype=torch.float64) for _ in range(4)),
                        world=P, layout="contiguous")
        traced = [sum(step[r] for step in tr.work()) for r in range(P)]
        counts = _contiguous_work(T, P)
        assert check_contiguous_work(counts, T, P).ok
        assert sum(counts) == T * (T + 1) // 2
        if padded:
            assert all(t >= n for t, n in zip(traced, counts)) and traced != counts
        else:
            assert traced == counts


SOLUTIONS = {
    "holder_rank": lambda owner, step, world: (owner + step) % world,
    "merge_ring_steps": _merge_by_folding,
    "contiguous_work": _contiguous_work,
}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_graded_functions_pass_every_hidden_input(seed):
    for spec in GRADED.values():
        cases = hidden_cases(spec, seed)
        assert cases
        for case in cases:
            fb = spec.check(SOLUTIONS[spec.function](*case.call), *case.check_args)
            assert fb.ok, (spec.function, case.label, fb.message)
    a, b = (hidden_cases(GRADED["check_ring_output"], s) for s in (1, 2))
    assert not torch.equal(a[1].call[0], b[1].call[0])  # the seed changes the inputs


def test_library_merge_is_right_on_hidden_inputs():
    """The hidden cases are ring steps: merge_steps, the checker's own rule, agrees with the
    folding recurrence; and the simulated ring is what the steps come from."""
    for case in hidden_cases(GRADED["check_ring_output"], 4):
        torch.testing.assert_close(merge_steps(*case.call), _merge_by_folding(*case.call))
    q, k, v = (torch.randn(1, 8, 2, dtype=torch.float64) for _ in range(3))
    assert simulate_ring(q, k, v, world=2).shape == (1, 8, 2)


def test_mistakes_fail_on_the_hidden_inputs():
    wrong = {"holder_rank": lambda owner, step, world: (owner - step) % world,
             "merge_ring_steps": lambda outs, lses: outs.mean(0),
             "contiguous_work": lambda T, world: visible_scores(T, world, "zigzag")}
    for spec in GRADED.values():
        verdicts = [spec.check(wrong[spec.function](*c.call), *c.check_args)
                    for c in hidden_cases(spec, 1)]
        assert not all(v.ok for v in verdicts), spec.function
        assert any("looks like" in v.message for v in verdicts), spec.function


def _run(source):
    ns = {"__name__": "__main__"}
    exec(source, ns)  # noqa: S102 (the test's own code)
    return ns


def test_practice_checks_refuse_the_librarys_code():
    ns = _run("import torch\n"
              "from attnbook.ring import visible_scores\n"
              "from attnbook.exercises.ring import check_contiguous_work, check_ring_output\n"
              "from attnbook.exercises.ring import merge_steps\n"
              "def contiguous_work(T, world):\n"
              "    return visible_scores(T, world, 'contiguous')\n"
              "def merge_ring_steps(outs, lses):\n"
              "    return merge_steps(outs, lses)\n"
              "outs = torch.randn(3, 4, 2, dtype=torch.float64)\n"
              "lses = torch.randn(3, 4, 1, dtype=torch.float64)\n"
              "first = check_contiguous_work(contiguous_work(30, 4), T=30, world=4)\n"
              "second = check_ring_output(merge_ring_steps(outs, lses), outs, lses)\n")
    assert ns["first"].message.startswith("Right values, but contiguous_work uses "
                                          "visible_scores"), ns["first"].message
    assert ns["second"].message.startswith("Right values, but merge_ring_steps uses "
                                           "merge_steps"), ns["second"].message


def test_answers_fixed_to_the_labs_input_fail_the_second_input():
    ns = _run("from attnbook.exercises.ring import check_contiguous_work, check_holder_rank\n"
              "def holder_rank(owner, step, world):\n"
              "    return 3\n"
              "def contiguous_work(T, world):\n"
              "    return [36, 100, 164, 165]\n"
              "first = check_holder_rank(holder_rank(1, 2, 4), owner=1, step=2, world=4)\n"
              "second = check_contiguous_work(contiguous_work(30, 4), T=30, world=4)\n")
    for key in ("first", "second"):
        assert ns[key].message.startswith("Right values on the lab's input, but not on a "
                                          "second input"), ns[key].message


def test_an_unshifted_merge_fails_the_second_input_with_its_reason():
    """Right on the lab's input, but exp(lse) overflows on the second input: the practice
    check says so, as the grader would."""
    ns = _run("import torch\n"
              "from attnbook.exercises.ring import check_ring_output\n"
              "def merge_ring_steps(outs, lses):\n"
              "    e = torch.exp(lses)\n"
              "    total = e.sum(0)\n"
              "    return (e * outs).sum(0) / total.masked_fill(total == 0, 1.0)\n"
              "outs = torch.randn(3, 4, 2, dtype=torch.float64)\n"
              "lses = torch.randn(3, 4, 1, dtype=torch.float64)\n"
              "result = check_ring_output(merge_ring_steps(outs, lses), outs, lses)\n")
    message = ns["result"].message
    assert message.startswith("Right values on the lab's input, but not on a second input")
    assert "flows" in message, message
