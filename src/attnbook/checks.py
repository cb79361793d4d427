"""Input checks that turn shape and dtype mistakes into errors a reader can act on.

``Attention.forward`` runs them before step 1; they are not one of the six steps.
"""

from __future__ import annotations

import inspect
import numbers

import torch


def check_input(x: torch.Tensor, d_model: int, context_length: int,
                dtype: torch.dtype | None = None) -> tuple[int, int, int]:
    """Check ``x`` is a floating (B, T, d_model) tensor with T <= context_length; return B, T, d.

    With ``dtype`` (the module's weights' dtype) also check that ``x`` has the same dtype: a
    mismatch would otherwise fail inside step 1 with PyTorch's "expected m1 and m2 to have the
    same dtype", which names neither dtype nor the fix. T = 0 passes: the modules return an
    empty (B, 0, d_model) result.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"x must be a torch.Tensor of shape (B, T, d_model), got {type(x).__name__}"
        )
    if x.dim() != 3:
        raise ValueError(
            f"x must be 3-D with shape (B, T, d_model) = (batch, tokens, {d_model}), "
            f"got {x.dim()}-D shape {tuple(x.shape)}"
            + (" (add a batch dimension with x.unsqueeze(0))" if x.dim() == 2 else "")
        )
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(
            f"x has dtype {x.dtype} but the module's weights have dtype {dtype}; convert one "
            f"to match: x.to({dtype}) or module.to({x.dtype})"
        )
    B, T, d = x.shape
    if d != d_model:
        raise ValueError(f"x has {d} features in its last dimension, expected d_model={d_model}")
    if T > context_length:
        raise ValueError(
            f"sequence length T={T} is longer than context_length={context_length}; "
            "build the module with a larger context_length or split the sequence"
        )
    return B, T, d


def check_padding_mask(padding_mask: torch.Tensor, B: int, T: int) -> None:
    """Check ``padding_mask`` is a bool (B, T) tensor (True = real token)."""
    if not isinstance(padding_mask, torch.Tensor):
        raise TypeError(
            f"padding_mask must be a bool torch.Tensor of shape (B, T) = ({B}, {T}), "
            f"got {type(padding_mask).__name__}"
        )
    if padding_mask.dtype != torch.bool:
        raise TypeError(
            f"padding_mask must have dtype torch.bool (True = real token, False = padding), "
            f"got {padding_mask.dtype}; convert with padding_mask.bool()"
        )
    if tuple(padding_mask.shape) != (B, T):
        raise ValueError(
            f"padding_mask must have shape (B, T) = ({B}, {T}), got {tuple(padding_mask.shape)}"
        )


def check_whole_number(name: str, value, minimum: int = 1) -> int:
    """``value`` if it is a whole number (an int, not a bool) of at least ``minimum``.

    Raises:
        TypeError: ``value`` is not an int (a float such as 4.0 or 2.5, a string, a bool).
        ValueError: ``value`` is below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a whole number (an int) of at least {minimum}, got "
                        f"{value!r} of type {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"need {name} >= {minimum}, got {value}")
    return int(value)


def check_finite(caller: str, **tensors) -> None:
    """ValueError naming the tensor when one of ``tensors`` holds NaN or an infinity.

    Tensors on the ``meta`` device (shapes only) and None are skipped.
    """
    for name, t in tensors.items():
        if t is None or t.device.type == "meta" or not t.is_floating_point():
            continue
        if not bool(t.isfinite().all()):
            bad = "NaN" if bool(t.isnan().any()) else "an infinity"
            raise ValueError(f"{caller}: {name} contains {bad}; it takes finite values only "
                             "(NaN or an infinity in an input makes every result it reaches NaN)")


# Options that later chapters add, and the layer that has them (the core module refuses them).
MOVED_OPTIONS = {
    **dict.fromkeys(("fused", "position", "rope_base", "rope_layout", "rope_scaling",
                     "alibi_slopes", "rotary_dim", "mask_mod", "positions"), "AttentionLayer"),
    **dict.fromkeys(("n_heads", "n_kv_heads"), "MultiHeadAttention"),
}
_CHAPTER = {"fused": 11, "mask_mod": 21, "n_heads": 13, "n_kv_heads": 13}


def refuse_moved_options(func, kwargs: dict, n_args: int = 0, max_args: int | None = None,
                         owner: str = "Attention") -> None:
    """TypeError naming the layer that has an option the core module does not take."""
    accepted = inspect.signature(func).parameters
    for name in kwargs:
        if name not in accepted and name in MOVED_OPTIONS:
            where = MOVED_OPTIONS[name]
            chapter = _CHAPTER.get(name, 20)
            same = (" (the same parameters, state_dict and initialisation)"
                    if where == "AttentionLayer" else " (it adds an output projection)")
            call = (f"attnbook.{where}(d_model, context_length)(x, {name}=...)"
                    if name in ("mask_mod", "positions")
                    else f"attnbook.{where}(d_model, context_length, {name}=...)")
            raise TypeError(
                f"{owner} is the module of chapters 0-8 and takes no {name}=: {name}= is chapter "
                f"{chapter}'s option, on attnbook.{where}{same}: {call}"
            )
    if max_args is not None and n_args > max_args:
        raise TypeError(
            f"{owner}(d_model, context_length) takes two positional arguments, got {n_args}: "
            "a third one was fused=, an option of attnbook.AttentionLayer (chapter 11), e.g. "
            "attnbook.AttentionLayer(d_model, context_length, fused=True)"
        )


def check_blocked_shape(scores: torch.Tensor, blocked: torch.Tensor) -> None:
    """ValueError for a (B, T, T) mask against (B, h, T, T) scores: it would line B up with h."""
    if scores.dim() == 4 and blocked.dim() == 3:
        raise ValueError(f"blocked has shape {tuple(blocked.shape)} for scores of shape "
                         f"{tuple(scores.shape)} (B, h, T, T): give it a head axis, "
                         "blocked[:, None] (B, 1, T, T)")
