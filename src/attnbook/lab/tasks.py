"""Synthetic tasks for a tiny model: sequences made on the fly from a seed, nothing downloaded.

Every task gives next-token prediction batches ``(x, y)`` of token ids: the model reads ``x``
and must predict ``y[b, t]`` from ``x[b, :t + 1]`` (it is causal). Positions whose answer cannot
be known yet are marked ``IGNORE`` in ``y`` and scored by neither the loss nor the accuracy.

* ``copy``: repeat what you saw ``delay`` tokens ago: y[t] = x[t - delay].
* ``reverse``: read n symbols and a separator ``|``, then emit them in reverse order.
* ``induction``: [A][B] ... [A] -> predict [B]: find the earlier A, output what followed it.

Shape legend: B batch, T tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

IGNORE = -100
"""Target id for positions that are not scored (the default ``ignore_index`` of cross-entropy)."""

SYMBOLS = "abcdefghijklmnopqrstuvwxyz"


def _generator(generator: torch.Generator | None, seed: int | None) -> torch.Generator | None:
    if seed is not None:
        return torch.Generator().manual_seed(seed)
    return generator


def copy_batch(batch_size: int, length: int = 16, delay: int = 3, n_symbols: int = 10,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Copying with a delay: the answer at position t is the token at t - delay.

    Args:
        batch_size: number of sequences B.
        length: tokens per sequence T.
        delay: how far back the token to copy lies (1 <= delay < T).
        n_symbols: vocabulary size; tokens are uniform over it.
        generator: source of randomness (None: the global one).

    Returns:
        ``x`` random tokens, ``y`` with ``y[:, t] = x[:, t - delay]`` and IGNORE for t < delay.

    Shape:
        -> x: (B, T), y: (B, T)
    """
    if not 1 <= delay < length:
        raise ValueError(f"delay must be in [1, length), got delay={delay}, length={length}")
    x = torch.randint(n_symbols, (batch_size, length), generator=generator)  # (B, T)
    y = torch.full_like(x, IGNORE)
    y[:, delay:] = x[:, :-delay]  # (B, T - delay)
    return x, y


def reverse_batch(batch_size: int, n: int = 8, n_symbols: int = 10,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Reversing: ``a_0 .. a_{n-1} | a_{n-1} .. a_1`` and the model emits ``a_{n-1} .. a_0``.

    The separator ``|`` has id ``n_symbols``. From the separator on, position n + k must predict
    a_{n-1-k}, which sits at position n - 1 - k: the mirror image across the separator.

    Args:
        batch_size: number of sequences B.
        n: symbols to reverse; T = 2n.
        n_symbols: number of symbols (the vocabulary is n_symbols + 1 with the separator).
        generator: source of randomness (None: the global one).

    Returns:
        ``x`` and ``y``, with IGNORE on the first n positions of ``y``.

    Shape:
        -> x: (B, 2n), y: (B, 2n)
    """
    a = torch.randint(n_symbols, (batch_size, n), generator=generator)  # (B, n)
    backwards = a.flip(1)  # (B, n): a_{n-1} .. a_0
    sep = torch.full((batch_size, 1), n_symbols, dtype=a.dtype)
    x = torch.cat([a, sep, backwards[:, :-1]], dim=1)  # (B, 2n)
    y = torch.cat([torch.full_like(a, IGNORE), backwards], dim=1)  # (B, 2n)
    return x, y


def induction_batch(batch_size: int, length: int = 16, n_symbols: int = 16,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Induction: a pair [A][B] somewhere, A again at the end; predict B at the last position.

    A appears exactly twice (at p and at T - 1), so the only way to know B is to find the
    earlier A and read the token after it. B and every filler token are random, and p is
    random, so no fixed position or token holds the answer.

    Args:
        batch_size: number of sequences B.
        length: tokens per sequence T (at least 4).
        n_symbols: vocabulary size (at least 3).
        generator: source of randomness (None: the global one).

    Returns:
        ``x``, and ``y`` that is IGNORE everywhere except the last position, which holds B.

    Shape:
        -> x: (B, T), y: (B, T)
    """
    if length < 4 or n_symbols < 3:
        raise ValueError(f"need length >= 4 and n_symbols >= 3, got {length}, {n_symbols}")
    rows = torch.arange(batch_size)
    A = torch.randint(n_symbols, (batch_size,), generator=generator)  # (B,)
    # Fillers and B: uniform over the other n_symbols - 1 symbols, so A cannot reappear.
    others = torch.randint(n_symbols - 1, (batch_size, length), generator=generator)  # (B, T)
    x = others + (others >= A[:, None]).long()  # skip A: (B, T)
    p = torch.randint(length - 3, (batch_size,), generator=generator)  # pair at p, p + 1 <= T - 3
    x[rows, p] = A
    x[:, -1] = A
    y = torch.full_like(x, IGNORE)
    y[:, -1] = x[rows, p + 1]  # B
    return x, y


def _partitions(n: int, largest: int, parts: int):
    """The partitions of n into at most ``parts`` parts, none larger than ``largest``."""
    if n == 0:
        yield ()
        return
    if parts == 0:
        return
    for first in range(min(n, largest), 0, -1):
        for rest in _partitions(n - first, first, parts - 1):
            yield (first, *rest)


def copy_set_baseline(length: int = 16, delay: int = 3,
                      n_symbols: int = 10) -> tuple[float, float]:
    """The best any predictor can do on the copy task if it sees no order, computed exactly.

    The predictor at position t sees the current token x_t and the multiset of x_0 .. x_t (what
    one causal attention layer without positions sees, chapter 14), not their order. Tokens are
    independent and uniform, so given that multiset the answer x_{t - delay} is equally likely
    to be any of the t earlier tokens: the probability of symbol s is c_s / t, with c_s its
    count among x_0 .. x_{t-1}. The best guess is the most frequent symbol (right with
    probability max_s c_s / t), and the best cross-entropy is the entropy of the counts. Both
    are averaged over the count vectors' multinomial distribution (summed over the partitions
    of t, no sampling) and over the scored positions t = delay .. length - 1.

    Args:
        length, delay, n_symbols: the copy task's settings (:func:`copy_batch`).

    Returns:
        ``(accuracy, nats)``: the Bayes-optimal accuracy and cross-entropy (in nats) of a
        predictor that sees only the current token and the multiset of the earlier ones.
    """
    if not 1 <= delay < length:
        raise ValueError(f"delay must be in [1, length), got delay={delay}, length={length}")
    accuracy = nats = 0.0
    for t in range(delay, length):  # t earlier tokens, x_0 .. x_{t-1}
        for counts in _partitions(t, t, n_symbols):
            repeats = [counts.count(c) for c in set(counts)]
            symbols = math.perm(n_symbols, len(counts)) / math.prod(map(math.factorial, repeats))
            orders = math.factorial(t) / math.prod(map(math.factorial, counts))
            p = symbols * orders / n_symbols**t  # probability of this multiset of counts
            accuracy += p * max(counts) / t
            nats -= p * sum(c / t * math.log(c / t) for c in counts)
    n_scored = length - delay
    return accuracy / n_scored, nats / n_scored


@dataclass(frozen=True)
class Task:
    """A task with its settings: makes batches and turns token ids into readable symbols.

    Attributes:
        name: ``"copy"``, ``"reverse"`` or ``"induction"``.
        vocab_size: number of token ids the model must embed and predict.
        seq_len: tokens per sequence T.
        chance: accuracy of guessing a uniformly random symbol.
        options: the keyword arguments passed to the batch function.
    """

    name: str
    make: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    vocab_size: int
    seq_len: int
    chance: float
    options: dict = field(default_factory=dict)

    def batch(self, batch_size: int, generator: torch.Generator | None = None,
              seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch ``(x, y)`` of shape (B, T) each; ``seed`` gives the same batch every time."""
        return self.make(batch_size, generator=_generator(generator, seed), **self.options)

    def decode(self, ids) -> list[str]:
        """Token ids as symbols: letters, and ``|`` for the reverse task's separator."""
        return [SYMBOLS[i] if i < len(SYMBOLS) and i < self.n_symbols else "|"
                for i in torch.as_tensor(ids).tolist()]

    @property
    def n_symbols(self) -> int:
        return self.options.get("n_symbols", self.vocab_size)


def get_task(name: str, **options) -> Task:
    """The task called ``name``, with keyword ``options`` overriding its defaults.

    Args:
        name: ``"copy"``, ``"reverse"`` or ``"induction"``.
        options: e.g. ``length``, ``delay``, ``n``, ``n_symbols``.

    Returns:
        A :class:`Task`.
    """
    if name == "copy":
        opts = {"length": 16, "delay": 3, "n_symbols": 10, **options}
        return Task("copy", copy_batch, opts["n_symbols"], opts["length"],
                    1 / opts["n_symbols"], opts)
    if name == "reverse":
        opts = {"n": 8, "n_symbols": 10, **options}
        return Task("reverse", reverse_batch, opts["n_symbols"] + 1, 2 * opts["n"],
                    1 / opts["n_symbols"], opts)
    if name == "induction":
        opts = {"length": 16, "n_symbols": 16, **options}
        # B is uniform over the n_symbols - 1 symbols that are not A.
        return Task("induction", induction_batch, opts["n_symbols"], opts["length"],
                    1 / (opts["n_symbols"] - 1), opts)
    raise ValueError(f"unknown task {name!r}; choose one of {TASKS}")


TASKS = ("copy", "reverse", "induction")
