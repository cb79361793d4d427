"""Checks for the lab "The whole module at a glance"."""

from __future__ import annotations

import torch

from . import Feedback, check_tensor


def check_output_row(answer, weights: torch.Tensor, v: torch.Tensor, x: torch.Tensor,
                     i: int) -> Feedback:
    """Exercise: output of query ``i`` is row ``i`` of the weights times the values.

    Shape:
        weights: (T, T), v: (T, d), x: (T, d); answer: (d,)
    """
    mistakes = {
        "column i of the weights (who attends to token i), not row i (whom token i attends to)":
            weights[:, i] @ v,
        "a mix of the inputs x instead of the values v": weights[i] @ x,
        "the value vector of token i alone, without the weights": v[i],
        "an unweighted average of every value vector": v.mean(dim=0),
    }
    return check_tensor(answer, weights[i] @ v, mistakes, name=f"output row {i}")
