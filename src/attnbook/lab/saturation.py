"""Step 3, measured: why raw dot products saturate the softmax and how dividing by sqrt(d) helps.

The functions draw queries and keys with independent zero-mean, unit-variance entries (the
assumption of the variance theorem) and measure what the softmax does with their scores: how
spread out a row of scores is, how much weight its largest entry takes, the entropy of the
weights, the norm of the softmax Jacobian (the factor a gradient is multiplied by on its way
from the weights to the scores), and the gradient that finally reaches the query, which also
carries the factor 1/divisor. Sampling is done in float64 from a CPU generator, so the numbers
are the same on every machine.

Two ways to draw the queries and keys (``init``): ``"unit"``, entries N(0, 1), the theorem's
assumption; and ``"linear"``, a realistic layer at initialisation: token vectors with N(0, 1)
entries projected by matrices with ``nn.Linear``'s default initialisation (uniform on
±1/√fan_in, variance 1/(3·fan_in)), whose query and key entries have variance 1/3. What
saturates the softmax is the variance of the raw scores, d·σ_q²·σ_k²: d with ``"unit"``, d/9
with ``"linear"``.
"""

from __future__ import annotations

import math

import torch

from ..softmax import softmax_jacobian, stable_softmax

#: The divisors the book compares: none, the square root of the width, the width itself.
SCALES = ("none", "sqrt(d)", "d")

#: How queries and keys are drawn: N(0, 1) entries, or through nn.Linear's default init.
INITS = ("unit", "linear")


def divisor(d: int, scale: str | float = "sqrt(d)") -> float:
    """The number the raw scores are divided by: 1, sqrt(d) or d (or any float given).

    Args:
        d: width of the queries and keys.
        scale: ``"none"``, ``"sqrt(d)"``, ``"d"``, or a number to divide by.

    Returns:
        The divisor, a float.
    """
    if not isinstance(scale, str):
        return float(scale)
    if scale == "none":
        return 1.0
    if scale == "sqrt(d)":
        return math.sqrt(d)
    if scale == "d":
        return float(d)
    raise ValueError(f"scale must be one of {SCALES} or a number, got {scale!r}")


def _generator(seed: int | torch.Generator) -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    return torch.Generator().manual_seed(seed)


def linear_init_weight(d_in: int, d_out: int, seed: int | torch.Generator = 0,
                       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A ``(d_in, d_out)`` matrix W drawn as ``nn.Linear(d_in, d_out)`` draws its weight.

    ``nn.Linear`` initialises ``weight`` (shape ``(out, in)``) with
    ``kaiming_uniform_(a=sqrt(5))``: uniform on ±1/√d_in, variance 1/(3·d_in). This returns its
    transpose, the book's W (``x @ W``). In float32 and with the same seed it is exactly
    ``nn.Linear``'s weight after ``torch.manual_seed(seed)``, transposed; in float64 (the
    default, as the rest of this module) it has the same distribution, not the same numbers.

    Args:
        d_in: input width (fan-in).
        d_out: output width.
        seed: a seed or a CPU ``torch.Generator``.
        dtype: the dtype to draw in.

    Returns:
        W, of the given dtype.

    Shape:
        -> (d_in, d_out)
    """
    weight = torch.empty(d_out, d_in, dtype=dtype)  # (out, in), as nn.Linear stores it
    torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=_generator(seed))
    return weight.T


def _check_init(init: str) -> None:
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")


def _queries_keys_values(d: int, rows: int, keys: int, init: str, g: torch.Generator):
    """q (rows, 1, d), K (rows, keys, d), V (rows, keys, d) drawn as ``init`` says."""
    _check_init(init)
    if init == "unit":
        q = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)  # (rows, 1, d)
        k = torch.randn(rows, keys, d, generator=g, dtype=torch.float64)  # (rows, keys, d)
        v = torch.randn(rows, keys, d, generator=g, dtype=torch.float64)  # (rows, keys, d)
        return q, k, v
    # One layer's W_q, W_k, W_v (as nn.Linear(d, d) draws them) for every row.
    w_q, w_k, w_v = (linear_init_weight(d, d, g) for _ in range(3))  # (d, d) each
    x_q = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)  # (rows, 1, d): query token
    x_k = torch.randn(rows, keys, d, generator=g, dtype=torch.float64)  # (rows, keys, d)
    return x_q @ w_q, x_k @ w_k, x_k @ w_v


def dot_products(d: int, n: int, seed: int | torch.Generator = 0) -> torch.Tensor:
    """``n`` independent dot products q·k of random vectors with N(0, 1) entries.

    Args:
        d: width of q and k.
        n: how many (q, k) pairs to draw.
        seed: a seed or a CPU ``torch.Generator`` (float64 on the CPU: reproducible anywhere).

    Returns:
        The dot products, float64; their variance is about ``d`` (the variance theorem).

    Shape:
        -> (n,)
    """
    g = _generator(seed)
    q = torch.randn(n, d, generator=g, dtype=torch.float64)  # (n, d)
    k = torch.randn(n, d, generator=g, dtype=torch.float64)  # (n, d)
    return (q * k).sum(dim=-1)  # (n,)


def score_rows(d: int, rows: int, keys: int, scale: str | float = "sqrt(d)",
               seed: int | torch.Generator = 0, init: str = "unit") -> torch.Tensor:
    """Rows of scores: each row is one random query against its own ``keys`` random keys.

    Args:
        d: width of q and k.
        rows: how many queries (rows) to draw.
        keys: keys per query (the length of a row, like T).
        scale: what the dot products are divided by (see :func:`divisor`).
        seed: a seed or a CPU ``torch.Generator``.
        init: ``"unit"`` (entries N(0, 1)) or ``"linear"`` (token vectors through one layer's
            ``nn.Linear`` default initialisation; entries of variance 1/3), see the module
            docstring.

    Returns:
        Scores ``q · k_j / divisor``, float64.

    Shape:
        -> (rows, keys)
    """
    g = _generator(seed)
    _check_init(init)
    if init == "unit":  # only q and K, drawn as _queries_keys_values draws them
        q = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)  # (rows, 1, d)
        k = torch.randn(rows, keys, d, generator=g, dtype=torch.float64)  # (rows, keys, d)
    else:
        q, k, _ = _queries_keys_values(d, rows, keys, init, g)
    raw = (q @ k.transpose(-2, -1)).squeeze(-2)  # (rows, keys)
    return raw / divisor(d, scale)


def logit_spread(scores: torch.Tensor) -> torch.Tensor:
    """Standard deviation of each row of scores: the softmax only sees differences within a row.

    Shape:
        (..., n) -> (...)
    """
    return scores.std(dim=-1)


def max_weight(weights: torch.Tensor) -> torch.Tensor:
    """The largest weight of each row: 1/n for uniform weights, 1 when one key takes all.

    Shape:
        (..., n) -> (...)
    """
    return weights.amax(dim=-1)


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each row of weights in nats, -sum p log p: log n when uniform, 0 when one-hot.

    Args:
        weights: probabilities along the last dimension.

    Returns:
        The entropy of each row; a zero weight contributes 0 (the limit of p log p).

    Shape:
        (..., n) -> (...)
    """
    # xlogy(p, p) = p * log p, and 0 (not NaN) where p = 0.
    return -torch.special.xlogy(weights, weights).sum(dim=-1)


def jacobian_norm(weights: torch.Tensor, ord: int | str = 2) -> torch.Tensor:
    """Norm of the softmax Jacobian J = diag(p) - p pᵀ at each row of weights.

    The spectral norm (``ord=2``, the default) is the most a unit change of the scores can move
    the weights, so it bounds every gradient that flows back through the softmax. It is 1/n
    for uniform weights and 0 for one-hot weights.

    Args:
        weights: probabilities along the last dimension.
        ord: ``2`` for the spectral norm, ``"fro"`` for the Frobenius norm.

    Returns:
        One norm per row.

    Shape:
        (..., n) -> (...)
    """
    jac = softmax_jacobian(weights)  # (..., n, n)
    if ord == 2:
        # J is symmetric positive semi-definite, so its norm is its largest eigenvalue.
        return torch.linalg.eigvalsh(jac)[..., -1].clamp_min(0.0)
    return torch.linalg.matrix_norm(jac, ord=ord)


def saturation(scores: torch.Tensor) -> dict[str, float]:
    """The measurements of a batch of score rows, each summarised by its median over the rows.

    The median, not the mean: once raw scores spread widely, many rows are saturated (Jacobian
    norm near 0) while the rows whose top two scores happen to be close are not, and those would
    dominate a mean.

    Args:
        scores: rows of (already scaled) scores.

    Returns:
        ``spread``, ``max_weight``, ``entropy`` and ``jacobian_norm`` (medians over the rows),
        and ``saturated``: the fraction of rows whose largest weight exceeds 0.99.

    Shape:
        scores: (rows, n)
    """
    weights = stable_softmax(scores, dim=-1)  # (rows, n)
    top = max_weight(weights)  # (rows,)
    return {
        "spread": logit_spread(scores).median().item(),
        "max_weight": top.median().item(),
        "entropy": entropy(weights).median().item(),
        "jacobian_norm": jacobian_norm(weights).median().item(),
        "saturated": (top > 0.99).double().mean().item(),
    }


def saturation_sweep(ds, scales=SCALES, rows: int = 400, keys: int = 16,
                     seed: int = 0, init: str = "unit") -> list[dict]:
    """Measure saturation for each width in ``ds`` and each scaling rule in ``scales``.

    Every rule sees the same queries and keys for a given width, so the rows of the result
    differ only by what the scores were divided by.

    Args:
        ds: the widths d to try, e.g. 4, 8, ..., 1024.
        scales: the rules to compare (see :func:`divisor`).
        rows: score rows per width (the sample the medians are taken over).
        keys: keys per row (the length of a row, like T).
        seed: one seed for the whole sweep; each width gets its own generator from it.
        init: how queries and keys are drawn (see :func:`score_rows`).

    Returns:
        One dict per (width, rule): ``d``, ``scale`` and the measurements of :func:`saturation`.
    """
    out = []
    for d in ds:
        # Seeding per width makes a width's numbers independent of the other widths in ds.
        raw = score_rows(d, rows, keys, "none", seed=seed * 100_003 + d, init=init)  # (rows, keys)
        for scale in scales:
            out.append({"d": d, "scale": scale, **saturation(raw / divisor(d, scale))})
    return out


def variance_sweep(ds, n: int = 4000, seed: int = 0) -> list[dict[str, float]]:
    """Empirical variance of q·k for each width in ``ds`` (the variance theorem says it is d).

    Args:
        ds: the widths d to try.
        n: dot products per width.
        seed: one seed for the whole sweep; each width gets its own generator from it.

    Returns:
        One dict per width: ``d``, ``var`` (of q·k) and ``var_over_d``, which is also the
        variance of the scaled score q·k / sqrt(d).
    """
    out = []
    for d in ds:
        s = dot_products(d, n, seed=seed * 100_003 + d)  # (n,)
        var = s.var().item()
        out.append({"d": d, "var": var, "var_over_d": var / d})
    return out


def query_gradient(d: int, rows: int, keys: int, scale: str | float = "sqrt(d)",
                   seed: int | torch.Generator = 0, init: str = "unit") -> torch.Tensor:
    """The length of the gradient that reaches each query, ‖∂L/∂q‖, measured with autograd.

    Each row is one query q against its own ``keys`` keys K and values V (entries N(0, 1), the
    same draws as :func:`score_rows` for q and K), with output y = softmax(q Kᵀ / τ) V and
    loss L = g · y for a random upstream gradient g (N(0, 1) entries). The chain rule gives
    ∂L/∂q = (1/τ) Kᵀ J V gᵀ: the softmax Jacobian J shrinks when the row saturates, while the
    factor 1/τ is largest for raw scores (τ = 1). This measures the product of both.

    Args:
        d: width of q, k and v.
        rows: how many queries (rows) to draw.
        keys: keys per query.
        scale: what the dot products are divided by, τ (see :func:`divisor`).
        seed: a seed or a CPU ``torch.Generator``.
        init: how q, K and V are drawn (see :func:`score_rows`; with ``"linear"`` the values
            are the key tokens through a third matrix, W_v).

    Returns:
        ‖∂L/∂q‖ for every row, float64.

    Shape:
        -> (rows,)
    """
    g = _generator(seed)
    q, k, v = _queries_keys_values(d, rows, keys, init, g)  # (rows, 1, d), (rows, keys, d) x 2
    upstream = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)  # (rows, 1, d)
    q.requires_grad_(True)
    weights = stable_softmax(q @ k.transpose(-2, -1) / divisor(d, scale), dim=-1)  # (rows, 1, keys)
    y = weights @ v  # (rows, 1, d)
    # Rows do not interact, so one backward pass gives every row's own gradient.
    (grad,) = torch.autograd.grad((y * upstream).sum(), q)  # (rows, 1, d)
    return grad.norm(dim=-1).squeeze(-1)  # (rows,)


def gradient_sweep(ds, scales=SCALES, rows: int = 400, keys: int = 16,
                   seed: int = 0, init: str = "unit") -> list[dict]:
    """Median ‖∂L/∂q‖ (see :func:`query_gradient`) for each width in ``ds`` and rule in ``scales``.

    For a given width every rule sees the same queries, keys, values and upstream gradients,
    and the same queries and keys as :func:`saturation_sweep` with the same seed.

    Args:
        ds: the widths d to try.
        scales: the rules to compare (see :func:`divisor`).
        rows: rows per width (the sample the median is taken over).
        keys: keys per row.
        seed: one seed for the whole sweep; each width gets its own generator from it.
        init: how q, K and V are drawn (see :func:`query_gradient`).

    Returns:
        One dict per (width, rule): ``d``, ``scale``, ``grad`` (the median of ‖∂L/∂q‖ over the
        rows) and ``grad_per_entry`` (the same divided by √d: the typical size of one entry).
    """
    out = []
    for d in ds:
        for scale in scales:
            norms = query_gradient(d, rows, keys, scale, seed=seed * 100_003 + d,
                                   init=init)  # (rows,)
            grad = norms.median().item()
            out.append({"d": d, "scale": scale, "grad": grad,
                        "grad_per_entry": grad / math.sqrt(d)})
    return out
