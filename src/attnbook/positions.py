"""Where order enters attention: rotary positions (RoPE), ALiBi and the sinusoidal table.

Attention treats its keys as a set: permute the tokens and every output is permuted with them
(chapter 14). A model tells it the order in one of three places:

* in the input, once: a learned table (chapter 14) or the fixed sinusoidal table of Vaswani et
  al. (2017), added to the token vectors (:func:`sinusoidal_table`);
* in q and k, in every layer: RoPE (Su et al., 2021, RoFormer) turns each pair of features of
  the query at position m by the angle m·θ_c and of the key at position n by n·θ_c, so their
  dot product depends on the positions only through m - n (:func:`apply_rope`);
* in the scores, in every layer: ALiBi (Press et al., 2022) adds -m_h·(i - j) to the score of
  query i and key j, one slope m_h per head (:func:`alibi_slopes`, :func:`alibi_bias`).

Two memory layouts of RoPE's pairs are in use and give the same model only under a fixed
permutation of the features (:func:`layout_permutation`): ``"interleaved"`` pairs features
(2c, 2c + 1) (RoFormer, GPT-J); ``"half"`` pairs (c, c + d_h/2) with ``rotate_half`` (GPT-NeoX,
the Llama family as commonly distributed).

Shape legend: B batch, h heads, T tokens, d_h head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

POSITION_SCHEMES = ("none", "learned", "sinusoidal", "rope", "alibi")
"""The position schemes of :class:`attnbook.TinyConfig`: ``"learned"`` and ``"sinusoidal"``
are added to the token vectors; ``"rope"`` and ``"alibi"`` act inside every attention layer."""

ROPE_LAYOUTS = ("half", "interleaved")
SCALINGS = ("interpolation", "ntk")
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
"""transformers' ``rope_scaling["rope_type"]`` values that :func:`apply_rope` takes."""

# Keys each rope type needs and may have (transformers' names); "rope_type" ("type" in older
# configs) names the type. Unknown keys are refused: a misspelt key would be ignored silently.
_ROPE_TYPE_KEYS = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor", "original_max_position_embeddings"), ()),
    "yarn": (("factor", "original_max_position_embeddings"),
             ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
              "truncate")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings"), ()),
}


def _check_d_h(d_h, what: str = "d_h") -> None:
    if isinstance(d_h, bool) or not isinstance(d_h, int) or d_h < 2 or d_h % 2:
        raise ValueError(f"RoPE turns pairs of features, so {what} must be a positive even "
                         f"integer, got {d_h!r}")


def _check_layout(layout) -> None:
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {ROPE_LAYOUTS} ('half': pairs (c, c + d_h/2), "
                         f"GPT-NeoX and Llama; 'interleaved': pairs (2c, 2c + 1), RoFormer and "
                         f"GPT-J), got {layout!r}")


def _positive(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def check_scaling(scaling) -> None:
    """ValueError unless ``scaling`` is a RoPE scaling :func:`apply_rope` takes.

    That is None; a tuple ``("interpolation", s)`` or ``("ntk", s)`` with s > 0; or a dict in
    transformers' ``rope_scaling`` format whose ``"rope_type"`` (``"type"`` in older configs) is
    one of :data:`ROPE_TYPES`, with the keys that type needs (``factor`` >= 1 for the scaled
    types, ``original_max_position_embeddings`` the training length L for ``dynamic``, ``yarn``
    and ``llama3``, ``low_freq_factor`` < ``high_freq_factor`` for ``llama3``) and no others.
    """
    if scaling is None:
        return
    if isinstance(scaling, dict):
        _check_rope_dict(scaling)
        return
    ok = (isinstance(scaling, (tuple, list)) and len(scaling) == 2 and scaling[0] in SCALINGS
          and _positive(scaling[1]))
    if not ok:
        raise ValueError(f"scaling must be None, ('interpolation', s) or ('ntk', s) with a "
                         f"factor s > 0, or a transformers rope_scaling dict "
                         f"{{'rope_type': one of {ROPE_TYPES}, ...}}, got {scaling!r}")


def _rope_type(scaling: dict) -> str:
    kind = scaling.get("rope_type", scaling.get("type"))
    if "rope_type" in scaling and "type" in scaling and scaling["type"] != scaling["rope_type"]:
        raise ValueError(f"rope_scaling names two types, rope_type={scaling['rope_type']!r} and "
                         f"type={scaling['type']!r}: keep one")
    return kind


# Where transformers takes the training length L of each type (modeling_rope_utils of 4.57 and
# 5.15), for the error that asks for it: here L is always the dict's
# original_max_position_embeddings.
_L_HINTS = {
    "dynamic": " (transformers 4.57 and 5.15 never read this key for dynamic scaling: their L is "
               "the model config's max_position_embeddings, whatever the dict says; "
               "attnbook.convert.from_transformers copies that value in; here it must be given)",
    "yarn": " (transformers reads it from the dict and, when the dict lacks it, takes the model "
            "config's max_position_embeddings; here it must be given)",
    "llama3": " (transformers requires it in the dict too)",
}


def _check_rope_dict(scaling: dict) -> None:
    kind = _rope_type(scaling)
    if kind not in _ROPE_TYPE_KEYS:
        raise ValueError(f"rope_scaling['rope_type'] must be one of {ROPE_TYPES} (transformers' "
                         f"names), got {kind!r} in {scaling!r}")
    need, may = _ROPE_TYPE_KEYS[kind]
    keys = set(scaling) - {"rope_type", "type"}
    missing = [k for k in need if k not in keys]
    if missing:
        hint = (_L_HINTS[kind] if "original_max_position_embeddings" in missing else "")
        raise ValueError(f"rope_scaling of type {kind!r} needs the keys {list(need)}; missing "
                         f"{missing} in {scaling!r}{hint}")
    extra = sorted(keys - set(need) - set(may))
    if extra:
        raise ValueError(f"rope_scaling of type {kind!r} takes the keys {list(need + may)}; "
                         f"unknown {extra} in {scaling!r}")
    for k in keys:
        if k == "truncate":
            if not isinstance(scaling[k], bool):
                raise ValueError(f"rope_scaling['truncate'] must be True or False, got "
                                 f"{scaling[k]!r}")
        elif k in ("attention_factor", "mscale", "mscale_all_dim", "beta_fast", "beta_slow") \
                and scaling[k] is None:
            continue  # transformers' "not set"
        elif not _positive(scaling[k]):
            raise ValueError(f"rope_scaling[{k!r}] must be a positive finite number, got "
                             f"{scaling[k]!r} in {scaling!r}")
    if "factor" in keys and scaling["factor"] < 1:
        raise ValueError(f"rope_scaling['factor'] stretches the context, so it must be >= 1, "
                         f"got {scaling['factor']!r}")
    if kind == "llama3" and not scaling["low_freq_factor"] < scaling["high_freq_factor"]:
        raise ValueError(f"llama3 rope_scaling needs low_freq_factor < high_freq_factor, got "
                         f"{scaling['low_freq_factor']!r} and {scaling['high_freq_factor']!r}")


def check_rotary_dim(rotary_dim, d_head: int) -> int | None:
    """``rotary_dim`` if it is None or an even integer 2 .. d_head; else ValueError naming both.

    Partial rotary turns the first ``rotary_dim`` features of each head (pairs of them) and
    leaves the rest as they are; ``rotary_dim = d_head`` is full RoPE.
    """
    if rotary_dim is None:
        return None
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim < 2 \
            or rotary_dim % 2 or rotary_dim > d_head:
        raise ValueError(f"rotary_dim must be None or an even integer from 2 to d_head = "
                         f"{d_head} (RoPE turns pairs of a head's first rotary_dim features), "
                         f"got {rotary_dim!r}")
    return rotary_dim


def rope_frequencies(d_h: int, base: float = 10000.0,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """RoPE's angular frequencies θ_c = base ** (-2c / d_h), c = 0 .. d_h/2 - 1.

    Pair 0 turns by one radian per position; later pairs turn ever more slowly.

    Args:
        d_h: head width (even); with partial rotary, the number of rotated features.
        base: the base of the geometric sequence (10000 in RoFormer and Llama 1/2).
        dtype: dtype of the result (computed in float64, then converted).

    Returns:
        The frequencies, largest first.

    Shape:
        () -> (d_h / 2,)
    """
    _check_d_h(d_h)
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0 \
            or not math.isfinite(base):
        raise ValueError(f"base must be a positive finite number, got {base!r}")
    c = torch.arange(d_h // 2, dtype=torch.float64)  # (d_h/2,)
    return (float(base) ** (-2.0 * c / d_h)).to(dtype)


def rope_parameters(d_h: int, base: float = 10000.0, scaling=None, seq_len: int | None = None,
                    dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, float]:
    """RoPE's frequencies after a scaling, and the factor its cos and sin are multiplied by.

    The library's counterpart of transformers' ``ROPE_INIT_FUNCTIONS[rope_type](config, device,
    seq_len)`` (computed in float64; transformers computes in float32). With L the training
    length (``original_max_position_embeddings``), s the ``factor`` and r = d_h:

    * ``default``: θ_c = base ** (-2c / r); factor 1.
    * ``linear`` (position interpolation): θ_c / s, every pair slowed alike.
    * ``dynamic`` (dynamic NTK): for ``seq_len`` n > L the base becomes
      base · (s n / L - (s - 1)) ** (r / (r - 2)); for n <= L the default frequencies. Pair 0
      keeps θ_0 = 1 and every other pair slows, the slowest most.
    * ``yarn`` (Peng et al., 2023): pairs that turn more than ``beta_fast`` (32) times within L
      keep θ_c, pairs that turn fewer than ``beta_slow`` (1) times get θ_c / s, and a linear
      ramp over the pair index mixes the two between; the factor ("attention temperature")
      is 0.1 ln s + 1 unless ``attention_factor`` (or ``mscale``/``mscale_all_dim``) says
      otherwise. It multiplies cos and sin, so a fully rotated head's scores grow by its square.
    * ``llama3``: pairs whose wavelength 2π/θ_c is below L / ``high_freq_factor`` keep θ_c,
      those above L / ``low_freq_factor`` get θ_c / s, and between them the weight on θ_c
      goes linearly in L / wavelength from 0 to 1.
    * the tuples ``("interpolation", s)`` and ``("ntk", s)``: θ_c / s, and the base multiplied
      by s ** (r / (r - 2)) (static NTK-aware scaling; r = 2 has no base to scale).

    Args:
        d_h: number of rotated features r (the head width, or ``rotary_dim``), even.
        base: RoPE's base (transformers' ``rope_theta``).
        scaling: None, a tuple or a transformers ``rope_scaling`` dict (:func:`check_scaling`).
        seq_len: the length the frequencies are for; only ``dynamic`` reads it (None: L).
        dtype: of the frequencies.

    Returns:
        (θ, attention_factor): the frequencies, largest first, and a float.

    Shape:
        () -> ((d_h / 2,), float)
    """
    check_scaling(scaling)
    theta = rope_frequencies(d_h, base, dtype=torch.float64)  # (r/2,)
    factor = 1.0
    if scaling is None:
        pass
    elif not isinstance(scaling, dict):
        kind, s = scaling[0], float(scaling[1])
        if kind == "interpolation":
            theta = theta / s
        elif d_h > 2:
            theta = rope_frequencies(d_h, base * s ** (d_h / (d_h - 2)), dtype=torch.float64)
    else:
        kind = _rope_type(scaling)
        s = float(scaling.get("factor", 1.0))
        L = scaling.get("original_max_position_embeddings")
        if kind == "linear":
            theta = theta / s
        elif kind == "dynamic":
            n = L if seq_len is None else max(int(seq_len), L)
            if n > L and d_h > 2:
                new_base = base * ((s * n / L) - (s - 1)) ** (d_h / (d_h - 2))
                theta = rope_frequencies(d_h, new_base, dtype=torch.float64)
        elif kind == "yarn":
            theta, factor = _yarn(theta, d_h, base, s, L, scaling)
        elif kind == "llama3":
            wavelength = 2 * math.pi / theta
            lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
            w = ((L / wavelength - lo) / (hi - lo)).clamp(0.0, 1.0)  # weight on θ_c
            theta = w * theta + (1 - w) * theta / s
    return theta.to(dtype), factor


def _yarn(theta: torch.Tensor, r: int, base: float, s: float, L: int, scaling: dict):
    """YaRN's frequencies and attention factor, as transformers' ``_compute_yarn_parameters``."""
    attention_factor = scaling.get("attention_factor")
    mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is None:
        attention_factor = (get_mscale(s, mscale) / get_mscale(s, mscale_all)
                            if mscale and mscale_all else get_mscale(s))
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def pair_turning(turns):  # the (fractional) pair index that turns `turns` times within L
        return r * math.log(L / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(beta_fast), pair_turning(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = ((torch.arange(r // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    # ramp 0: the fast pairs keep θ_c (extrapolate); ramp 1: the slow pairs get θ_c / s
    return theta * (1 - ramp) + theta / s * ramp, float(attention_factor)


def check_positions(positions, x: torch.Tensor) -> torch.Tensor:
    """Refuse positions that are not integers of shape (T,) or (B, T) for ``x`` (..., T, d_h).

    Returns the positions on ``x``'s device, shaped to broadcast against (..., T, 1).
    """
    T = x.size(-2)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be an integer torch.Tensor of shape (T,) or (B, T), "
                        f"got {type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be integers (token indices), got dtype "
                        f"{positions.dtype}; convert with positions.long()")
    if positions.dim() == 1:
        if positions.size(0) != T:
            raise ValueError(f"positions of shape (T,) must have T = {T} entries (x has shape "
                             f"{tuple(x.shape)}, T = x.size(-2)), got {tuple(positions.shape)}")
        return positions.to(x.device)[:, None]  # (T, 1)
    if positions.dim() == 2:
        B = positions.size(0)
        if x.dim() not in (3, 4) or positions.size(1) != T or B not in (1, x.size(0)):
            raise ValueError(f"positions of shape (B, T) need x of shape (B, T, d_h) or "
                             f"(B, h, T, d_h) with the same B and T, got positions "
                             f"{tuple(positions.shape)} for x {tuple(x.shape)}")
        p = positions.to(x.device)[:, :, None]  # (B, T, 1)
        return p[:, None] if x.dim() == 4 else p  # (B, 1, T, 1): every head the same
    raise ValueError(f"positions must have shape (T,) or (B, T), got {tuple(positions.shape)}")


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
               layout: str = "half", *, scaling=None, rotary_dim: int | None = None,
               seq_dim: int | None = None) -> torch.Tensor:
    """Rotate each pair of features of the token at position p by the angle p·θ_c (RoPE).

    Applied to queries and keys (never values): the score of query m and key n then depends on
    the positions only through n - m, since <R_m q, R_n k> = <q, R_(n-m) k>. A rotation keeps
    every vector's length, so the scores' scale (chapter 3) is unchanged (YaRN's attention
    factor is the one deliberate exception).

    Args:
        x: queries or keys, head width d_h even.
        positions: integer position of each token.
        base: RoPE's base (:func:`rope_frequencies`; transformers' ``rope_theta``).
        layout: ``"half"`` pairs features (c, c + r/2); ``"interleaved"`` pairs (2c, 2c + 1).
        scaling: for sequences longer than the training length (:func:`rope_parameters`).
            None; ``("interpolation", s)`` divides the positions by s (Chen et al., 2023);
            ``("ntk", s)`` multiplies the base by s ** (r / (r - 2)) ("NTK-aware" scaling);
            or a transformers ``rope_scaling`` dict of type ``"default"``, ``"linear"``,
            ``"dynamic"`` (its length is max(positions) + 1 of this call), ``"yarn"`` or
            ``"llama3"``.
        rotary_dim: partial rotary: only the first r = ``rotary_dim`` features (even, <= d_h)
            turn, with frequencies base ** (-2c / r), and the rest pass unchanged (GPT-J's
            ``rotary_dim``, GPT-NeoX's ``rotary_pct`` and transformers'
            ``partial_rotary_factor`` f, r = int(d_h · f)). None: r = d_h.
        seq_dim: the token axis of x. None: -2, and a 4-D x whose axes 1 and 2 have the same
            size (h == T: (B, h, T, d_h) or (B, T, h, d_h)?) is refused as ambiguous;
            ``seq_dim=1`` takes transformers' (B, T, h, d_h) layout.

    Returns:
        The rotated x, in x's dtype. The angles are computed in float32, or float64 when x is
        float64 (half inputs are rotated in float32 and converted back).

    Raises:
        ValueError: for an odd d_h or rotary_dim, positions of the wrong shape, an unknown
            layout or scaling, or an ambiguous 4-D x.
        TypeError: for positions that are not integers or x that is not floating point.

    Shape:
        x: (..., T, d_h); positions: (T,), or (B, T) with x (B, T, d_h) or (B, h, T, d_h)
        -> same as x (with ``seq_dim``, T is x.size(seq_dim))
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor (..., T, d_h), got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., T, d_h), got {tuple(x.shape)}")
    if seq_dim is None:
        if x.dim() == 4 and x.size(1) == x.size(2) > 1:
            raise ValueError(f"x of shape {tuple(x.shape)} is ambiguous: (B, h, T, d_h) or "
                             f"(B, T, h, d_h) with h == T = {x.size(1)}? Name the token axis: "
                             f"seq_dim=-2 for (B, h, T, d_h), seq_dim=1 for (B, T, h, d_h)")
        seq_dim = -2
    if isinstance(seq_dim, bool) or not isinstance(seq_dim, int) \
            or not -x.dim() <= seq_dim < x.dim() or seq_dim % x.dim() == x.dim() - 1:
        raise ValueError(f"seq_dim must be an axis of x other than the last (features), "
                         f"-{x.dim()} .. {x.dim() - 2}, got {seq_dim!r} for x "
                         f"{tuple(x.shape)}")
    if seq_dim % x.dim() != x.dim() - 2:  # rotate with the tokens on axis -2, then move back
        out = apply_rope(x.movedim(seq_dim, -2), positions, base, layout, scaling=scaling,
                         rotary_dim=rotary_dim, seq_dim=-2)
        return out.movedim(-2, seq_dim).contiguous()
    d_h = x.size(-1)
    _check_d_h(d_h, what=f"d_h (x.size(-1), x has shape {tuple(x.shape)})")
    r = d_h if rotary_dim is None else check_rotary_dim(rotary_dim, d_h)
    _check_layout(layout)
    check_scaling(scaling)
    pos = check_positions(positions, x)  # (T, 1), (B, T, 1) or (B, 1, T, 1)
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    pos = pos.to(dt)
    if isinstance(scaling, tuple | list) and scaling[0] == "interpolation":
        pos = pos / float(scaling[1])
        theta, factor = rope_frequencies(r, base, dtype=dt), 1.0
    else:
        seq_len = None
        if isinstance(scaling, dict) and _rope_type(scaling) == "dynamic":
            seq_len = int(positions.max()) + 1 if positions.numel() else 0
        theta, factor = rope_parameters(r, base, scaling, seq_len, dtype=dt)
    angle = pos * theta.to(x.device)  # (..., T, r/2)
    cos, sin = angle.cos(), angle.sin()
    if factor != 1.0:  # YaRN's attention factor multiplies cos and sin (transformers' way)
        cos, sin = cos * factor, sin * factor
    xf = x.to(dt)
    xr, rest = xf[..., :r], xf[..., r:]
    if layout == "half":
        a, b = xr[..., : r // 2], xr[..., r // 2:]  # pair c: (c, c + r/2)
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    else:
        a, b = xr[..., 0::2], xr[..., 1::2]  # pair c: (2c, 2c + 1)
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    if r < d_h:
        out = torch.cat([out, rest], dim=-1)
    # contiguous: elementwise ops may keep an odd stride order (last stride != 1 for d_h = 2),
    # which SDPA's CPU flash kernel refuses
    return out.to(x.dtype).contiguous()


def layout_permutation(d_h: int) -> torch.Tensor:
    """The feature permutation from the interleaved layout to the half layout.

    ``x_half = x_interleaved[..., perm]`` puts pair c's features (2c, 2c + 1) at (c, c + d_h/2);
    ``torch.argsort(perm)`` goes back. Permuting the rows of W_q and W_k this way converts a
    checkpoint between the layouts (loading one without it silently breaks the model).

    Shape:
        () -> (d_h,) long
    """
    _check_d_h(d_h)
    return torch.cat([torch.arange(0, d_h, 2), torch.arange(1, d_h, 2)])


def alibi_slopes(h: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ALiBi's per-head slopes m_1 .. m_h (Press et al., 2022).

    For h a power of two: the geometric sequence 2 ** (-8 i / h), i = 1 .. h (h = 8 gives
    1/2, 1/4, .., 1/256). For other h, the paper's rule: the slopes of the nearest smaller power
    of two n, followed by every other slope of 2n (its odd-numbered ones) until h are taken.

    Args:
        h: number of heads (at least 1; one head gets 2 ** -8).
        dtype: dtype of the result.

    Returns:
        The slopes, one per head.

    Shape:
        () -> (h,)
    """
    if isinstance(h, bool) or not isinstance(h, int) or h < 1:
        raise ValueError(f"h (number of heads) must be an integer >= 1, got {h!r}")
    return torch.tensor(_slopes(h), dtype=dtype)


def check_alibi_slopes(slopes, h: int) -> tuple[float, ...] | None:
    """The slopes a model chose, checked: None (the paper's rule) or h positive finite floats.

    Returns:
        None, or the slopes as a tuple of h floats (a plain value: no buffer, no state_dict
        entry).

    Raises:
        ValueError: for a number of slopes other than h, or a slope that is not a positive
            finite number.

    Shape:
        slopes: (h,) sequence or tensor, or None -> tuple of h floats, or None
    """
    if slopes is None:
        return None
    if isinstance(slopes, torch.Tensor):
        if slopes.dim() != 1 or slopes.is_complex() or slopes.dtype == torch.bool:
            raise ValueError(f"alibi_slopes must be a 1-D real tensor or a sequence of h = {h} "
                             f"positive floats, one per head, got a tensor of shape "
                             f"{tuple(slopes.shape)} and dtype {slopes.dtype}")
        values = [float(v) for v in slopes.detach().cpu().tolist()]
    elif isinstance(slopes, (list, tuple)):
        values = list(slopes)
    else:
        raise ValueError(f"alibi_slopes must be None (the paper's rule, alibi_slopes({h})) or "
                         f"h = {h} positive floats, one per head, got {type(slopes).__name__}")
    if len(values) != h:
        raise ValueError(f"alibi_slopes needs one slope per head: h = {h} slopes, got "
                         f"{len(values)} ({slopes!r})")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0:
            raise ValueError(f"alibi_slopes must be h = {h} positive finite numbers, got "
                             f"{slopes!r}")
    return tuple(float(v) for v in values)


def _slopes(h: int) -> list[float]:
    if h & (h - 1) == 0:  # a power of two
        return [2.0 ** (-8.0 * i / h) for i in range(1, h + 1)]
    n = 2 ** math.floor(math.log2(h))
    return _slopes(n) + _slopes(2 * n)[0::2][: h - n]


def alibi_bias(h: int, T_q: int, T_k: int, offset: int = 0, *, slopes: torch.Tensor | None = None,
               dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """ALiBi's additive bias -m_h · (i + offset - j) for query i and key j, every head.

    Zero on the (shifted) diagonal, more negative the further back the key. Entries above the
    causal diagonal follow the same linear formula; the causal mask removes them.

    Args:
        h: number of heads.
        T_q, T_k: number of queries and keys.
        offset: position of query 0 minus position of key 0 (T_k - T_q for new queries
            against cached keys).
        slopes: the slopes (default :func:`alibi_slopes` ``(h)``).
        dtype, device: of the result.

    Returns:
        The bias, added to the scaled scores before masking.

    Shape:
        () -> (h, T_q, T_k)
    """
    m = alibi_slopes(h, torch.float64) if slopes is None else slopes.to(torch.float64).cpu()
    q_pos = torch.arange(T_q) + offset
    return alibi_bias_from_positions(m, q_pos, torch.arange(T_k)).to(dtype=dtype, device=device)


def alibi_bias_from_positions(slopes: torch.Tensor, q_positions: torch.Tensor,
                              k_positions: torch.Tensor) -> torch.Tensor:
    """-m_h · (p_i - p_j) for queries at positions p_i and keys at p_j, in ``slopes``' dtype.

    Shape:
        slopes (h,); q_positions (T_q,) or (B, T_q); k_positions (T_k,) or (B, T_k)
        -> (h, T_q, T_k) or (B, h, T_q, T_k)
    """
    rel = q_positions[..., :, None] - k_positions[..., None, :]  # (T_q, T_k) or (B, T_q, T_k)
    rel = rel.to(device=slopes.device, dtype=slopes.dtype)
    return -slopes[:, None, None] * rel[..., None, :, :]  # (h, ...) or (B, h, T_q, T_k)


def alibi_score_mod(slopes: torch.Tensor) -> Callable:
    """ALiBi as a score_mod with FlexAttention's signature: score - m_h · (q_idx - kv_idx).

    Args:
        slopes: one slope per head (:func:`alibi_slopes`).

    Returns:
        ``score_mod(score, b, h, q_idx, kv_idx)``; its arguments are broadcastable tensors,
        ``score`` already scaled by 1/sqrt(d_h).

    Shape:
        slopes: (h,); score_mod: broadcast shapes -> the broadcast shape
    """
    if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1:
        raise ValueError(f"slopes must be a 1-D tensor, one slope per head (alibi_slopes(h)), "
                         f"got {getattr(slopes, 'shape', slopes)!r}")

    def score_mod(score, b, h, q_idx, kv_idx):
        m = slopes.to(device=score.device, dtype=score.dtype)[h]
        return score - m * (q_idx - kv_idx).to(score.dtype)

    return score_mod


def sinusoidal_table(T: int, d: int, base: float = 10000.0,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The fixed position table of Vaswani et al. (2017), added to the token vectors.

    Row p: feature 2i is sin(p / base ** (2i / d)), feature 2i + 1 is cos(p / base ** (2i / d)).

    Args:
        T: number of positions (rows).
        d: model width (columns); an odd d ends with a sine feature.
        base: 10000 in the paper.
        dtype: of the result (computed in float64).

    Returns:
        One vector per position.

    Shape:
        () -> (T, d)
    """
    for name, value, low in (("T", T, 0), ("d", d, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    p = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    i2 = torch.arange(0, d, 2, dtype=torch.float64)  # (ceil(d/2),) the 2i of each pair
    angle = p / float(base) ** (i2 / d)  # (T, ceil(d/2))
    table = torch.zeros(T, d, dtype=torch.float64)
    table[:, 0::2] = angle.sin()
    table[:, 1::2] = angle.cos()[:, : d // 2]
    return table.to(dtype)


def default_positions(T: int, padding_mask: torch.Tensor | None = None,
                      device=None) -> torch.Tensor:
    """The positions the library gives tokens when none are passed.

    Without padding: 0 .. T - 1. With a padding mask, positions skip the pads: a real token's
    position is the number of real tokens before it (``cumsum(padding_mask) - 1``; pads get
    the position of the last real token before them, 0 before the first). A left-padded
    sequence then gets the positions it has unpadded, which also holds for absolute schemes,
    and the KV cache numbers new tokens the same way (:mod:`attnbook.kv_cache`).

    Shape:
        padding_mask: (B, T) or None -> (B, T) or (T,) long
    """
    if padding_mask is None:
        return torch.arange(T, device=device)
    return (padding_mask.long().cumsum(dim=-1) - 1).clamp(min=0)  # (B, T)
