"""Checks for the lab "Scores" (step 2: every query against every key)."""

from __future__ import annotations

import math

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _t(a: torch.Tensor) -> torch.Tensor:
    """Swap the last two dimensions (works batched, unlike ``.T`` on a 3-D tensor)."""
    return a.transpose(-2, -1)


def check_scores(answer, q: torch.Tensor, k: torch.Tensor) -> Feedback:
    """Exercise: the raw scores S = Q Kᵀ of a batch stored sequence first, as
    ``nn.MultiheadAttention`` stores it by default: ``S[b, i, j] = q[i, b] · k[j, b]``.

    Args:
        answer: the learner's scores, batch first.
        q: queries, one row per token and sequence, sequence first.
        k: keys, in the same layout.

    Shape:
        q, k: (T, B, d); answer: (B, T, T)
    """
    q, k = q.detach().cpu(), k.detach().cpu()
    if q.dim() != 3:
        return Feedback(False, f"Not yet: the check needs q and k of shape (T, B, d), got "
                               f"{tuple(q.shape)}.")
    qb, kb = q.transpose(0, 1), k.transpose(0, 1)  # (B, T, d): batch first
    s = qb @ _t(kb)  # (B, T, T)
    d = q.size(-1)
    mistakes = {
        "q @ k.transpose(-2, -1) on the sequence-first tensors, shape (T, B, B): that scores "
        "the sequences of the batch against each other at each position. Move the batch "
        "first (transpose(0, 1)) before the product": q @ _t(k),
        "the scores with the batch in the middle, (T, B, T): return them batch first, "
        "(B, T, T)": s.transpose(0, 1),
        "K Qᵀ: your scores are transposed; row i must hold query i against every key, "
        "scores[b, i, j] = q_i · k_j": _t(s),
        "scores already divided by sqrt(d): scaling is step 3; here we want the raw dot "
        "products": s / math.sqrt(d),
        "scores divided by d: scaling is step 3 (and uses sqrt(d)); here we want the raw dot "
        "products": s / d,
        "the elementwise product q * k, shape (T, B, d): a dot product multiplies and then "
        "sums over d, and every query must meet every key": q * k,
        "the diagonal alone, (q * k).sum(-1): only q_i · k_i, each query against its own key; "
        "the scores pair every query with every key": (q * k).sum(-1),
        "Qᵀ K, shape (B, d, d): the transpose belongs on K, Q @ Kᵀ, giving (B, T, T)":
            _t(qb) @ kb,
        "Q Qᵀ: the queries against themselves; the second factor is the keys": qb @ _t(qb),
        "K Kᵀ: the keys against themselves; the first factor is the queries": kb @ _t(kb),
    }
    if q.size(-1) == k.size(0):  # only then does q @ k run on the batch-first tensors
        mistakes["q @ k: you forgot to transpose the keys; use q @ k.transpose(-2, -1) on the "
                 "batch-first tensors"] = qb @ kb
    return check_tensor(answer, s, mistakes, name="scores")


def check_last_scores(answer, q: torch.Tensor, k: torch.Tensor, n: int) -> Feedback:
    """Exercise: the scores of the last ``n`` tokens, as one KV-cache step computes them: their
    ``n`` queries against every key, the cached ones included.

    Shape:
        q, k: (T, d); answer: (n, T)
    """
    q, k = q.detach().cpu(), k.detach().cpu()
    T = q.size(0)
    s = q @ k.T  # (T, T)
    expected = s[T - n:]  # (n, T)
    mistakes = {
        "the first n rows (the first tokens' queries): the new tokens are the last n, "
        "q[-n:] or q[T - n:]": s[:n],
        "the transpose, every key against the last n queries, (T, n): row i must be query i, "
        "k @ q[-n:].T is its transpose": expected.T,
        "every query against the last n keys, (T, n): the last n queries meet every key":
            s[:, T - n:],
        "the new tokens' keys only, (n, n): a new query sees the cached keys too, so it "
        "meets all T keys": s[T - n:, T - n:],
        "the whole table, (T, T): keep the rows of the last n queries": s,
        "the rows already divided by sqrt(d): scaling is step 3":
            expected / math.sqrt(q.size(-1)),
    }
    if n < T:
        mistakes["one row too many: the last n rows start at row T - n"] = s[T - n - 1:]
    if n > 1:
        mistakes["one row too few: the last n rows start at row T - n"] = s[T - n + 1:]
        mistakes["query T - n alone, one row: take every row from T - n on"] = s[T - n]
    if 0 < T - n != n:
        mistakes["the rows from n on, q[n:]: the last n rows are q[-n:], or q[T - n:]"] = s[n:]
    return check_tensor(answer, expected, mistakes, name="the block of the last rows")


def check_cosines(answer, q: torch.Tensor, k: torch.Tensor) -> Feedback:
    """Exercise: cos θ between every query and every key, ``s_ij / (|q_i| |k_j|)``; the numbers
    of queries and keys may differ.

    Shape:
        q: (T_q, d), k: (T_k, d); answer: (T_q, T_k)
    """
    q, k = q.detach().cpu(), k.detach().cpu()
    s = q @ _t(k)  # (T_q, T_k)
    nq = q.norm(dim=-1, keepdim=True)  # (T_q, 1): |q_i| for row i
    nk = k.norm(dim=-1, keepdim=True)  # (T_k, 1): |k_j|, needed along columns
    expected = s / (nq * _t(nk))
    mistakes = {
        "the raw scores: divide each s_ij by |q_i| |k_j|": s,
        "scores divided by |q_i| only: each column j also needs a division by |k_j|": s / nq,
        "scores divided by |k_j| only: each row i also needs a division by |q_i|": s / _t(nk),
        "scores divided by the norms of the whole matrices |Q| |K|: divide by the norm of each "
        "vector": s / (q.norm() * k.norm()),
        "cosines transposed: row i must be query i": _t(expected),
        "scores divided by the squared lengths |q_i|² |k_j|²: divide by the lengths, the "
        "norms themselves": s / (nq**2 * _t(nk) ** 2),
    }
    if q.size(0) == k.size(0):  # these only broadcast when T_q == T_k
        mistakes["the query norms used along columns and the key norms along rows "
                 "(s / (|k_i| |q_j|)): row i divides by |q_i|, column j by |k_j|"] = (
            s / (nk * _t(nq)))
        mistakes["the norms taken without keepdim=True: a (T,) vector divides the columns, so "
                 "entry (i, j) was divided by |q_j| |k_j|. Keep |q_i| as a column, (T, 1)"] = (
            s / (_t(nq) * _t(nk)))
    return check_tensor(answer, expected, mistakes, name="cosines")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _scores_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # One token; one sequence; T = B = d, where the wrong transposes run silently; a batch of
    # 3 long sequences; values far from 1.
    for T, B, d, spread in ((1, 1, 3, 1.0), (7, 1, 2, 1.0), (4, 4, 4, 1.0), (16, 3, 8, 1.0),
                            (5, 2, 6, 30.0)):
        q = spread * torch.randn(T, B, d, generator=g, dtype=torch.float64)
        k = torch.randn(T, B, d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((q.clone(), k.clone()), (q, k),
                                f"q and k of shape ({T}, {B}, {d}), sequence first"))
    return cases


def _last_scores_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # n = 1 (one decoding step), n = T (the prompt), T = 1, n > T / 2, a long cache.
    for T, d, n in ((1, 4, 1), (6, 3, 1), (5, 2, 5), (8, 16, 5), (20, 8, 3)):
        q = torch.randn(T, d, generator=g, dtype=torch.float64)
        k = torch.randn(T, d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((q.clone(), k.clone(), n), (q, k, n),
                                f"q and k of shape ({T}, {d}), n = {n}"))
    return cases


def _cosines_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # Fewer queries than keys, more, one of each, square, and lengths far from 1.
    for Tq, Tk, d, spread in ((2, 7, 4, 1.0), (9, 3, 5, 1.0), (1, 1, 2, 1.0), (6, 6, 8, 1.0),
                              (4, 5, 3, 50.0)):
        q = spread * torch.randn(Tq, d, generator=g, dtype=torch.float64)
        k = torch.randn(Tk, d, generator=g, dtype=torch.float64) / spread
        cases.append(HiddenCase((q.clone(), k.clone()), (q, k),
                                f"q of shape ({Tq}, {d}), k of shape ({Tk}, {d})"))
    return cases


# The library's step 2 and the lab's drafts of it compute the scores for the learner.
_SCORES = ("attention_scores", "scores_v3", "scores_rows_v2", "scores_loops_v1")

GRADED = {
    "check_scores": FunctionExercise("batch_scores", check_scores, _scores_cases,
                                     forbidden=_SCORES),
    "check_last_scores": FunctionExercise("last_scores", check_last_scores, _last_scores_cases,
                                          forbidden=_SCORES),
    "check_cosines": FunctionExercise("cosines", check_cosines, _cosines_cases,
                                      forbidden=("cosine_similarity", "cosine")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
