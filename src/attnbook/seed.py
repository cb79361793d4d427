"""The original module the book starts from (the "seed"), kept as a reference.

Its code lines are the original's, re-indented (the copy we received had lost its indentation);
its long banner comments are cut. Use :class:`attnbook.Attention` for real work: this one
returns NaN for a query that sees only padding, and checks no input. The book uses it to
reproduce that flaw and to save checkpoints the final module must load.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class Attention(nn.Module):
    """The original single-head causal self-attention, unchanged. (B, T, d_model) -> same."""

    def __init__(self, d_model: int, context_length: int,):
        super().__init__()
        self.query = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False,
        )
        self.key = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False,
        )
        self.value = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False,
        )
        self.register_buffer(
            "mask",
            torch.triu(
                torch.ones(
                    context_length,
                    context_length,
                    dtype=torch.bool,
                ),
                diagonal=1,
            ),
        )

    def forward(self,
                x: torch.Tensor,
                padding_mask: torch.Tensor | None = None,
                ) -> torch.Tensor:
        """padding_mask: (B, T) bool, True -> real token, False -> padding."""
        Q = self.query(x)
        K = self.key(x)
        V = self.value(x)
        scores = Q @ K.transpose(-2, -1)
        scores = scores / math.sqrt(Q.size(-1))
        context_length = scores.size(-1)
        scores = scores.masked_fill(
            self.mask[:context_length, :context_length],
            float("-inf"),
        )
        if padding_mask is not None:
            scores = scores.masked_fill(
                ~padding_mask[:, None, :],
                float("-inf"),
            )
        attention = torch.softmax(
            scores,
            dim=-1,
        )
        output = attention @ V
        return output


SeedAttention = Attention
