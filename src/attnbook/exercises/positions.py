"""Checks for the lab "Rotary positions and ALiBi" (chapter 20)."""

from __future__ import annotations

import math

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor


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
    }
    return check_tensor(answer, _rotate(x, angle), mistakes, name="the rotated pair")


def _relative_scores(q: torch.Tensor, k: torch.Tensor, T: int, base: float,
                     layout: str = "half", rotate_q: bool = True,
                     rotate_k: bool = True) -> torch.Tensor:
    """S[m, n] = <R_m q, R_n k> for m, n < T: (d_h,), (d_h,) -> (T, T)."""
    from ..positions import apply_rope

    pos = torch.arange(T)
    Q = q.expand(T, -1)  # (T, d_h): the same query at every position
    K = k.expand(T, -1)  # (T, d_h)
    if rotate_q:
        Q = apply_rope(Q, pos, base=base, layout=layout)
    if rotate_k:
        K = apply_rope(K, pos, base=base, layout=layout)
    return Q @ K.T  # (T, T)


def check_relative_scores(answer, q: torch.Tensor, k: torch.Tensor, T: int,
                          base: float = 10000.0) -> Feedback:
    """Exercise: S[m, n] = <R_m q, R_n k>, the score of the query q placed at position m against
    the key k placed at position n, with the half layout (``apply_rope``'s default).

    Shape:
        q, k: (d_h,); answer: (T, T)
    """
    q = torch.as_tensor(q).detach().double().cpu()
    k = torch.as_tensor(k).detach().double().cpu()
    right = _relative_scores(q, k, T, base)
    mistakes = {
        "no rotation at all: q·k in every entry": _relative_scores(q, k, T, base, rotate_q=False,
                                                                   rotate_k=False),
        "only the query rotated: rotate k by its own position n too":
            _relative_scores(q, k, T, base, rotate_k=False),
        "only the key rotated: rotate q by its own position m too":
            _relative_scores(q, k, T, base, rotate_q=False),
        "the transpose: rows are the query's position m, columns the key's n": right.T,
        "the interleaved layout: this exercise uses apply_rope's default, layout='half'":
            _relative_scores(q, k, T, base, layout="interleaved"),
        "the scores divided by sqrt(d_h): here S is the plain dot product":
            right / math.sqrt(q.numel()),
    }
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
    }
    if d_in % 2 == 0:
        mistakes["the columns (input features) reordered instead of the rows (the output "
                 "features that RoPE rotates)"] = w[:, layout_permutation(d_in)]
    return check_tensor(answer, _half_from_interleaved(w, n_heads), mistakes,
                        name="the converted weight", atol=1e-6)


def check_alibi_slopes(answer, h: int) -> Feedback:
    """Exercise: ALiBi's slopes for ``h`` heads, a power of two: m_i = 2^(-8 i / h), i = 1 .. h.

    Shape:
        answer: (h,)
    """
    i = torch.arange(1, h + 1, dtype=torch.float64)
    right = 2.0 ** (-8 * i / h)
    mistakes = {
        "i counted from 0: the first head's slope would be 1, and the last head misses "
        "2^(-8)": 2.0 ** (-8 * (i - 1) / h),
        "2^(-i/h) without the 8: the slopes span only a factor 2": 2.0 ** (-i / h),
        "the slopes in reverse order: head 1 has the steepest, 2^(-8/h)": right.flip(0),
        "2^(-8/i): the exponent is -8 i / h, linear in i": 2.0 ** (-8 / i),
    }
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


GRADED = {
    "check_rotate_pair": FunctionExercise("rotate_pair", check_rotate_pair, _rotate_cases,
                                          forbidden=("apply_rope", "rotate_half",
                                                     "rope_frequencies")),
    "check_to_half": FunctionExercise("interleaved_to_half", check_to_half, _to_half_cases,
                                      forbidden=("layout_permutation",)),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""
