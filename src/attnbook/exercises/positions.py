"""Checks for the lab "Rotary positions and ALiBi" (chapter 20)."""

from __future__ import annotations

import math

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _rotate(pair: torch.Tensor, angle: float) -> torch.Tensor:
    """The pair (x0, x1) turned counter-clockwise by ``angle`` radians: (2,) -> (2,)."""
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])


def check_rotate_pair(answer, pair: torch.Tensor, m: int, theta: float) -> Feedback:
    """Exercise: the feature pair ``pair`` of a query at position ``m``, rotated by m·θ.

    Shape:
        pair: (2,); answer: (2,)
    """
    x = torch.as_tensor(pair).detach().double().cpu()
    if x.shape != (2,):
        raise ValueError(f"pair must have shape (2,), got {tuple(x.shape)}")
    angle = m * theta
    mistakes = {
        "a rotation the other way (clockwise, by -m·θ): the sine terms have the wrong signs; "
        "R = [[cos, -sin], [sin, cos]]": _rotate(x, -angle),
        "a rotation by θ alone: the angle is the position times the frequency, m·θ":
            _rotate(x, theta),
        "cos and sin swapped: at angle 0 the pair must come back unchanged":
            torch.stack([math.sin(angle) * x[0] - math.cos(angle) * x[1],
                         math.cos(angle) * x[0] + math.sin(angle) * x[1]]),
        "the pair unrotated": x.clone(),
        "a rotation by (m + 1)·θ: positions count from 0": _rotate(x, (m + 1) * theta),
        "the angle m·θ taken in degrees (math.radians, or times π/180): θ is in radians "
        "already, and so is m·θ; pass it to cos and sin as it is": _rotate(x, math.radians(angle)),
        "the angle m·θ converted to degrees (math.degrees): math.cos and math.sin take "
        "radians, and m·θ is in radians already": _rotate(x, math.degrees(angle)),
    }
    return check_tensor(answer, _rotate(x, angle), mistakes, name="the rotated pair")


def _relative_scores(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                     base: float = 10000.0, layout: str = "half", rotate_q: bool = True,
                     rotate_k: bool = True, sign: int = 1) -> torch.Tensor:
    """S[i, j] = <R_{q_pos[i]} q, R_{k_pos[j]} k>: (d_h,), (d_h,), (T_q,), (T_k,) -> (T_q, T_k)."""
    from ..positions import apply_rope

    Q = q.expand(len(q_pos), -1)  # (T_q, d_h): the same query at every position
    K = k.expand(len(k_pos), -1)  # (T_k, d_h)
    if rotate_q:
        Q = apply_rope(Q, sign * q_pos, base=base, layout=layout)
    if rotate_k:
        K = apply_rope(K, sign * k_pos, base=base, layout=layout)
    return Q @ K.T  # (T_q, T_k)


def check_relative_scores(answer, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor,
                          k_pos: torch.Tensor, base: float = 10000.0) -> Feedback:
    """Exercise: S[i, j] = <R_{q_pos[i]} q, R_{k_pos[j]} k>, the score of the query q placed at
    position q_pos[i] against the key k placed at position k_pos[j] (new queries after cached
    keys, say), with the half layout (``apply_rope``'s default).

    Shape:
        q, k: (d_h,); q_pos: (T_q,), k_pos: (T_k,) integers; answer: (T_q, T_k)
    """
    q = torch.as_tensor(q).detach().double().cpu()
    k = torch.as_tensor(k).detach().double().cpu()
    q_pos = torch.as_tensor(q_pos).detach().long().cpu()
    k_pos = torch.as_tensor(k_pos).detach().long().cpu()

    def scores(qp=q_pos, kp=k_pos, **kwargs):
        return _relative_scores(q, k, qp, kp, base, **kwargs)

    right = scores()
    mistakes = {
        "no rotation at all: q·k in every entry": scores(rotate_q=False, rotate_k=False),
        "only the query rotated: rotate k by its own position k_pos[j] too":
            scores(rotate_k=False),
        "only the key rotated: rotate q by its own position q_pos[i] too":
            scores(rotate_q=False),
        "the transpose: rows are the query's positions, columns the key's": right.T,
        "the query rotated to its row number i (0, 1, ...), not to its position q_pos[i]: a "
        "new token after a cache sits further on":
            scores(qp=torch.arange(len(q_pos))),
        "the key rotated to its column number j, not to its position k_pos[j]":
            scores(kp=torch.arange(len(k_pos))),
        "both rotated to their row and column numbers, not to their positions":
            scores(qp=torch.arange(len(q_pos)), kp=torch.arange(len(k_pos))),
        "the interleaved layout: this exercise uses apply_rope's default, layout='half'":
            scores(layout="interleaved"),
        "rotations the wrong way (by -position): apply_rope turns by +position · θ":
            scores(sign=-1),
        "the scores divided by sqrt(d_h): here S is the plain dot product":
            right / math.sqrt(q.numel()),
    }
    mistakes = {key: value for key, value in mistakes.items()
                if value.shape != right.shape or not torch.allclose(value, right, atol=1e-6)}
    return check_tensor(answer, right, mistakes, name="the score matrix", atol=1e-6)


def _half_from_interleaved(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Rows of each head reordered from pairs (2c, 2c + 1) to pairs (c, c + d_h/2)."""
    from ..positions import layout_permutation

    rows, d_in = weight.shape
    d_h = rows // n_heads
    perm = layout_permutation(d_h)  # (d_h,)
    return weight.reshape(n_heads, d_h, d_in)[:, perm].reshape(rows, d_in)


def check_to_half(answer, weight: torch.Tensor, n_heads: int) -> Feedback:
    """Exercise: the query (or key) projection ``weight`` of a model trained with the interleaved
    layout, rewritten for the half layout, so that the scores stay the same.

    Shape:
        weight: (n_heads · d_h, d_in), an ``nn.Linear`` weight (one row per output feature);
        answer: the same shape
    """
    from ..positions import layout_permutation

    w = torch.as_tensor(weight).detach().double().cpu()
    if w.dim() != 2 or w.shape[0] % n_heads or (w.shape[0] // n_heads) % 2:
        raise ValueError(f"weight must be (n_heads * d_h, d_in) with an even d_h, got "
                         f"{tuple(w.shape)} for n_heads={n_heads}")
    rows, d_in = w.shape
    d_h = rows // n_heads
    perm = layout_permutation(d_h)
    inverse = torch.argsort(perm)
    mistakes = {
        "one permutation over all the rows at once: the layout is per head, so reorder the "
        "d_h rows of each head separately": w[layout_permutation(rows)],
        "the inverse permutation (half -> interleaved), applied to each head":
            w.reshape(n_heads, d_h, d_in)[:, inverse].reshape(rows, d_in),
        "the weight unchanged: under the half layout its rows pair up differently":
            w.clone(),
        "the odd features first (rows 1, 3, 5, ... of each head, then 0, 2, 4, ...): the two "
        "members of every pair swap places, which turns each pair the other way; the first "
        "member of pair c (row 2c) goes to row c, the second (row 2c + 1) to row c + d_h/2":
            w.reshape(n_heads, d_h, d_in)[:, torch.cat([perm[d_h // 2:], perm[: d_h // 2]])]
            .reshape(rows, d_in),
    }
    if d_in % 2 == 0:
        mistakes["the columns (input features) reordered instead of the rows (the output "
                 "features that RoPE rotates)"] = w[:, layout_permutation(d_in)]
    return check_tensor(answer, _half_from_interleaved(w, n_heads), mistakes,
                        name="the converted weight", atol=1e-6)


def _paper_slopes(h: int, power_of_two=None) -> torch.Tensor:
    """ALiBi's rule for any h (float64): the slopes of the largest power of two n <= h, then
    every other slope of 2n; ``power_of_two(n)`` gives a power of two's slopes (default
    2^(-8 i / n), i = 1 .. n)."""
    if power_of_two is None:
        power_of_two = lambda p: 2.0 ** (-8 * torch.arange(1, p + 1, dtype=torch.float64) / p)  # noqa: E731
    n = 2 ** int(math.log2(h))
    if h == n:
        return power_of_two(n)
    return torch.cat([power_of_two(n), power_of_two(2 * n)[0::2][: h - n]])


def check_alibi_slopes(answer, h: int) -> Feedback:
    """Exercise: ALiBi's slopes for ``h`` heads, any h >= 1: for h a power of two,
    m_i = 2^(-8 i / h), i = 1 .. h; otherwise the slopes of the largest power of two n <= h,
    then the odd-numbered slopes (i = 1, 3, ...) of 2n until there are h.

    Shape:
        answer: (h,)
    """
    right = _paper_slopes(h)
    n = 2 ** int(math.log2(h))
    i = torch.arange(1, h + 1, dtype=torch.float64)

    def rule(formula):  # the paper's rule around a wrong power-of-two formula
        return _paper_slopes(h, lambda p: formula(torch.arange(1, p + 1, dtype=torch.float64), p))

    of_2n = _paper_slopes(2 * n)
    mistakes = {
        "2^(-8 i / h) with h not a power of two: those are not ALiBi's slopes. Take the slopes "
        "of the largest power of two n <= h, then every other slope of 2n":
            2.0 ** (-8 * i / h),
        "i counted from 0: the first head's slope would be 1, and the last head misses "
        "2^(-8)": rule(lambda j, p: 2.0 ** (-8 * (j - 1) / p)),
        "i counted from 0 in the slopes of the power of two n: the first head's slope would "
        "be 1; count i = 1 .. n (the added slopes of 2n are right)":
            torch.cat([2.0 ** (-8 * torch.arange(n, dtype=torch.float64) / n), right[n:]]),
        "2^(-i/h) without the 8: the slopes span only a factor 2":
            rule(lambda j, p: 2.0 ** (-j / p)),
        "the slopes in reverse order: head 1 has the steepest slope, 2^(-8/n)": right.flip(0),
        "2^(-8/i): the exponent is -8 i / h, linear in i": rule(lambda j, p: 2.0 ** (-8 / j)),
        "the first h - n slopes of 2n added, not its odd-numbered ones (i = 1, 3, 5, ...)":
            torch.cat([right[:n], of_2n[: h - n]]),
        "the even-numbered slopes of 2n added (i = 2, 4, ...): those are n's own slopes again; "
        "take i = 1, 3, 5, ...":
            torch.cat([right[:n], of_2n[1::2][: h - n]]),
        "the added slopes of 2n put first: the n slopes of the power of two come first, then "
        "the added ones":
            torch.cat([right[n:], right[:n]]),
        "the slopes of the next power of two 2n, cut to h heads: keep the n slopes of the "
        "power of two below, then add every other slope of 2n":
            of_2n[:h],
        "the slopes sorted, steepest first: the paper keeps n's slopes first, then the added "
        "ones":
            right.sort(descending=True).values,
    }
    mistakes = {key: value for key, value in mistakes.items()
                if value.shape != right.shape or not torch.allclose(value, right, atol=1e-12)}
    return check_tensor(answer, right, mistakes, name="the slope tensor", atol=1e-9)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _rotate_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for m, c, d_h in ((5, 0, 16), (13, 3, 16), (1, 1, 8), (40, 2, 64)):
        pair = torch.randn(2, generator=g, dtype=torch.float64)
        theta = 10000.0 ** (-2 * c / d_h)
        cases.append(HiddenCase((pair.clone(), m, theta), (pair, m, theta),
                                f"m = {m}, theta = {theta:.3g}"))
    return cases


def _to_half_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for n_heads, d_h, d_in in ((2, 8, 6), (3, 16, 12), (1, 8, 5)):
        w = torch.randn(n_heads * d_h, d_in, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((w.clone(), n_heads), (w, n_heads),
                                f"{n_heads} heads of width {d_h}, d_in = {d_in}"))
    return cases


def _relative_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    ar = torch.arange
    # (d_h, query positions, key positions): square as in the worked cell; a cache step; one
    # query; positions far from 0; two heads' widths the lab does not use.
    for d_h, q_pos, k_pos in ((8, ar(5), ar(5)), (16, ar(9, 12), ar(12)), (2, ar(20, 21), ar(21)),
                              (64, ar(1000, 1003), ar(990, 1003)), (4, ar(3, 7), ar(2, 9))):
        q, k = torch.randn(2, d_h, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((q.clone(), k.clone(), q_pos.clone(), k_pos.clone()),
                                (q, k, q_pos, k_pos),
                                f"d_h = {d_h}, queries at {q_pos[0].item()} .. "
                                f"{q_pos[-1].item()}, keys at {k_pos[0].item()} .. "
                                f"{k_pos[-1].item()}"))
    return cases


def _slope_cases(g: torch.Generator) -> list[HiddenCase]:
    return [HiddenCase((h,), (h,), f"h = {h}") for h in (1, 2, 3, 5, 8, 12, 16, 24)]


# The library's (and the lab's) callables that would do an exercise's work. Each is matched by
# the name the code uses and by the function's own name, so an import under another name is
# caught; names with a leading underscore are private helpers, caught but not listed.
GRADED = {
    "check_rotate_pair": FunctionExercise("rotate_pair", check_rotate_pair, _rotate_cases,
                                          forbidden=("apply_rope", "rope_v1",
                                                     "_turn")),
    "check_relative_scores": FunctionExercise("rope_scores", check_relative_scores,
                                              _relative_cases,
                                              forbidden=("score_by_distance", "draw_rope_view")),
    "check_to_half": FunctionExercise("interleaved_to_half", check_to_half, _to_half_cases,
                                      forbidden=("layout_permutation",)),
    "check_alibi_slopes": FunctionExercise("head_slopes", check_alibi_slopes, _slope_cases,
                                           forbidden=("alibi_slopes", "alibi_bias",
                                                      "alibi_bias_from_positions",
                                                      "alibi_score_mod", "_slopes")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
