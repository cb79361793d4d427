"""Checks for the lab "Masks as functions": the document mask_mod, a block mask's tiles, and
the gradient of tanh softcapping.

The references are computed here from first principles (no call into ``attnbook.masks``), so a
grader's pristine copy of this module does not depend on the code the learner may have edited.
A mask_mod follows FlexAttention's convention: True = query ``q_idx`` MAY attend to key ``kv_idx``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def allowed_matrix(mask_mod: Callable, T: int) -> torch.Tensor:
    """Call ``mask_mod(b, h, q_idx, kv_idx)`` on every (query, key) pair of one row of ``T`` tokens.

    Args:
        mask_mod: the learner's mask_mod, FlexAttention's signature; True = may attend.
        T: the number of queries and of keys.

    Returns:
        (T, T) bool, entry (i, j) = mask_mod(0, 0, i, j); ``...`` if the mask_mod still returns
        ``...`` (so that the check can say the exercise is not done).

    Raises:
        TypeError: if ``mask_mod`` is not a function (a tensor already materialised, say), uses
            Python's ``and``/``or``/``if`` on tensors, returns something that is not a
            (broadcastable) tensor, or returns the same values whatever indices it is given
            (a matrix computed beforehand, not a function of ``q_idx`` and ``kv_idx``).
    """
    if not callable(mask_mod):
        raise TypeError(f"allowed_matrix takes a mask_mod, a function (b, h, q_idx, kv_idx) -> "
                        f"bool, not a {type(mask_mod).__name__}: write `def mod(b, h, q_idx, "
                        "kv_idx): return ...` and pass mod")
    b = torch.zeros((), dtype=torch.long)
    h = torch.zeros((), dtype=torch.long)

    def call(q_idx, kv_idx):
        try:
            return mask_mod(b, h, q_idx, kv_idx)
        except RuntimeError as err:
            if "ambiguous" in str(err):
                raise TypeError("your mask_mod used Python's and / or / not / if on tensors; a "
                                "mask_mod is called with whole tensors of indices at once, so "
                                "combine conditions with & | ~ instead") from err
            raise

    out = call(torch.arange(T)[:, None], torch.arange(T)[None, :])  # (T, 1) queries x (1, T) keys
    if out is Ellipsis or out is None:
        return Ellipsis
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"a mask_mod must return a bool tensor, got {type(out).__name__}")
    grid = out.broadcast_to(T, T).clone()
    # A mask_mod answers for the indices it is given: asked about the pairs in reverse order
    # (as a kernel asks, one tile at a time), it must give the grid's entries in that order.
    q_r, kv_r = torch.arange(T - 1, -1, -1)[:, None], torch.arange(T - 1, -1, -1)[None, :]
    flipped = call(q_r, kv_r)
    if not isinstance(flipped, torch.Tensor) or not torch.equal(
            flipped.broadcast_to(T, T), grid.flip(0, 1)):
        raise TypeError("your mask_mod gives the same matrix whatever q_idx and kv_idx it is "
                        "asked about: it returns a mask computed beforehand. Compute it from "
                        "q_idx and kv_idx inside mod, so it answers for any pair it is given")
    return grid


def check_document_mod(answer, document_ids: torch.Tensor, window: int | None = None
                       ) -> Feedback:
    """Exercise: the document mask of a packed row, materialised: query i may attend to key j
    when both are in the same document and j <= i (and, given ``window``, i - j < window:
    sliding-window attention inside each document).

    Shape:
        document_ids: (T,) ints -> answer: (T, T) bool, True = may attend
    """
    doc = torch.as_tensor(document_ids).cpu()
    T = doc.numel()
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    same = doc[:, None] == doc[None, :]  # (T, T)
    causal = i >= j
    near = (i - j < window) if window is not None else torch.ones(T, T, dtype=torch.bool)
    right = same & causal & near
    mistakes = {
        "the same-document test alone: a token also sees the later tokens of its own "
        "document. AND it with the causal test, q_idx >= kv_idx": same & near,
        "the causal mask alone: a token sees the tokens of earlier documents too, the leak "
        "packing must prevent. AND it with document_ids[q_idx] == document_ids[kv_idx]":
            causal & near,
        "the blocked set, not the allowed one: a mask_mod returns True where the query MAY "
        "attend (the opposite of the book's causal buffer)": ~right,
        "a strict inequality, q_idx > kv_idx: each token must still see itself":
            same & (i > j) & near,
        "keys of the same or an earlier document (<=): that lets a token see earlier "
        "documents; compare the ids with ==": (doc[None, :] <= doc[:, None]) & causal & near,
        "the query's position compared with the key's document id: index document_ids "
        "with both q_idx and kv_idx": (i == doc[None, :]) & causal & near,
    }
    if window is not None:
        mistakes.update({
            "the document mask without the window: each token sees its whole document "
            "before it. Also require q_idx - kv_idx < w": same & causal,
            "a window one key too wide (q_idx - kv_idx <= w): a query sees w keys, itself "
            "and the w - 1 before it": same & causal & (i - j <= window),
            "a window one key too narrow (q_idx - kv_idx < w - 1): a query sees itself and "
            "the w - 1 keys before it, w keys in all": same & causal & (i - j < window - 1),
            "a window on both sides (|q_idx - kv_idx| < w) without the causal test: the "
            "future is visible": same & ((i - j).abs() < window),
        })
    name = "your document mask" if window is None else "your windowed document mask"
    feedback = check_tensor(answer, right, mistakes, name=name, atol=0, rtol=0)
    if feedback.ok and torch.as_tensor(answer).dtype != torch.bool:
        return Feedback(False, "Not yet: the pattern is right, but a mask_mod must return bool "
                               "(FlexAttention refuses other dtypes); compare, don't multiply.")
    return feedback


def _tile_counts(allowed: torch.Tensor, block_m: int, block_n: int, ragged: bool = True,
                 lengths: tuple[int, int] | None = None) -> torch.Tensor:
    """[empty, partial, full] tiles of ``allowed`` (T_q, T_k); a last tile that runs past the
    end is judged on the entries that exist (``ragged=False``: dropped, the floor mistake;
    ``lengths``: the tiles laid over other lengths than the mask's, a slice past its end
    counting as an empty tile)."""
    T_q, T_k = lengths or allowed.shape
    n_m = -(-T_q // block_m) if ragged else T_q // block_m
    n_n = -(-T_k // block_n) if ragged else T_k // block_n
    counts = [0, 0, 0]
    for a in range(n_m):
        for c in range(n_n):
            tile = allowed[a * block_m:(a + 1) * block_m, c * block_n:(c + 1) * block_n]
            counts[0 if not tile.any() else 2 if tile.all() else 1] += 1
    return torch.tensor(counts, dtype=torch.float64)


def check_tile_counts(answer, allowed: torch.Tensor, block_m: int, block_n: int) -> Feedback:
    """Exercise: how many b_m x b_n tiles of the mask are empty, partial and full.

    A tile is empty when no entry in it may attend, full when every entry may, partial
    otherwise; tiles at the edge that run past the last query or key count too, judged on the
    entries that exist.

    Shape:
        allowed: (T_q, T_k) bool, True = may attend -> answer: [empty, partial, full]
    """
    allowed = torch.as_tensor(allowed).bool().cpu()
    right = _tile_counts(allowed, block_m, block_n)
    empty, partial, full = right.tolist()
    swapped = _tile_counts(allowed, block_n, block_m)
    T_q, T_k = allowed.shape
    one_axis = {}  # one length for both axes: the key tiles counted over T_q (or the reverse)
    if T_q != T_k:
        for n, axis in ((T_q, "T_q (the number of queries)"), (T_k, "T_k (the number of keys)")):
            one_axis[axis] = _tile_counts(allowed, block_m, block_n, lengths=(n, n))
    total = right.sum()
    mistakes = {
        "the counts of blocked (empty), mixed and allowed entries, not of tiles: count whole "
        "b_m x b_n tiles":
            torch.tensor([(~allowed).sum().item(), 0.0, allowed.sum().item()],
                         dtype=torch.float64),
        "full and empty swapped: an empty tile is one where nothing may attend (True = may "
        "attend)": right.flip(0),
        "partial tiles counted as full: a tile is full only if EVERY entry may attend":
            torch.tensor([empty, 0.0, partial + full], dtype=torch.float64),
        "partial tiles counted as empty: a tile with any allowed entry must be computed":
            torch.tensor([empty + partial, 0.0, full], dtype=torch.float64),
        "the last, shorter tiles left out (T // b rounds down): they hold queries and keys "
        "too; use ceil(T / b) tiles": _tile_counts(allowed, block_m, block_n, ragged=False),
    }
    if not torch.equal(swapped, right):
        mistakes["b_m and b_n swapped: b_m cuts the queries (rows), b_n the keys (columns)"] = \
            swapped
    for axis, counts in one_axis.items():
        if not torch.equal(counts, right):
            mistakes[f"one length, {axis}, used for both axes: the mask is T_q x T_k, not "
                     "square; the query tiles follow allowed.shape[0], the key tiles "
                     "allowed.shape[1]"] = counts
    a = _as_counts(answer)
    if isinstance(a, torch.Tensor) and a.numel() == 3 and not torch.equal(a, right) \
            and torch.equal(a.sort().values, right.sort().values) \
            and not any(torch.equal(a, m) for m in mistakes.values()):
        mistakes["the right three counts in another order: the list is [empty, partial, "
                 "full]"] = a
    if isinstance(a, torch.Tensor) and a.numel() == 3 and not torch.equal(a, right) \
            and a.sum() != total and a.sum() != (T_q // block_m) * (T_k // block_n):
        mistakes.setdefault(
            f"counts that do not add up to the {int(total)} tiles of the grid "
            f"(ceil(T_q / b_m) x ceil(T_k / b_n))", a)
    return check_tensor(_as_counts(answer), right, mistakes, name="your list of tile counts",
                        atol=0, rtol=0)


def _as_counts(answer):
    try:
        return torch.as_tensor(answer, dtype=torch.float64).flatten()
    except (TypeError, ValueError, RuntimeError):
        return answer


def check_softcap_grad(answer, scores: torch.Tensor, cap: float) -> Feedback:
    """Exercise: the derivative of softcapping, d/ds [cap * tanh(s / cap)], at each score.

    Shape:
        scores: any shape -> answer: the same shape
    """
    s = torch.as_tensor(scores).detach().cpu().double()
    t = torch.tanh(s / cap)
    right = 1 - t**2
    mistakes = {
        "the softcapped score itself, cap * tanh(s / cap), not its derivative": cap * t,
        "tanh's derivative at s, not at s / cap: the inner function is s / cap":
            1 - torch.tanh(s) ** 2,
        "1 - tanh(s / cap) without the square: tanh'(x) = 1 - tanh(x)^2": 1 - t,
        "an extra 1 / cap: the outer cap and the inner 1 / cap cancel": (1 - t**2) / cap,
        "the outer factor cap without the inner 1 / cap (chain rule)": cap * (1 - t**2),
        "all ones: that is the gradient without softcapping": torch.ones_like(s),
    }
    return check_tensor(answer, right, mistakes, name="your gradient", atol=1e-9, rtol=1e-7)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _documents(g: torch.Generator, T: int) -> torch.Tensor:
    """Non-decreasing document ids for one packed row of ``T`` tokens."""
    starts = torch.rand(T, generator=g) < 0.3
    starts[0] = False
    return torch.cumsum(starts.long(), 0)


def _tile_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # Square masks, and two that are not (new queries after cached keys; more queries than
    # keys), so that one length used for both axes is caught.
    for T_q, T_k, bm, bn, kind in ((16, 16, 4, 4, "causal"), (13, 13, 4, 3, "document"),
                                   (20, 20, 8, 4, "window"), (9, 9, 2, 5, "document"),
                                   (5, 14, 2, 4, "cache"), (11, 6, 3, 2, "window")):
        i, j = torch.arange(T_q)[:, None], torch.arange(T_k)[None, :]
        if kind == "causal":
            allowed = i >= j
        elif kind == "cache":  # query i sits at position T_k - T_q + i
            allowed = j <= i + (T_k - T_q)
        elif kind == "window":
            allowed = (i >= j) & (i - j < int(torch.randint(2, 7, (), generator=g)))
        else:
            doc = _documents(g, T_q)
            allowed = (doc[:, None] == doc[None, :]) & (i >= j)
        size = f"{T_q} tokens" if T_q == T_k else f"{T_q} queries x {T_k} keys"
        cases.append(HiddenCase((allowed.clone(), bm, bn), (allowed, bm, bn),
                                f"a {kind} mask of {size}, tiles of {bm} x {bn}"))
    return cases


def _softcap_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for shape, scale, cap in (((5,), 10.0, 5.0), ((3, 4), 60.0, 30.0), ((6,), 1.0, 50.0)):
        s = scale * torch.randn(*shape, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((s.clone(), cap), (s, cap), f"scores of shape {shape}, cap {cap}"))
    return cases


def _document_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # One token; one document (the plain window); documents shorter than the window (the plain
    # document mask); a window of 1 (only the diagonal); ids that are not sorted (a row packed
    # in any order: the test is equality, so it still holds).
    # A document longer than w + 1 (so a window one key too wide differs from no window).
    for T, w, kind in ((1, 2, "sorted"), (8, 3, "one"), (12, 6, "sorted"), (10, 1, "sorted"),
                       (15, 4, "sorted"), (9, 3, "shuffled"), (12, 3, "long")):
        doc = (torch.zeros(T, dtype=torch.long) if kind == "one" else _documents(g, T))
        if kind == "shuffled":
            doc = torch.tensor([2, 2, 0, 0, 0, 1, 2, 2, 1])
        if kind == "long":
            doc = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2])
        cases.append(HiddenCase((doc.clone(), w), (doc, w),
                                f"document ids {doc.tolist()}, w = {w}"))
    return cases


GRADED = {
    # The library's document and window mask_mods, combined, would be the answer.
    # It must build the mask with a mask_mod given to allowed_matrix (the exercise's point).
    "check_document_mod": FunctionExercise("document_window_allowed", check_document_mod,
                                           _document_cases,
                                           forbidden=("document_mod", "sliding_window_mod",
                                                      "and_mods", "sink_mod", "materialize",
                                                      "causal_mask_rect"),
                                           required=("allowed_matrix",)),
    "check_tile_counts": FunctionExercise("tile_counts", check_tile_counts, _tile_cases,
                                          forbidden=("block_mask", "create_block_mask",
                                                     "_row_kinds")),
    # Autograd in any form: Tensor.backward, torch.autograd.grad (or torch.func.grad), the
    # Jacobian functions.
    "check_softcap_grad": FunctionExercise("softcap_grad", check_softcap_grad, _softcap_cases,
                                           forbidden=("backward", "grad", "jacobian", "jacrev",
                                                      "vjp")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
