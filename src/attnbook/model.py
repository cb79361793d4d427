"""A tiny decoder-only model built from attnbook's attention: embeddings, blocks, a readout.

Token embedding + position embedding -> ``n_layers`` blocks -> LayerNorm -> linear readout to
one logit per vocabulary entry. Each block is pre-norm: x + attn(norm(x)), then
x + mlp(norm(x)). Residuals let a layer add to what the layers before it wrote instead of
replacing it; the norms keep each layer's input at a steady scale; the MLP gives each token a
non-linear map of what its heads gathered.

Shape legend: B batch, T tokens, d model width, h heads, V vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .multihead import MultiHeadAttention


@dataclass
class TinyConfig:
    """Sizes and switches of :class:`TinyModel`.

    Attributes:
        vocab_size: number of token ids V.
        context_length: longest sequence T the model reads.
        d_model: width d of every token vector.
        n_heads: heads per attention layer (must divide d_model).
        n_layers: number of blocks.
        mlp: give each block an MLP (d -> 4d -> d) after its attention.
        positions: add learned position embeddings (without them the model cannot tell order).
    """

    vocab_size: int
    context_length: int
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    mlp: bool = True
    positions: bool = True


class Block(nn.Module):
    """One pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)).

    Shape:
        x: (B, T, d) -> (B, T, d), and the attention weights (B, h, T, T)
    """

    def __init__(self, config: TinyConfig):
        super().__init__()
        d = config.d_model
        self.norm1 = nn.LayerNorm(d)
        self.attn = MultiHeadAttention(d, config.context_length, config.n_heads)
        self.mlp = None
        if config.mlp:
            self.norm2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, weights = self.attn(self.norm1(x), return_weights=True)  # (B, T, d), (B, h, T, T)
        x = x + a  # the residual: attention adds to the token's vector
        if self.mlp is not None:
            x = x + self.mlp(self.norm2(x))  # (B, T, d)
        return x, weights


class TinyModel(nn.Module):
    """A small causal language model over token ids.

    Args:
        config: the sizes; see :class:`TinyConfig`.

    Shape:
        idx: (B, T) token ids -> logits (B, T, V); with ``return_weights=True`` also one
        (B, h, T, T) tensor of attention weights per layer.
    """

    def __init__(self, config: TinyConfig):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = None
        if config.positions:
            self.positions = nn.Embedding(config.context_length, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.readout = nn.Linear(config.d_model, config.vocab_size)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token vector plus the vector of its position: (B, T) -> (B, T, d)."""
        x = self.tokens(idx)  # (B, T, d)
        if self.positions is not None:
            T = idx.size(1)
            x = x + self.positions(torch.arange(T, device=idx.device))  # (T, d) broadcasts
        return x

    def forward(self, idx: torch.Tensor, *, return_weights: bool = False):
        """Next-token logits for every position.

        Args:
            idx: token ids.
            return_weights: also return each layer's attention weights.

        Returns:
            ``logits`` (B, T, V), and with ``return_weights=True`` a list of ``n_layers``
            tensors of shape (B, h, T, T).
        """
        x = self.embed(idx)  # (B, T, d)
        weights = []
        for block in self.blocks:
            x, w = block(x)  # (B, T, d), (B, h, T, T)
            weights.append(w)
        logits = self.readout(self.norm(x))  # (B, T, V)
        return (logits, weights) if return_weights else logits

    def num_parameters(self) -> int:
        """Number of trained parameters (the causal masks are buffers, not counted)."""
        return sum(p.numel() for p in self.parameters())
