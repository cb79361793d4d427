"""Checks for the lab "Scaling by √d"."""

from __future__ import annotations

import math

import torch

from . import Feedback, check_tensor, same_values


def check_scaled_scores(answer, q: torch.Tensor, k: torch.Tensor) -> Feedback:
    """Exercise: per-head scores divided by the square root of the head width.

    ``q`` and ``k`` are one sequence split into heads, so the model width is
    ``d_model = h * d_h``; the right divisor is ``sqrt(d_h)``, the width of q and k.
    A single head, (T, d), works too (then there is no model-width mistake to detect).

    Shape:
        q, k: (h, T, d_h) or (B, h, T, d_h) or (T, d); answer: (..., T, T)
    """
    q, k = q.detach().double().cpu(), k.detach().double().cpu()
    d_h, T = q.size(-1), q.size(-2)
    raw = q @ k.transpose(-2, -1)  # (..., T, T)
    mistakes = {
        "you forgot to scale: these are the raw dot products q·k": raw,
        f"you divided by d = {d_h}, not by √d": raw / d_h,
        "you multiplied by √d instead of dividing": raw * math.sqrt(d_h),
        "your scores are transposed: row i should be query i (q @ kᵀ, not k @ qᵀ)":
            raw.transpose(-2, -1) / math.sqrt(d_h),
    }
    if q.dim() >= 3:
        d_model = q.size(-3) * d_h
        mistakes[f"you scaled by √d_model = √{d_model} instead of the head width √d_h = √{d_h}"
                 ] = raw / math.sqrt(d_model)
        mistakes[f"you divided by d_model = {d_model}, not by √d_h = √{d_h}"] = raw / d_model
    mistakes[f"you divided by √T (the number of tokens, {T}), not by √d"] = raw / math.sqrt(T)
    return check_tensor(answer, raw / math.sqrt(d_h), mistakes, name="your score matrix")


def check_dot_variance(answer, q: torch.Tensor, k: torch.Tensor) -> Feedback:
    """Exercise: the empirical variance of the dot products q_i · k_i over n pairs.

    PyTorch's ``.var()`` (dividing by n - 1) is expected; the population variance (dividing
    by n) is accepted too.

    Shape:
        q, k: (n, d); answer: () (a scalar)
    """
    q, k = q.detach().double().cpu(), k.detach().double().cpu()
    d = q.size(-1)
    dots = (q * k).sum(dim=-1)  # (n,)
    expected = dots.var()
    name = "your variance"
    if answer is not None and answer is not Ellipsis:
        try:
            population = torch.as_tensor(answer).detach().cpu()
            if same_values(population, dots.var(correction=0), atol=1e-4, rtol=1e-4):
                return Feedback(True, "Correct: your variance matches (you divided by n, not "
                                      "n - 1; with this many pairs the difference is tiny).")
        except (TypeError, ValueError, RuntimeError):
            pass  # check_tensor reports what is wrong with it
    mistakes = {
        "the mean of q·k, not its variance": dots.mean(),
        "the standard deviation of q·k, not its variance": dots.std(),
        "the variance of the single products q_t·k_t (one term of the sum), not of the sum q·k":
            (q * k).var(),
        "the variance of the scaled scores q·k/√d (that is about 1); the exercise asks for the raw "
        "dot products": (dots / math.sqrt(d)).var(),
        "the variance of the entries of q, not of the dot products": q.var(),
    }
    return check_tensor(answer, expected, mistakes, name=name, atol=1e-4, rtol=1e-4)


def check_entropy(answer, scores: torch.Tensor) -> Feedback:
    """Exercise: the entropy (in nats) of the softmax weights of each row of scores.

    Shape:
        scores: (R, n) with R != n; answer: (R,)
    """
    scores = scores.detach().double().cpu()
    p = torch.softmax(scores, dim=-1)  # (R, n)
    plogp = p * p.log()  # (R, n); the weights of a softmax are never exactly 0 here
    expected = -plogp.sum(dim=-1)  # (R,)
    mistakes = {
        "the entropy in bits (log base 2): use the natural log, torch.log": expected / math.log(2),
        "the entropy without its minus sign (sum of p·log p is negative)": -expected,
        "-sum log p: you left out the weights p in front of the log": -p.log().sum(dim=-1),
        "log n, the entropy of uniform weights, whatever the scores":
            torch.full_like(expected, math.log(scores.size(-1))),
        "-log of the largest weight (the min-entropy), not the entropy": -p.amax(dim=-1).log(),
        "the softmax taken over the wrong dimension (over queries, dim 0, not keys, dim -1)":
            -(torch.softmax(scores, dim=0) * torch.log_softmax(scores, dim=0)).sum(dim=-1),
    }
    name = "your entropy vector"
    if isinstance(answer, torch.Tensor) and torch.isnan(answer).any():
        # The usual cause: log of a raw (possibly negative) score instead of a weight.
        return Feedback(False, f"Not yet: {name} contains NaN. Did you take the log of the raw "
                               "scores? Apply softmax first, then -sum p·log p.")
    return check_tensor(answer, expected, mistakes, name=name)
