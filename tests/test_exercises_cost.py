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
