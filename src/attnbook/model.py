"""A tiny decoder-only model built from attnbook's attention: embeddings, blocks, a readout.

Token embedding (+ a position table, for the learned and sinusoidal schemes) -> ``n_layers``
blocks (RoPE and ALiBi act inside each block's attention) -> LayerNorm -> linear readout to
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

from .kv_cache import KVCache, cached_attention
from .multihead import MultiHeadAttention
from .positions import (
    POSITION_SCHEMES,
    check_alibi_slopes,
    check_rotary_dim,
    check_scaling,
    sinusoidal_table,
)

ATTENTION_OPTIONS = ("bias", "head_dim", "scale", "score_mod", "window", "qk_norm",
                     "qk_norm_over", "sinks", "causal_buffer")
"""The keywords :attr:`TinyConfig.attention` may hand to every layer's attention."""


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
        position: where order enters (chapter 20), one of :data:`attnbook.positions.
            POSITION_SCHEMES`: ``"learned"`` (a trained table added to the token vectors,
            chapter 14; the default), ``"sinusoidal"`` (the fixed table of Vaswani et al.),
            ``"rope"`` (q and k rotated in every layer), ``"alibi"`` (a linear bias on every
            layer's scores) or ``"none"`` (one causal layer then sees only the multiset of
            earlier tokens; a stack can recover some order, chapter 14).
        positions: deprecated alias kept so older code runs unchanged: True means
            ``position="learned"``, False ``position="none"`` (it overrides ``position`` when
            that is one of these two, and refuses any other); it is None after construction.
        rope_base, rope_scaling: RoPE's base and its scaling for long sequences (see
            :func:`attnbook.positions.apply_rope`; a tuple or transformers' dict,
            ``{"rope_type": ...}``); each block's ``attn.rope_scaling`` may also be changed
            after training.
        rotary_dim: partial rotary (``position="rope"`` only): the first ``rotary_dim``
            features of each head turn, the rest pass unrotated (GPT-J's ``rotary_dim``;
            transformers' ``partial_rotary_factor`` f is rotary_dim = int(d_head * f)).
            None: all of them.
        alibi_slopes: ALiBi's slopes, one positive float per head (None: the paper's rule,
            :func:`attnbook.positions.alibi_slopes`); each block's ``attn.alibi_slopes`` may
            also be changed.
        fused: run attention on the fused path (chapter 11) unless weights are asked for.
        n_kv_heads: key/value heads per layer (grouped-query attention, chapter 13); None
            means one per query head.
        attention: more keywords for every layer's :class:`attnbook.MultiHeadAttention`, the
            options of current models (:data:`ATTENTION_OPTIONS`: ``bias``, ``head_dim``,
            ``scale``, ``score_mod``, ``window``, ``qk_norm``, ``qk_norm_over``, ``sinks``,
            ``causal_buffer``);
            None (the default) adds none, so the model and its initialisation are as before.
    """

    vocab_size: int
    context_length: int
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    mlp: bool = True
    positions: bool | None = None
    fused: bool = True
    n_kv_heads: int | None = None
    position: str = "learned"
    rope_base: float = 10000.0
    rope_scaling: tuple | dict | None = None
    alibi_slopes: tuple | None = None
    rotary_dim: int | None = None
    attention: dict | None = None

    def __post_init__(self) -> None:
        if self.attention is not None:
            unknown = sorted(set(self.attention) - set(ATTENTION_OPTIONS))
            if not isinstance(self.attention, dict) or unknown:
                raise ValueError(f"attention takes a dict of {ATTENTION_OPTIONS}, got "
                                 f"{self.attention!r}" + (f" (unknown {unknown})" if unknown
                                                          else ""))
        if self.positions is not None:  # the old flag: map it to the scheme it meant
            if not isinstance(self.positions, bool):
                raise ValueError(f"positions (deprecated; use position=) must be True or "
                                 f"False, got {self.positions!r}")
            if self.position not in ("learned", "none"):  # the two the flag can say
                raise ValueError(f"give position={self.position!r} alone: positions= is the "
                                 "deprecated flag for 'learned' (True) or 'none' (False)")
            self.position = "learned" if self.positions else "none"
            self.positions = None
        if self.position not in POSITION_SCHEMES:
            raise ValueError(f"position must be one of {POSITION_SCHEMES}, got "
                             f"{self.position!r}")
        check_scaling(self.rope_scaling)
        if self.alibi_slopes is not None:
            if isinstance(self.n_heads, bool) or not isinstance(self.n_heads, int) \
                    or self.n_heads < 1:
                raise ValueError(f"n_heads must be a positive integer, got {self.n_heads!r}")
            self.alibi_slopes = check_alibi_slopes(self.alibi_slopes, self.n_heads)
        for name in ("vocab_size", "context_length", "d_model", "n_heads", "n_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.rotary_dim is not None:
            if self.position != "rope":
                raise ValueError(f"rotary_dim={self.rotary_dim!r} turns features with RoPE: it "
                                 f"needs position='rope', got position={self.position!r}")
            if self.d_model % self.n_heads == 0:  # else MultiHeadAttention names the divisors
                check_rotary_dim(self.rotary_dim, self.d_model // self.n_heads)


class Block(nn.Module):
    """One pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)).

    Shape:
        x: (B, T, d) -> (B, T, d), and with ``return_weights=True`` the attention weights
        (B, h, T, T)
    """

    def __init__(self, config: TinyConfig):
        super().__init__()
        d = config.d_model
        self.norm1 = nn.LayerNorm(d)
        inside = config.position if config.position in ("rope", "alibi") else "none"
        self.attn = MultiHeadAttention(d, config.context_length, config.n_heads,
                                       fused=config.fused, n_kv_heads=config.n_kv_heads,
                                       position=inside, rope_base=config.rope_base,
                                       rope_scaling=config.rope_scaling,
                                       alibi_slopes=config.alibi_slopes,
                                       rotary_dim=config.rotary_dim,
                                       **(config.attention or {}))
        self.mlp = None
        if config.mlp:
            self.norm2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, *, return_weights: bool = False,
                cache: KVCache | None = None, positions: torch.Tensor | None = None):
        """One block; with ``cache``, ``x`` holds only the new tokens (:meth:`TinyModel.step`).

        ``positions`` go to the attention (RoPE, ALiBi), and with ``cache`` into the cache
        (:func:`attnbook.kv_cache.cached_attention`); None: 0 .. T - 1 (after the cached ones)."""
        weights = None
        if cache is not None:
            a = cached_attention(self.attn, self.norm1(x), cache, positions=positions)  # (B, t, d)
        elif return_weights:  # the weights exist only on the explicit path
            a, weights = self.attn(self.norm1(x), positions=positions,
                                   return_weights=True)  # (B, T, d), (B, h, T, T)
        else:
            a = self.attn(self.norm1(x), positions=positions)  # (B, T, d), fused by default
        x = x + a  # the residual: attention adds to the token's vector
        if self.mlp is not None:
            x = x + self.mlp(self.norm2(x))  # (B, T, d)
        return (x, weights) if return_weights else x


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
        self.positions = None  # the learned table (None for every other scheme)
        if config.position == "learned":
            self.positions = nn.Embedding(config.context_length, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.readout = nn.Linear(config.d_model, config.vocab_size)

    def check_ids(self, idx: torch.Tensor) -> None:
        """Refuse what is not a (B, T) tensor of token ids 0 .. V - 1, by name.

        An id out of range would otherwise fail inside the embedding with "index out of range in
        self" (on a GPU, a device-side assert that breaks the whole CUDA session).
        """
        V = self.config.vocab_size
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"token ids must be a torch.Tensor of shape (B, T), got "
                            f"{type(idx).__name__}")
        if idx.dim() != 2:
            raise ValueError(f"token ids must be 2-D, (B, T) = (batch, tokens), got shape "
                             f"{tuple(idx.shape)}"
                             + (" (add a batch dimension with ids.unsqueeze(0))"
                                if idx.dim() == 1 else ""))
        if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
            raise TypeError(f"token ids must be integers, got dtype {idx.dtype}; convert with "
                            "ids.long()")
        if idx.numel() and not (0 <= int(idx.min()) and int(idx.max()) < V):
            raise ValueError(f"token ids must be between 0 and vocab_size - 1 = {V - 1}, got "
                             f"values from {int(idx.min())} to {int(idx.max())}")

    def check_positions(self, positions, idx: torch.Tensor) -> None:
        """Refuse position ids that are not integers >= 0 of shape (T,) or (B, T) for ``idx``.

        Raises:
            TypeError: not an integer tensor.
            ValueError: another shape, or a negative id.
        """
        B, T = idx.shape
        if not isinstance(positions, torch.Tensor):
            raise TypeError(f"positions must be an integer torch.Tensor of shape (T,) or (B, T) "
                            f"= ({B}, {T}), got {type(positions).__name__}")
        if positions.is_floating_point() or positions.is_complex() \
                or positions.dtype == torch.bool:
            raise TypeError(f"positions must be integers, got dtype {positions.dtype}; convert "
                            "with positions.long()")
        if positions.shape not in ((T,), (B, T)):
            raise ValueError(f"positions must have shape (T,) = ({T},) or (B, T) = ({B}, {T}), "
                             f"one id per token, got {tuple(positions.shape)}")
        if positions.numel() and int(positions.min()) < 0:
            raise ValueError(f"positions must be ids >= 0, got {int(positions.min())}")

    def embed(self, idx: torch.Tensor, start: int = 0,
              positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token vector plus the vector of its position (``start`` onwards, or ``positions``)
        for the learned and sinusoidal schemes: (B, T) -> (B, T, d)."""
        x = self.tokens(idx)  # (B, T, d)
        if self.config.position in ("learned", "sinusoidal"):
            T = idx.size(1)
            pos = (torch.arange(start, start + T, device=idx.device) if positions is None
                   else positions.to(idx.device))  # (T,) or (B, T)
            if self.positions is not None:
                if pos.numel() and int(pos.max()) >= self.config.context_length:
                    raise ValueError(
                        f"position {int(pos.max())} does not exist: the model learned a table "
                        f"of context_length={self.config.context_length} position vectors")
                x = x + self.positions(pos)  # (T, d) broadcasts
            else:
                table = sinusoidal_table(int(pos.max()) + 1 if pos.numel() else 0,
                                         self.config.d_model, dtype=x.dtype).to(x.device)
                x = x + table[pos]  # (T, d) or (B, T, d)
        return x

    def forward(self, idx: torch.Tensor, *, return_weights: bool = False,
                positions: torch.Tensor | None = None):
        """Next-token logits for every position.

        Args:
            idx: token ids.
            return_weights: also return each layer's attention weights.
            positions: integer positions (T,) or (B, T) of the tokens, for every scheme
                (the table's rows, or RoPE's and ALiBi's positions); None: 0 .. T - 1.

        Returns:
            ``logits`` (B, T, V), and with ``return_weights=True`` a list of ``n_layers``
            tensors of shape (B, h, T, T).
        """
        self.check_ids(idx)
        if positions is not None:
            self.check_positions(positions, idx)
        x = self.embed(idx, positions=positions)  # (B, T, d)
        weights = []
        for block in self.blocks:
            if return_weights:
                x, w = block(x, return_weights=True, positions=positions)  # (B, T, d), ...
                weights.append(w)
            else:
                x = block(x, positions=positions)  # (B, T, d): no (T, T) weights when fused
        logits = self.readout(self.norm(x))  # (B, T, V)
        return (logits, weights) if return_weights else logits

    def new_caches(self, batch: int, window: int | None = None) -> list[KVCache]:
        """One empty KV cache per layer, (B, h_kv, context_length, d_h) each.

        With ``window=W`` (1 <= W <= context_length) each cache is a ring of W slots
        (sliding-window attention); a model without position embeddings can then generate past
        its context length, one with them stops at its position table (:meth:`step`).
        """
        return [KVCache.for_module(block.attn, batch, window=window) for block in self.blocks]

    def step(self, idx_new: torch.Tensor, caches: list[KVCache],
             positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the new tokens only, attending over each layer's cache (and extending it).

        The new tokens sit at positions ``caches[0].length`` onwards, or at ``positions``
        (ids >= 0, (t,) or (B, t): packed rows, ids that restart), which every layer's cache
        stores; ``forward(ids, positions=p)`` then equals a prefill and steps given the same
        ids. Once given, give them on every step: without them RoPE and ALiBi continue from
        the last id + 1 (:meth:`attnbook.KVCache.append`) but a position table counts the
        cached tokens.

        Raises:
            ValueError: if the model has position embeddings and the new tokens would sit past
                its ``context_length`` (a sliding-window cache does not lengthen the table);
                positions of the wrong shape or negative.

        Shape:
            idx_new: (B, t); positions: (t,) or (B, t) -> (B, t, V)
        """
        self.check_ids(idx_new)
        start, t = caches[0].length, idx_new.size(1)
        if positions is not None:
            self.check_positions(positions, idx_new)
            if self.positions is not None and positions.numel() \
                    and int(positions.max()) >= self.config.context_length:
                raise ValueError(
                    f"position {int(positions.max())} does not exist: the model learned a table "
                    f"of context_length={self.config.context_length} position vectors")
        elif self.positions is not None and start + t > self.config.context_length:
            raise ValueError(
                f"positions {start} .. {start + t - 1} do not exist: the model learned "
                f"context_length={self.config.context_length} position vectors; generate at "
                "most that many tokens, or use a model without a position table "
                "(position='none', 'rope' or 'alibi')")
        return self.decode(idx_new, caches, positions)

    def decode(self, idx_new: torch.Tensor, caches: list[KVCache],
               positions: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`step` without its checks of the ids and positions: :meth:`generate`'s hot path,
        for ids it made itself (an argmax is in range, and it checked the length once).

        Shape:
            idx_new: (B, t); positions: (t,) or (B, t), checked -> (B, t, V)
        """
        x = self.embed(idx_new, start=caches[0].length, positions=positions)  # (B, t, d)
        for block, cache in zip(self.blocks, caches):
            x = block(x, cache=cache, positions=positions)  # (B, t, d)
        return self.readout(self.norm(x))  # (B, t, V)

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, n: int, use_cache: bool = True,
                 window: int | None = None) -> torch.Tensor:
        """Append ``n`` tokens to ``prompt``, each the most likely next token (greedy decoding).

        Args:
            prompt: token ids to start from.
            n: how many tokens to generate.
            use_cache: run the prompt once and then one token per step through a KV cache per
                layer; ``False`` reruns the whole sequence every step (the same tokens, slower).
            window: attend to the last ``window`` tokens only (sliding-window caches,
                1 <= window <= context_length; needs ``use_cache``). A model without position
                embeddings can then generate past its context length; one with them still stops
                at its position table.

        Returns:
            The prompt followed by the ``n`` generated tokens.

        Shape:
            prompt: (B, t0) -> (B, t0 + n), with t0 + n <= context_length (unless a window
            lets a model without positions go further)
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an integer >= 0 (tokens to generate), got {n!r}")
        self.check_ids(prompt)
        if window is not None and not use_cache:
            raise ValueError("window=W needs the KV cache (use_cache=True): without it every "
                             "step reruns the whole sequence with the module's full causal mask")
        t0 = prompt.size(1)
        longest = self.config.context_length
        if window is not None and self.positions is None:
            longest = None  # a ring of W slots and no position table: any length
        if t0 < 1 or (longest is not None and t0 + n > longest):
            raise ValueError(f"prompt length {t0} plus n={n} tokens must be between 1 and "
                             f"context_length={self.config.context_length}"
                             + ("" if self.positions is None else
                                " (the model has that many position vectors)"))
        was_training = self.training
        self.eval()
        seq = prompt
        if use_cache:
            caches = self.new_caches(prompt.size(0), window=window)
            logits = self.step(prompt, caches)[:, -1]  # (B, V): prefill, the prompt in one call
            for _ in range(n):
                nxt = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
                seq = torch.cat([seq, nxt], dim=1)
                logits = self.decode(nxt, caches)[:, -1]  # one token through every layer
        else:
            for _ in range(n):
                nxt = self(seq)[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
                seq = torch.cat([seq, nxt], dim=1)
        self.train(was_training)
        return seq

    def num_parameters(self) -> int:
        """Number of trained parameters (the causal masks are buffers, not counted)."""
        return sum(p.numel() for p in self.parameters())
