"""Checks for the lab "The whole module, verified": converting masks and weights between PyTorch
and our module."""

from __future__ import annotations

import torch

from ..masks import to_additive_mask
from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _broadcast(answer, shape: tuple[int, ...]):
    """Expand a tensor answer to ``shape`` when PyTorch would broadcast it (else leave it)."""
    if isinstance(answer, torch.Tensor) and answer.shape != shape:
        try:
            return answer.expand(shape)
        except RuntimeError:
            return answer
    return answer


def _needs_bool(fb: Feedback, answer, name: str, meaning: str) -> Feedback:
    """Right values are not enough: PyTorch rejects or misreads an integer mask."""
    if fb.ok and isinstance(answer, torch.Tensor) and answer.dtype != torch.bool:
        return Feedback(False, f"Not yet: {name} has the right values but dtype {answer.dtype}; "
                               f"PyTorch wants a bool mask ({meaning}): add .bool().")
    return fb


def check_sdpa_mask(answer, padding_mask: torch.Tensor, n_new: int | None = None) -> Feedback:
    """Exercise: SDPA's bool ``attn_mask`` for the last ``n_new`` queries (a KV-cache step) over
    all ``n_keys`` keys, with our causal mask and ``padding_mask``: True where new query i (token
    i + n_keys - n_new) may attend to key j, that is j <= i + n_keys - n_new and key j is real.

    A mask that broadcasts to (B, n_new, n_keys) is accepted, as SDPA would accept it.

    Shape:
        padding_mask: (B, n_keys), True = real; answer: (B, n_new, n_keys) (or broadcastable),
        True = may attend; n_new: default n_keys (every query)
    """
    B, L = padding_mask.shape
    n = L if n_new is None else n_new
    start = L - n  # the position of the first new query
    pad = padding_mask.detach().cpu()
    keys = pad[:, None, :]  # (B, 1, L): real keys
    # Written out from the definition, not built with the library's masks: a check that shares
    # the library's code would accept the library's bugs.
    ones = torch.ones(n, L, dtype=torch.bool)
    seen = ones.tril(diagonal=start)  # (n, L): key j at or before new query i's position
    allowed = seen & keys  # (B, n, L)
    mistakes = {
        "our blocked mask itself: SDPA's bool attn_mask means True = may attend, so invert it":
            ~allowed,
        "the causal part only: padded keys are still visible": seen.expand(B, n, L),
        "the padding part only: the causal mask is missing, so tokens see the future":
            keys.expand(B, n, L),
        "the padding flipped: the padded keys are visible and the real ones blocked":
            seen & ~keys,
        "an additive float mask (0 / -inf): SDPA accepts one, but this exercise asks for the "
        "bool mask, True = may attend": to_additive_mask(~allowed),
    }
    if n < L:
        mistakes.update({
            "the top-left corner of the square mask (tril with no offset): new query i is "
            "token n_keys - n_new + i, so it sees keys 0 .. n_keys - n_new + i. Shift the "
            "diagonal by n_keys - n_new": ones.tril() & keys,
            "the whole square mask of all n_keys queries: the cached tokens' queries were "
            "answered already; keep the rows of the n_new new queries (the last ones)":
                torch.ones(L, L, dtype=torch.bool).tril() & keys,
            "padding applied to the queries (rows) instead of the keys (columns)":
                seen & pad[:, start:, None],
        })
    else:
        mistakes.update({
            "padding applied to the queries (rows) instead of the keys (columns)":
                seen & pad[:, :, None],
            "the causal triangle transposed: each token sees the future instead of the past":
                seen.T & keys,
        })
    mistakes.update({
        "a diagonal one too low: each new token is blocked from its own key (tril with "
        "diagonal = n_keys - n_new - 1); use diagonal = n_keys - n_new":
            ones.tril(diagonal=start - 1) & keys,
        "a diagonal one too high: each new token sees the next one (tril with diagonal = "
        "n_keys - n_new + 1); use diagonal = n_keys - n_new":
            ones.tril(diagonal=start + 1) & keys,
    })
    if isinstance(answer, torch.Tensor):
        answer = answer.detach().cpu()
        if answer.dim() == 4 and answer.size(1) == 1:  # (B, 1, n, L): one head axis
            answer = answer[:, 0]
    fb = check_tensor(_broadcast(answer, (B, n, L)), allowed, mistakes, name="attn_mask",
                      atol=0, rtol=0)
    return _needs_bool(fb, answer, "attn_mask", "True = may attend")


def check_key_padding_mask(answer, attention_mask: torch.Tensor) -> Feedback:
    """Exercise: a tokenizer's ``attention_mask`` (integers, 1 = real token, 0 = padding) as
    MHA's bool ``key_padding_mask`` (True = ignore this key).

    Shape:
        attention_mask: (B, T) int; answer: (B, T) bool
    """
    mask = attention_mask.detach().cpu()
    B, T = mask.shape
    if isinstance(answer, torch.Tensor) and answer.dim() == 3:
        return Feedback(False, f"Not yet: key_padding_mask has shape {tuple(answer.shape)}; it "
                               f"has one entry per key, shape (B, T) = ({B}, {T}). The (T, T) "
                               "causal part goes into attn_mask.")
    real = mask != 0
    mistakes = {
        "attention_mask not inverted: MHA's key_padding_mask means True = ignore this key, "
        "the tokenizer's 1 means a real token": real,
        "the bitwise NOT of an integer tensor: ~ on int64 turns 1 into -2 and 0 into -1, "
        "not into False and True. Compare instead (attention_mask == 0), or make it bool "
        "first (~attention_mask.bool())": ~mask if not mask.is_floating_point() else real,
        "an additive float mask (0 / -inf): MHA accepts one, but mixing it with a bool attn_mask "
        "is deprecated; give the bool mask": to_additive_mask(~real),
        "a float mask that is -inf at the real tokens: it is not inverted":
            to_additive_mask(real),
    }
    fb = check_tensor(answer, ~real, mistakes, name="key_padding_mask", atol=0, rtol=0)
    return _needs_bool(fb, answer, "key_padding_mask", "True = ignore")


def check_split_in_proj(answer, in_proj_weight: torch.Tensor) -> Feedback:
    """Exercise: a one-head ``nn.MultiheadAttention``'s ``in_proj_weight`` split into the
    ``.weight`` of our three ``nn.Linear`` layers, stacked: ``answer[0], answer[1], answer[2]``
    are W_q, W_k, W_v.

    Shape:
        in_proj_weight: (3 d, d); answer: (3, d, d)
    """
    w = in_proj_weight.detach().cpu()
    d = w.size(1)
    q, k, v = w[:d], w[d:2 * d], w[2 * d:]
    if isinstance(answer, (tuple, list)) and len(answer) == 3 and all(
            isinstance(p, torch.Tensor) for p in answer):
        return Feedback(False, f"Not yet: your split is a {type(answer).__name__} of three "
                               f"tensors; return one tensor of shape (3, {d}, {d}) (stack the "
                               "blocks with torch.stack, or reshape in_proj_weight), so that "
                               "W_q, W_k, W_v = split_in_proj(w) still unpacks it.")
    if isinstance(answer, torch.Tensor):
        shape = tuple(answer.shape)
        if d % 3 == 0 and shape == (3, 3 * d, d // 3):
            return Feedback(False, f"Not yet: your blocks are ({3 * d}, {d // 3}): you split "
                                   "along dim 1 (the inputs). The three maps are stacked along "
                                   f"dim 0, d = {d} rows each: split there.")
        if shape == (3 * d, d):
            return Feedback(False, f"Not yet: that is in_proj_weight as it is, ({3 * d}, {d}); "
                                   f"give it a leading axis of the three maps, (3, {d}, {d}).")
    wrong_order = "the right blocks in the wrong order: MHA stacks W_q, W_k, W_v from top to bottom"
    mistakes = {
        "each block transposed: nn.Linear's .weight is (out, in), the layout in_proj_weight "
        "uses, so keep each block as it is (the .T is only for the book's X @ W_q)":
            torch.stack([q.T, k.T, v.T]),
        wrong_order + " (you have k, q, v)": torch.stack([k, q, v]),
        wrong_order + " (you have v, k, q)": torch.stack([v, k, q]),
        wrong_order + " (you have q, v, k)": torch.stack([q, v, k]),
        "every third row (view(d, 3, d) and a transpose, or w[0::3], w[1::3], w[2::3]): the rows "
        "are not interleaved; rows 0 .. d-1 are W_q, the next d rows W_k, the last d rows W_v":
            torch.stack([w[0::3], w[1::3], w[2::3]]),
        "the first block three times: each of the three maps has its own block":
            torch.stack([q, q, q]),
    }
    return check_tensor(answer, torch.stack([q, k, v]), mistakes, name="your split",
                        atol=0, rtol=0)


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _padding(g: torch.Generator, B: int, T: int) -> torch.Tensor:
    """(B, T) bool, True = real: sequence 0 left-padded, sequence 1 right-padded, the rest
    random lengths on either side (some with no padding, one with a single real token)."""
    rows = []
    for b in range(B):
        n = int(torch.randint(1, T + 1, (1,), generator=g))
        if b == 0:
            n = max(1, T - 2)
        left = b % 2 == 0
        pos = torch.arange(T)
        rows.append(pos >= T - n if left else pos < n)
    return torch.stack(rows)


def _sdpa_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    # (B, n_keys, n_new): one decoding step, a chunk, the whole prompt, one token, a long cache
    for B, L, n in ((2, 6, 1), (3, 7, 3), (2, 5, 5), (1, 1, 1), (2, 40, 4)):
        pad = _padding(g, B, L)
        cases.append(HiddenCase((pad.clone(), n), (pad, n),
                                f"padding_mask of shape ({B}, {L}), n_new = {n}"))
    return cases


def _kpm_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for B, T in ((2, 5), (3, 9), (1, 1), (4, 33)):
        mask = _padding(g, B, T).long()  # as a tokenizer returns it: 1 = real, 0 = padding
        cases.append(HiddenCase((mask.clone(),), (mask,), f"attention_mask of shape ({B}, {T})"))
    return cases


def _split_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for d in (8, 1, 3, 6, 64):
        w = torch.randn(3 * d, d, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((w.clone(),), (w,), f"in_proj_weight of shape ({3 * d}, {d})"))
    return cases


GRADED = {
    # The library's converters build these masks; the exercises ask for them written out.
    "check_sdpa_mask": FunctionExercise("cached_sdpa_mask", check_sdpa_mask, _sdpa_cases,
                                        forbidden=("to_sdpa_mask", "blocked_positions",
                                                   "causal_mask", "sdpa_mask")),
    "check_key_padding_mask": FunctionExercise("key_padding_mask", check_key_padding_mask,
                                               _kpm_cases),
    "check_split_in_proj": FunctionExercise("split_in_proj", check_split_in_proj, _split_cases,
                                            forbidden=("_in_projection_packed",
                                                       "_in_projection")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
