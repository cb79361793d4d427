"""Checkers of the lab "The cost of attention" accept right answers and name mistakes."""

from attnbook.exercises.cost import check_score_bytes, check_score_flops


def test_score_bytes():
    B, T = 3, 1024
    assert check_score_bytes(B * T * T * 4, B, T).ok
    assert check_score_bytes(float(B * T * T * 4), B, T).ok
    assert "still empty" in check_score_bytes(..., B, T).message
    for answer, phrase in [(T * T * 4, "batch B"), (B * T * T, "not bytes"),
                           (8 * B * T * T * 4, "bits"), (B * T * (T + 1) // 2 * 4, "triangle")]:
        fb = check_score_bytes(answer, B, T)
        assert not fb.ok and phrase in fb.message, fb.message


def test_score_flops():
    B, T, d = 3, 256, 64
    assert check_score_flops(2 * B * T * T * d, B, T, d).ok
    for answer, phrase in [(2 * T * T * d, "batch B"), (2 * B * T * d * d, "projections"),
                           (2 * B * T * d, "one key")]:
        fb = check_score_flops(answer, B, T, d)
        assert not fb.ok and phrase in fb.message, fb.message
    fb = check_score_flops(B * T * T * d, B, T, d)  # two mistakes give this number
    assert not fb.ok and "2 FLOPs" in fb.message


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
