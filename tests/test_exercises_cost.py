"""Checkers of the lab "The cost of attention" accept right answers, name mistakes, and grade the
exercises as functions on hidden inputs (issue 31); the lab's measuring tools."""

import pytest

from attnbook.exercises import hidden_cases
from attnbook.exercises.cost import GRADED, check_score_bytes, check_score_flops

# The book's solutions (the lab's solution cells).


def score_bytes(B, h, T, bytes_per_number):
    return B * h * T * T * bytes_per_number


def score_flops(B, T, d):
    pairs = T * (T + 1) // 2
    return B * pairs * 2 * d


SOLUTIONS = {"check_score_bytes": score_bytes, "check_score_flops": score_flops}


@pytest.mark.parametrize("seed", [0, 1, 12345])
@pytest.mark.parametrize("name", sorted(GRADED))
def test_the_solutions_pass_every_hidden_case(name, seed):
    spec = GRADED[name]
    for case in hidden_cases(spec, seed):
        fb = spec.check(SOLUTIONS[name](*case.call), *case.check_args)
        assert fb.ok, (case.label, fb.message)


def test_score_bytes():
    B, h, T, n = 3, 4, 2048, 2  # the lab's input
    right = B * h * T * T * n
    assert check_score_bytes(right, B, h, T, n).ok
    assert check_score_bytes(float(right), B, h, T, n).ok
    assert check_score_bytes(right + 1, B, h, T, n).ok is False  # exact: one byte off is wrong
    assert "still empty" in check_score_bytes(..., B, h, T, n).message
    for answer, phrase in [(B * T * T * n, "one head"), (B * T * T * n // h, "divided among"),
                           (h * T * T * n, "batch B"), (B * h * T * T, "not bytes"),
                           (B * h * T * T * 4, "float32's 4 bytes"), (8 * right, "bits"),
                           (B * h * T * (T + 1) // 2 * n, "triangle"),
                           ([right, right], "one number"), ("many", "should be a tensor")]:
        fb = check_score_bytes(answer, B, h, T, n)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_score_flops():
    B, T, d = 3, 256, 64  # the lab's input
    right = B * T * (T + 1) * d
    assert check_score_flops(right, B, T, d).ok
    assert check_score_flops(2 * d * B * (T * (T + 1) / 2), B, T, d).ok  # a float
    for answer, phrase in [(2 * B * T * T * d, "whole square"), (B * T * T * d, "T²/2 pairs"),
                           (B * T * (T - 1) * d, "diagonal is visible"),
                           (B * T * (T + 1) // 2 * d, "multiplications only"),
                           (T * (T + 1) * d, "batch B"), (2 * right, "both products"),
                           (2 * B * T * d * d, "projections")]:
        fb = check_score_flops(answer, B, T, d)
        assert not fb.ok and phrase in fb.message, (phrase, fb.message)


def test_large_counts_are_compared_exactly():
    """Counts beyond float32's 2**24 still compare exactly (the check works in float64)."""
    B, T, d = 1, 8191, 127
    right = B * T * (T + 1) * d
    assert check_score_flops(right, B, T, d).ok
    assert not check_score_flops(right + 2, B, T, d).ok


def test_practice_checks_refuse_the_labs_own_formulas():
    ns = {"__name__": "__main__"}
    exec("from attnbook.exercises.cost import check_score_bytes, check_score_flops\n"  # noqa: S102
         "def score_bytes_v1(B, T, bytes_per_number=4):\n"
         "    return B * T * T * bytes_per_number\n"
         "def product_flops(T, d, h=1, causal=False):\n"
         "    return 4 * T * T * d\n"
         "def score_bytes(B, h, T, bytes_per_number):\n"
         "    return score_bytes_v1(B * h, T, bytes_per_number)\n"
         "def score_flops(B, T, d):\n"
         "    return B * (product_flops(T, d) // 4 + T * d)\n"
         "first = check_score_bytes(score_bytes(3, 4, 2048, 2), 3, 4, 2048, 2)\n"
         "second = check_score_flops(score_flops(3, 256, 64), 3, 256, 64)\n", ns)
    assert ns["first"].message.startswith("Right values, but score_bytes uses score_bytes_v1")
    assert ns["second"].message.startswith("Right values, but score_flops uses product_flops")


@pytest.mark.parametrize("code, call", [
    ("def score_bytes(B, h, T, bytes_per_number):\n    return 100663296\n",
     "check_score_bytes(score_bytes(3, 4, 2048, 2), 3, 4, 2048, 2)"),
    ("def score_flops(B, T, d):\n    return 3 * 256 * 257 * 64\n",
     "check_score_flops(score_flops(3, 256, 64), 3, 256, 64)"),
])
def test_a_number_typed_in_fails_the_second_input(code, call):
    ns = {"__name__": "__main__"}
    exec("from attnbook.exercises.cost import check_score_bytes, check_score_flops\n"  # noqa: S102
         + code + f"result = {call}\n", ns)
    assert ns["result"].message.startswith("Right values on the lab's input, but not on a "
                                           "second input"), ns["result"].message


def test_live_tensor_bytes_counts_the_peak_of_live_tensors():
    import torch

    from attnbook.exercises.cost import LiveTensorBytes

    x = torch.randn(256)  # an input: not counted

    def two_at_once():
        a = x * 2  # 1 KiB
        b = a.view(16, 16)  # a view of the same storage: no new bytes
        c = b + 1  # 1 KiB, alive with a
        del a, b
        return c.sum()

    assert LiveTensorBytes.of(two_at_once) == 2 * 256 * 4  # a and c; the sum comes after a died
    assert LiveTensorBytes.of(lambda: None) == 0


def test_best_time_restores_the_thread_count():
    import torch

    from attnbook.exercises.cost import best_time

    before = torch.get_num_threads()
    assert best_time(lambda: torch.ones(8).sum(), repeats=2) > 0
    assert torch.get_num_threads() == before
