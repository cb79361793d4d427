"""Checks for the lab "A tiny model that learns": the copy task's targets, the embedding of a
chunk of tokens that starts at a later position, and the top-k accuracy."""

from __future__ import annotations

import torch

from ..lab.tasks import IGNORE
from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def check_copy_targets(answer, x: torch.Tensor, delay: int) -> Feedback:
    """Exercise: the copy task's targets, y[t] = x[t - delay], IGNORE for t < delay.

    Shape:
        x: (B, T); answer: (B, T)
    """
    x = x.detach().cpu()
    B, T = x.shape

    def shifted(by: int, fill: int = IGNORE) -> torch.Tensor:
        y = torch.full_like(x, fill)
        if by > 0:
            y[:, by:] = x[:, :-by]
        elif by < 0:
            y[:, :by] = x[:, -by:]
        else:
            y = x.clone()
        return y

    mistakes = {
        "torch.roll, which wraps the last tokens around to the front: there is nothing to "
        "copy yet at t < delay, so those targets must be IGNORE": torch.roll(x, delay, dims=1),
        "targets from the future, x[t + delay]: a causal model cannot see them":
            shifted(-delay),
        f"a delay of {delay + 1}, not {delay} (off by one)": shifted(delay + 1),
        "0 for the first targets: 0 is a real token (a); use IGNORE = -100 so they are not "
        "scored": shifted(delay, fill=0),
        "the inputs themselves (no shift): the target at t is the token delay steps back":
            x,
    }
    if delay > 1:
        mistakes[f"a delay of {delay - 1}, not {delay} (off by one)"] = shifted(delay - 1)
    if answer is not None and answer is not Ellipsis and 0 < delay < T:
        try:
            shape = tuple(torch.as_tensor(answer).shape)
        except (TypeError, ValueError, RuntimeError):
            shape = None
        if shape == (B, T - delay):
            return Feedback(False, f"Not yet: your targets have T - delay = {T - delay} "
                                   f"columns; keep all T = {T} positions and fill the first "
                                   f"delay = {delay} with IGNORE.")
    return check_tensor(answer, shifted(delay), mistakes, name="the target tensor", atol=0, rtol=0)


def check_embedding(answer, idx: torch.Tensor, token_table: torch.Tensor,
                    position_table: torch.Tensor, start: int) -> Feedback:
    """Exercise: the model's input for a chunk of tokens at positions start .. start + T - 1
    (the tokens fed after ``start`` cached ones): token vector + position vector.

    Shape:
        idx: (B, T), token_table: (V, d), position_table: (context, d); answer: (B, T, d)
    """
    idx = idx.detach().cpu()
    tokens = token_table.detach().cpu()[idx]  # (B, T, d)
    table = position_table.detach().cpu()
    T, n_pos = idx.size(1), table.size(0)
    positions = table[start:start + T]  # (T, d)
    mistakes = {
        "positions counted from 0 (position_table[:T]): the chunk's tokens sit at positions "
        "start .. start + T - 1, after the start tokens before them":
            tokens + table[:T],
        "the token embeddings alone: without positions the model cannot tell order":
            tokens,
        "the position embeddings alone: the tokens themselves are missing":
            positions.expand_as(tokens),
        "positions looked up by token id (position_table[idx]); look them up by position, "
        "start + torch.arange(T)": tokens + table[idx.clamp(max=n_pos - 1)],
        "one position vector for every token (position_table[start]): token i of the chunk "
        "is at position start + i": tokens + table[start],
    }
    if start + T + 1 <= n_pos:
        mistakes["positions one too far (start + 1 onwards): the chunk's first token is at "
                 "position start"] = tokens + table[start + 1:start + 1 + T]
    if start >= 1:
        mistakes["positions one too early (start - 1 onwards): the chunk's first token is at "
                 "position start"] = tokens + table[start - 1:start - 1 + T]
    return check_tensor(answer, tokens + positions, mistakes, name="the embedded input")


def check_accuracy(answer, logits: torch.Tensor, targets: torch.Tensor, k: int) -> Feedback:
    """Exercise: the top-k accuracy: the fraction of scored positions whose target is among
    the k most likely tokens.

    Shape:
        logits: (B, T, V), targets: (B, T); answer: a number
    """
    logits, targets = logits.detach().cpu().double(), targets.detach().cpu()
    scored = targets != IGNORE  # (B, T)
    n = scored.sum()

    def hits(top: torch.Tensor) -> torch.Tensor:  # (B, T, j) token ids -> (B, T) bool
        return (top == targets[..., None]).any(dim=-1)

    order = logits.argsort(dim=-1, descending=True)  # (B, T, V): most likely first
    right = hits(order[..., :k]) & scored
    accuracy = right.sum() / n
    mistakes = {
        "the top-1 accuracy (argmax): a position counts when its target is among the k most "
        "likely tokens (topk(k).indices)": (hits(order[..., :1]) & scored).sum() / n,
        "the k least likely tokens (sort ascending, or topk with largest=False): take the k "
        "largest logits": (hits(order[..., -k:]) & scored).sum() / n,
        "an accuracy over every position, the IGNORE ones included: count only targets "
        "!= IGNORE": right.sum() / targets.numel(),
        "an error rate (1 - accuracy)": 1 - accuracy,
        "a percentage: give the fraction, in [0, 1]": 100 * accuracy,
        "the hits divided by k as well: a position counts once, whichever of its k guesses "
        "is the target": accuracy / k,
        f"the top-{k + 1} accuracy: one guess too many": (hits(order[..., :k + 1]) & scored
                                                          ).sum() / n,
    }
    if k > 1:
        mistakes[f"the top-{k - 1} accuracy: one guess too few"] = \
            (hits(order[..., :k - 1]) & scored).sum() / n
    return check_tensor(answer, accuracy, mistakes, name="the accuracy", atol=1e-6, rtol=0)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _targets_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # T = 1; delay 1; delay = T (nothing to copy yet); a long sequence.
    for B, T, delay, n_symbols in ((1, 1, 1, 3), (2, 5, 1, 4), (3, 8, 3, 10), (2, 6, 6, 5),
                                   (4, 20, 7, 12)):
        x = torch.randint(n_symbols, (B, T), generator=g)
        cases.append(HiddenCase((x.clone(), delay), (x, delay),
                                f"x of shape ({B}, {T}), delay = {delay}"))
    return cases


def _embedding_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # start = 0: a whole prompt; T = 1: one generated token; a chunk that ends at the context.
    for B, T, V, context, d, start in ((1, 1, 5, 4, 3, 0), (2, 3, 7, 8, 4, 5),
                                       (3, 6, 4, 12, 2, 2), (1, 5, 9, 16, 8, 11),
                                       (2, 1, 6, 10, 5, 9)):
        idx = torch.randint(V, (B, T), generator=g)
        tok = torch.randn(V, d, generator=g, dtype=torch.float64)
        pos = torch.randn(context, d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((idx.clone(), tok.clone(), pos.clone(), start),
                                (idx, tok, pos, start),
                                f"idx of shape ({B}, {T}), {V} tokens, {context} positions, "
                                f"d = {d}, start = {start}"))
    return cases


def _accuracy_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # k = 1: argmax; k = V: every target counts; unscored positions in different places.
    for B, T, V, k in ((1, 1, 4, 1), (3, 6, 5, 2), (4, 8, 10, 3), (2, 5, 3, 3), (6, 12, 16, 5)):
        logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
        targets = torch.randint(V, (B, T), generator=g)
        unscored = torch.rand(B, T, generator=g) < 0.3
        unscored.view(-1)[0] = False  # at least one scored position
        targets = targets.masked_fill(unscored, IGNORE)
        cases.append(HiddenCase((logits.clone(), targets.clone(), k), (logits, targets, k),
                                f"logits of shape ({B}, {T}, {V}), k = {k}"))
    return cases


GRADED = {
    "check_copy_targets": FunctionExercise("copy_targets", check_copy_targets, _targets_cases,
                                           forbidden=("copy_batch",)),
    # The model's own embed takes a start: the exercise asks for the lookup and the offset.
    "check_embedding": FunctionExercise("embed_chunk", check_embedding, _embedding_cases,
                                        forbidden=("embed", "Embedding")),
    "check_accuracy": FunctionExercise("top_k_accuracy", check_accuracy, _accuracy_cases,
                                       forbidden=("evaluate",)),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
