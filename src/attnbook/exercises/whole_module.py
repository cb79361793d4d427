"""Checks for the lab "The whole module, verified": converting masks and weights for PyTorch."""

from __future__ import annotations

import torch

from ..masks import causal_mask, to_additive_mask
from . import Feedback, check_tensor


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


def check_sdpa_mask(answer, padding_mask: torch.Tensor) -> Feedback:
    """Exercise: our causal mask and ``padding_mask`` as SDPA's bool ``attn_mask``.

    A mask that broadcasts to (B, T, T) is accepted, as SDPA would accept it.

    Shape:
        padding_mask: (B, T), True = real; answer: (B, T, T) (or broadcastable), True = may attend
    """
    B, T = padding_mask.shape
    causal = causal_mask(T, device=padding_mask.device)  # (T, T), True = blocked
    keys = padding_mask[:, None, :]  # (B, 1, T): real keys
    # The answer is written out from the definition, not built with blocked_positions: a check
    # that shares the library's code would accept the library's bugs.
    ones = torch.ones(T, T, dtype=torch.bool, device=padding_mask.device)
    blocked = ~(ones.tril() & keys)  # (B, T, T), True = blocked
    mistakes = {
        "our blocked mask itself: SDPA's bool attn_mask means True = may attend, so invert it "
        "(~blocked, or attnbook.to_sdpa_mask)": blocked,
        "the causal part only: padded keys are still visible": (~causal).expand(B, T, T),
        "the padding part only: the causal mask is missing, so tokens see the future":
            keys.expand(B, T, T),
        "padding applied to the queries (rows) instead of the keys (columns)":
            ~causal & padding_mask[:, :, None],
        "the causal triangle transposed: each token sees the future instead of the past":
            ~causal.T & keys,
        "the padding flipped: the padded keys are visible and the real ones blocked":
            ~causal & ~keys,
        "an additive float mask (0 / -inf): SDPA accepts one, but this exercise asks for the "
        "bool mask, True = may attend": to_additive_mask(blocked),
    }
    fb = check_tensor(_broadcast(answer, (B, T, T)), ~blocked, mistakes, name="attn_mask")
    return _needs_bool(fb, answer, "attn_mask", "True = may attend")


def check_key_padding_mask(answer, padding_mask: torch.Tensor) -> Feedback:
    """Exercise: our ``padding_mask`` (True = real) as MHA's ``key_padding_mask`` (True = ignore).

    Shape:
        padding_mask: (B, T); answer: (B, T)
    """
    B, T = padding_mask.shape
    if isinstance(answer, torch.Tensor) and answer.dim() == 3:
        return Feedback(False, f"Not yet: key_padding_mask has shape {tuple(answer.shape)}; it "
                               f"has one entry per key, shape (B, T) = ({B}, {T}). The (T, T) "
                               "causal part goes into attn_mask.")
    mistakes = {
        "our padding_mask not inverted: MHA's key_padding_mask means True = ignore this key, "
        "ours means True = real token": padding_mask,
        "an additive float mask (0 / -inf): MHA accepts one, but mixing it with a bool attn_mask "
        "is deprecated; give the bool mask": to_additive_mask(~padding_mask),
        "a float mask that is -inf at the real tokens: it is not inverted":
            to_additive_mask(padding_mask),
    }
    fb = check_tensor(answer, ~padding_mask, mistakes, name="key_padding_mask")
    return _needs_bool(fb, answer, "key_padding_mask", "True = ignore")


def check_in_proj_weight(answer, query: torch.Tensor, key: torch.Tensor,
                         value: torch.Tensor) -> Feedback:
    """Exercise: the ``in_proj_weight`` of a one-head ``nn.MultiheadAttention`` equal to ours.

    Args:
        answer: the learner's stacked matrix.
        query, key, value: the ``.weight`` of our three ``nn.Linear`` layers, each (d, d).

    Shape:
        answer: (3 d, d)
    """
    q, k, v = (w.detach() for w in (query, key, value))
    wrong_order = "the right blocks in the wrong order: MHA stacks W_q, W_k, W_v from top to bottom"
    mistakes = {
        "the transposed weights: nn.Linear already stores W^T as (out, in), and in_proj_weight "
        "uses the same layout, so copy each .weight as it is": torch.cat([q.T, k.T, v.T]),
        "the blocks side by side (torch.cat(..., dim=1)): in_proj_weight is (3d, d), stacked "
        "along dim 0": torch.cat([q, k, v], dim=1),
        wrong_order + " (you have k, q, v)": torch.cat([k, q, v]),
        wrong_order + " (you have q, v, k)": torch.cat([q, v, k]),
        wrong_order + " (you have v, k, q)": torch.cat([v, k, q]),
        "W_q three times: each block is a different layer's weight": torch.cat([q, q, q]),
    }
    return check_tensor(answer, torch.cat([q, k, v]), mistakes, name="in_proj_weight")
