"""Checks for the lab "From one head to many"."""

from __future__ import annotations

import math

import torch

from . import Feedback, check_tensor


def check_split_heads(answer, x: torch.Tensor, n_heads: int) -> Feedback:
    """Exercise: cut (B, T, d) into h heads of contiguous width d_h, as (B, h, T, d_h).

    Shape:
        x: (B, T, d); answer: (B, h, T, d_h)
    """
    B, T, d = x.shape
    d_h = d // n_heads
    mistakes = {
        "a direct .view(B, h, T, d_h), which mixes tokens and heads: view as (B, T, h, d_h) "
        "first, then .transpose(1, 2)": x.reshape(B, n_heads, T, d_h),
        "(B, T, h, d_h): the head dimension must come before the tokens (.transpose(1, 2))":
            x.view(B, T, n_heads, d_h),
        "heads that take every h-th feature (view(B, T, d_h, h)); each head gets a contiguous "
        "slice of d_h features": x.view(B, T, d_h, n_heads).permute(0, 3, 1, 2),
    }
    expected = x.view(B, T, n_heads, d_h).transpose(1, 2)
    return check_tensor(answer, expected, mistakes, name="the split tensor")


def check_head_scores(answer, q: torch.Tensor, k: torch.Tensor, n_heads: int) -> Feedback:
    """Exercise: every head's scaled scores Q_i K_i^T / sqrt(d_h), before masking.

    Shape:
        q, k: (B, T, d); answer: (B, h, T, T)
    """
    B, T, d = q.shape
    d_h = d // n_heads
    qh = q.view(B, T, n_heads, d_h).transpose(1, 2)  # (B, h, T, d_h)
    kh = k.view(B, T, n_heads, d_h).transpose(1, 2)  # (B, h, T, d_h)
    raw = qh @ kh.transpose(-2, -1)  # (B, h, T, T)
    mistakes = {
        "scores divided by sqrt(d_model); each head's dot products have only d_h terms, "
        "so divide by sqrt(d_h)": raw / math.sqrt(d),
        "unscaled scores: divide by sqrt(d_h)": raw,
        "scores divided by d_h, not sqrt(d_h)": raw / d_h,
        "transposed scores (K Q^T): rows must be queries, columns keys":
            raw.transpose(-2, -1) / math.sqrt(d_h),
    }
    return check_tensor(answer, raw / math.sqrt(d_h), mistakes, name="the score tensor")


def check_parameter_count(answer, d_model: int, n_heads: int) -> Feedback:
    """Exercise: learned parameters of MultiHeadAttention(d_model, ..., n_heads) (no biases)."""
    d, h = d_model, n_heads
    d_h = d // h
    mistakes = {
        "3 d^2: you forgot the output projection W_o": torch.tensor(3 * d * d),
        "4 h d^2: the heads share W_q, W_k, W_v (each owns d_h of their d columns), they do "
        "not get d x d matrices each": torch.tensor(4 * h * d * d),
        "4 d d_h: that is one head's share; there are h of them": torch.tensor(4 * d * d_h),
        "3 h d_h^2 + d^2: a head's slice of W_q is d x d_h (it reads all d input features), "
        "not d_h x d_h": torch.tensor(3 * h * d_h * d_h + d * d),
    }
    return check_tensor(answer, torch.tensor(4 * d * d), mistakes, name="the parameter count",
                        atol=0, rtol=0)
