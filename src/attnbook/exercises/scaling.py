"""Checks for the lab "Scaling by √d": per-head scores from unsplit queries and keys, the
variance of a score matrix, and the entropy of masked rows."""

from __future__ import annotations

import math
import warnings

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise, same_values


def _split(x: torch.Tensor, h: int) -> torch.Tensor:
    """(T, d_model) -> (h, T, d_h): head i is the block of columns i·d_h .. (i+1)·d_h - 1."""
    T, d_model = x.shape
    return x.reshape(T, h, d_model // h).transpose(0, 1)


def check_scaled_scores(answer, q: torch.Tensor, k: torch.Tensor, h: int | None = None
                        ) -> Feedback:
    """Exercise: the scaled scores of every head, from queries and keys not yet split into heads.

    With ``h``, ``q`` is (T_q, d_model) and ``k`` is (T_k, d_model): head i takes columns
    i·d_h .. (i+1)·d_h - 1, d_h = d_model / h, and its scores are divided by √d_h. Without
    ``h`` (an older edition), ``q`` and ``k`` are already split, (h, T, d_h), (B, h, T, d_h) or
    one head (T, d), and the divisor is the width of their last dimension.

    Shape:
        q: (T_q, d_model), k: (T_k, d_model); answer: (h, T_q, T_k)
    """
    q, k = q.detach().double().cpu(), k.detach().double().cpu()
    if h is None:
        d_h, heads = q.size(-1), (q.size(-3) if q.dim() >= 3 else None)
        raw = q @ k.transpose(-2, -1)  # (..., T, T)
    else:
        d_h, heads = q.size(-1) // h, h
        raw = _split(q, h) @ _split(k, h).transpose(-2, -1)  # (h, T_q, T_k)
    T = q.size(-2)
    mistakes = {
        "you forgot to scale: these are the raw dot products q·k": raw,
        f"you divided by d = {d_h}, not by √d": raw / d_h,
        "you multiplied by √d instead of dividing": raw * math.sqrt(d_h),
        "your scores are transposed: row i should be query i (q @ kᵀ, not k @ qᵀ)":
            raw.transpose(-2, -1) / math.sqrt(d_h),
    }
    if heads is not None:
        d_model = heads * d_h
        mistakes[f"you scaled by √d_model = √{d_model} instead of the head width √d_h = √{d_h}"
                 ] = raw / math.sqrt(d_model)
        mistakes[f"you divided by d_model = {d_model}, not by √d_h = √{d_h}"] = raw / d_model
    mistakes[f"you divided by √T (the number of tokens, {T}), not by √d"] = raw / math.sqrt(T)
    if h is not None:
        whole = q @ k.T  # (T_q, T_k): one head over every column
        shuffled = (q.reshape(h, T, d_h) @ k.reshape(h, k.size(0), d_h).transpose(-2, -1)
                    if h > 1 else raw)
        strided = (q.reshape(T, d_h, h).permute(2, 0, 1)
                   @ k.reshape(k.size(0), d_h, h).permute(2, 0, 1).transpose(-2, -1)
                   if h > 1 and d_h > 1 else raw)
        mistakes.update({
            f"one head over the whole width (shape (T_q, T_k), divided by √d_model): split q "
            f"and k into h = {h} heads of d_h = {d_h} columns first":
                whole / math.sqrt(q.size(-1)),
            f"one head over the whole width, divided by √d_h: split q and k into h = {h} heads "
            f"of d_h = {d_h} columns first, one (T_q, T_k) score matrix per head":
                whole / math.sqrt(d_h),
            "the heads mixed with the tokens: reshaping (T, d_model) straight to (h, T, d_h) "
            "cuts the rows, not the columns. Split the last dimension, "
            "reshape(T, h, d_h), then move the head dimension first (transpose(0, 1))":
                shuffled / math.sqrt(d_h),
            "heads taken as every h-th column (reshape(T, d_h, h)): head i is the contiguous "
            "block of columns i·d_h .. (i+1)·d_h - 1, so reshape(T, h, d_h)":
                strided / math.sqrt(d_h),
        })
    return check_tensor(answer, raw / math.sqrt(d_h), mistakes, name="your score matrix")


def check_dot_variance(answer, q: torch.Tensor, k: torch.Tensor) -> Feedback:
    """Exercise: the empirical variance of all the scores q_i · k_j of n queries and m keys (every
    entry of q kᵀ), measured on these q and k, not the theorem's prediction.

    PyTorch's ``.var()`` (dividing by N - 1 for N = n·m scores) is expected; the population
    variance (dividing by N) is accepted too.

    Shape:
        q: (n, d), k: (m, d) with n·m >= 2; answer: () (a scalar)
    """
    q, k = q.detach().double().cpu(), k.detach().double().cpu()
    d = q.size(-1)
    scores = q @ k.T  # (n, m): every q_i · k_j
    expected = scores.var()
    name = "your variance"
    if answer is not None and answer is not Ellipsis:
        try:
            population = torch.as_tensor(answer).detach().cpu()
            if (same_values(population, scores.var(correction=0), atol=1e-4, rtol=1e-4)
                    and not same_values(population, expected, atol=1e-4, rtol=1e-4)):
                return Feedback(True, "Correct: your variance matches (you divided by N, not "
                                      "N - 1: the population variance, accepted too).")
        except (TypeError, ValueError, RuntimeError):
            pass  # check_tensor reports what is wrong with it
    pairs = min(q.size(0), k.size(0))
    dots = (q[:pairs] * k[:pairs]).sum(dim=-1)  # (pairs,): q_i · k_i only
    with warnings.catch_warnings():  # a variance of one number is NaN: that mistake never fits
        warnings.simplefilter("ignore")
        mistakes = {
            "the mean of the scores, not their variance": scores.mean(),
            "the standard deviation of the scores, not their variance": scores.std(),
            "the theorem's prediction d, not the variance measured on these q and k (the hidden "
            "inputs need not have entries of variance 1)": torch.tensor(float(d)),
            "the theorem's prediction d·Var(q)·Var(k), not the variance measured on these q and k":
                d * q.var() * k.var(),
            "the variance of the scaled scores q·k/√d; the exercise asks for the raw scores":
                (scores / math.sqrt(d)).var(),
            "the variance of the single products q_i,c·k_j,c (one term of each sum), not of the "
            "sums q_i·k_j: sum over the width first (a matrix product)":
                (q[:, None, :] * k[None, :, :]).var(),
            "the variance of each query's row of scores (var(dim=-1)); the exercise asks for one "
            "number over all n·m scores": scores.var(dim=-1),
            "the variance of each key's column of scores (var(dim=0)); the exercise asks for one "
            "number over all n·m scores": scores.var(dim=0),
            "the variance of the paired dot products q_i·k_i only (as in the lab's draft): every "
            "query meets every key in q kᵀ, so use all n·m scores": dots.var(),
            "the variance of the entries of q, not of the scores": q.var(),
        }
    return check_tensor(answer, expected, mistakes, name=name, atol=1e-4, rtol=1e-4)


def check_entropy(answer, scores: torch.Tensor) -> Feedback:
    """Exercise: the entropy (in nats) of the softmax weights of each row of scores, where some
    scores may be -inf (masked keys, weight 0, contributing 0 · log 0 = 0).

    Shape:
        scores: (R, n), every row with at least one finite score; answer: (R,)
    """
    scores = scores.detach().double().cpu()
    p = torch.softmax(scores, dim=-1)  # (R, n); exactly 0 at a masked key
    expected = -torch.xlogy(p, p).sum(dim=-1)  # (R,): 0 · log 0 counts as 0
    visible = torch.isfinite(scores).sum(dim=-1)  # (R,): keys each row sees
    mistakes = {
        "the entropy in bits (log base 2): use the natural log, torch.log": expected / math.log(2),
        "the entropy without its minus sign (sum of p·log p is negative)": -expected,
        "-sum log p: you left out the weights p in front of the log": -p.log().sum(dim=-1),
        "log n, the entropy of uniform weights over all n keys, whatever the scores":
            torch.full_like(expected, math.log(scores.size(-1))),
        "log of the number of visible keys, the entropy of uniform weights, whatever the scores":
            visible.double().log(),
        "-log of the largest weight (the min-entropy), not the entropy": -p.amax(dim=-1).log(),
        "the softmax taken over the wrong dimension (over queries, dim 0, not keys, dim -1)":
            -torch.xlogy(torch.softmax(scores, dim=0), torch.softmax(scores, dim=0)).sum(dim=-1),
    }
    if not torch.isfinite(scores).all():
        unmasked = torch.softmax(scores.nan_to_num(neginf=0.0), dim=-1)
        mistakes["the entropy with the masked keys counted (their -inf replaced by 0 before the "
                 "softmax): keep the -inf, so that a masked key gets weight 0"
                 ] = -torch.xlogy(unmasked, unmasked).sum(dim=-1)
    name = "your entropy vector"
    if isinstance(answer, torch.Tensor) and answer.shape == expected.shape and torch.isnan(
            answer).any():
        a = answer.detach().cpu().double()
        zero = (p == 0).any(dim=-1)  # (R,): rows with a weight of exactly 0
        nan = torch.isnan(a)
        if nan.any() and (nan <= zero).all() and torch.allclose(a[~nan], expected[~nan],
                                                                atol=1e-4, rtol=1e-4):
            return Feedback(False, f"Not yet: {name} is NaN in each row with a weight of "
                                   "exactly 0 (a masked key) and right elsewhere: p·log p "
                                   "there is 0 · (-inf) = NaN, but its limit is 0. Count it as "
                                   "0: torch.xlogy(p, p), or torch.where(p > 0, p * p.log(), "
                                   "0).")
        # The other usual cause: log of a raw (possibly negative) score instead of a weight.
        return Feedback(False, f"Not yet: {name} contains NaN. Did you take the log of the raw "
                               "scores? Apply softmax first, then -sum p·log p.")
    return check_tensor(answer, expected, mistakes, name=name)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _heads_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # (T_q, T_k, h, d_h): one head; one token; d_h = 1; cross-attention lengths; many heads.
    for Tq, Tk, h, d_h in ((4, 4, 1, 8), (1, 1, 2, 4), (3, 5, 6, 1), (7, 2, 3, 5),
                           (9, 9, 8, 16)):
        q = torch.randn(Tq, h * d_h, generator=g, dtype=torch.float64)
        k = torch.randn(Tk, h * d_h, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((q.clone(), k.clone(), h), (q, k, h),
                                f"q ({Tq}, {h * d_h}), k ({Tk}, {h * d_h}), h = {h}"))
    return cases


def _variance_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # (n, m, d, std of q, std of k, mean of k): two scores only; one query; widths 1 to 64;
    # entries of variance other than 1 and a nonzero mean, so the theorem's d is not the answer.
    for n, m, d, sq, sk, mean in ((2, 1, 1, 1.0, 1.0, 0.0), (1, 9, 8, 1.0, 1.0, 0.0),
                                  (5, 7, 3, 2.0, 0.5, 0.0), (30, 40, 64, 1.0, 1.0, 0.0),
                                  (6, 6, 16, 3.0, 1.0, 1.5)):
        q = sq * torch.randn(n, d, generator=g, dtype=torch.float64)
        k = mean + sk * torch.randn(m, d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((q.clone(), k.clone()), (q, k),
                                f"q ({n}, {d}), k ({m}, {d})"))
    return cases


def _entropy_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    inf = float("-inf")
    # (R, n, scale, how many keys each row sees): no mask; one row; one key; a causal pattern;
    # scores so far apart that some weights are exactly 0 without a mask; equal scores.
    for R, n, scale, seen in ((3, 5, 1.0, None), (1, 1, 1.0, None), (4, 4, 2.0, "causal"),
                              (2, 6, 800.0, None), (5, 7, 3.0, "random"), (2, 3, 0.0, None)):
        s = scale * torch.randn(R, n, generator=g, dtype=torch.float64)
        if seen == "causal":
            s = s.masked_fill(torch.ones(R, n, dtype=torch.bool).triu(1), inf)
        elif seen == "random":
            keep = 1 + torch.randint(n, (R, 1), generator=g)  # (R, 1): 1 .. n visible keys
            s = s.masked_fill(torch.arange(n) >= keep, inf)
        cases.append(HiddenCase((s.clone(),), (s,), f"scores of shape ({R}, {n})"
                                + (f", {seen} mask" if seen else "")))
    return cases


GRADED = {
    # The library scales and splits; the exercises ask for the head split, the scores and the
    # entropy themselves.
    "check_scaled_scores": FunctionExercise(
        "head_scores", check_scaled_scores, _heads_cases,
        forbidden=("scale_scores", "attention_scores", "split_heads",
                   "scaled_dot_product_attention")),
    "check_dot_variance": FunctionExercise(
        "score_variance", check_dot_variance, _variance_cases,
        forbidden=("dot_products", "variance_sweep", "attention_scores")),
    "check_entropy": FunctionExercise(
        "row_entropy", check_entropy, _entropy_cases,
        forbidden=("entropy", "Categorical")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
