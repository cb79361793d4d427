"""What each step of the tiled loops holds: traces recorded by the library's own tiled functions.

Labs 17 and 18 step through FlashAttention's loops one tile at a time. The views are not redrawn
by hand: :func:`trace_forward` and :func:`trace_backward` call the tiled forward and backward of
:mod:`attnbook.online` (``tiled_attention_forward``, ``tiled_attention_backward``) with their
``record`` hook, which copies the running state after every tile, so what a view shows
is what the function computed (and the tests check that the trace adds up to its output). They
run without Triton, on any CPU.

The forward's programs own query blocks, as in the Triton kernel (Chapter 17). The backward
kernel's programs own key blocks (Chapter 18), while ``tiled_attention_backward`` loops over
query blocks outside; each tile's contributions to dQ, dK and dV do not depend on the loop
order, so :func:`trace_backward` replays the recorded tiles in the kernel's order: key block
outside, query blocks inside.

One sequence and one head: ``q`` is (T_q, d), ``k`` and ``v`` are (T_k, d).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..checks import check_finite, check_padding_mask, check_whole_number
from ..fused import check_self_attention_lengths
from ..online import tiled_attention_backward, tiled_attention_forward

# The book's tile colours (scripts/figures/gpu.py): computed, diagonal (masked), masked part.
FULL, DIAGONAL, MASKED_PART, CURRENT = "#4c72b0", "#55a868", "#e8f0e8", "#dd8452"


@dataclass
class ForwardTrace:
    """The recorded forward: the output, its log-sum-exp and one entry per tile, in loop order.

    ``steps[n]`` holds ``i0, i1, j0, j1``, ``masked``, and the running ``m``, ``l`` (b,) and
    ``acc`` (b, d_v) of query block ``i0:i1`` after that tile.
    """

    out: torch.Tensor  # (T_q, d_v)
    lse: torch.Tensor  # (T_q,)
    steps: list[dict]
    block_size: int
    T_q: int
    T_k: int
    causal: bool

    def program(self, i: int) -> list[dict]:
        """The steps of query block ``i`` (its program in the Triton kernel), in order.

        Raises:
            ValueError: ``i`` is not a query block of the trace (0 to n_q - 1).
        """
        _check_block("query block i", i, -(-self.T_q // self.block_size))
        return [s for s in self.steps if s["i0"] == i * self.block_size]

    @staticmethod
    def partial(step: dict) -> torch.Tensor:
        """The block's output if the loop stopped after this tile: ``acc / l`` (0 where l = 0).

        Shape:
            (b, d_v)
        """
        l = step["l"]
        return step["acc"] / l.masked_fill(l == 0, 1.0)[:, None]


@dataclass
class BackwardTrace:
    """The recorded backward, its tiles in the Triton kernel's order (key blocks outside).

    ``D`` is computed before the loop; ``steps[n]`` holds ``i0, i1, j0, j1`` and the tile's
    contributions ``dq`` (b, d), ``dk`` (b, d), ``dv`` (b, d_v).
    """

    dq: torch.Tensor  # (T_q, d) what tiled_attention_backward returned
    dk: torch.Tensor  # (T_k, d)
    dv: torch.Tensor  # (T_k, d_v)
    D: torch.Tensor  # (T_q,) rowsum(dO ∘ O)
    steps: list[dict]
    block_size: int
    T_q: int
    T_k: int
    causal: bool
    _sums: dict = field(default_factory=dict, repr=False)

    def accumulated(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dQ, dK and dV after the first ``n`` steps (0 = before the loop, all zeros).

        Shape:
            -> (T_q, d), (T_k, d), (T_k, d_v)
        """
        self.check_step(n)
        if n not in self._sums:
            dq, dk, dv = (torch.zeros_like(t) for t in (self.dq, self.dk, self.dv))
            for s in self.steps[:n]:
                dq[s["i0"]:s["i1"]] += s["dq"]
                dk[s["j0"]:s["j1"]] += s["dk"]
                dv[s["j0"]:s["j1"]] += s["dv"]
            self._sums[n] = (dq, dk, dv)
        return self._sums[n]

    def check_step(self, n: int) -> None:
        """ValueError unless ``n`` is a step of the trace: 0 (before the loop) to the last."""
        check_whole_number("step n", n, 0)
        if n > len(self.steps):
            raise ValueError(f"n must be between 0 and {len(self.steps)} steps, got {n}")


def _check_block(name: str, value: int, count: int) -> None:
    """ValueError unless ``value`` is a block number, 0 to ``count - 1``."""
    check_whole_number(name, value, 0)
    if value >= count:
        raise ValueError(f"{name} must be between 0 and {count - 1} (the trace has {count} "
                         f"blocks), got {value}")


def _one_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  padding_mask: torch.Tensor | None, block_size: int, causal: bool,
                  caller: str, dout: torch.Tensor | None = None) -> None:
    """TypeError or ValueError, naming what was expected, unless the inputs make a trace:
    one sequence's finite floating (T, d) q, k, v (and dout) of one dtype on one device with
    T_q = T_k when causal, a bool (T_k,) padding_mask, a whole block_size >= 1, a bool causal."""
    tensors = {"q": q, "k": k, "v": v} | ({} if dout is None else {"dout": dout})
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{caller}: {name} must be a torch.Tensor of shape (T, d), got "
                            f"{type(t).__name__}")
    if not q.dim() == k.dim() == v.dim() == 2:
        raise ValueError("a trace follows one sequence and one head: q, k and v must be (T, d), "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if min(q.shape + k.shape + v.shape) < 1:
        raise ValueError(f"{caller} needs at least one query, one key and a head width d >= 1, "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.size(1) != q.size(1) or v.size(0) != k.size(0):
        raise ValueError(f"k must be (T_k, d) with q's head width d = {q.size(1)}, and v "
                         f"(T_k, d_v) with k's T_k = {k.size(0)}; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if causal:
        check_self_attention_lengths(q, k, f"{caller}(causal=True)")
    if not q.is_floating_point() or len({t.dtype for t in tensors.values()}) > 1:
        raise TypeError(f"{caller}: {', '.join(tensors)} must share one floating dtype, got "
                        + ", ".join(str(t.dtype) for t in tensors.values()))
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1 or q.device.type == "meta":
        raise ValueError(f"{caller}: {', '.join(tensors)} must be on one device that holds "
                         "values (not meta: a trace records values), got "
                         + ", ".join(str(t.device) for t in tensors.values()))
    if padding_mask is not None:
        if not isinstance(padding_mask, torch.Tensor):
            raise TypeError(f"padding_mask must be a bool tensor (T_k,) = ({k.size(0)},), True "
                            f"for real keys, or None; got {type(padding_mask).__name__}")
        if tuple(padding_mask.shape) != (k.size(0),):
            raise ValueError(f"padding_mask must be (T_k,) = ({k.size(0)},), True for real keys, "
                             f"got {tuple(padding_mask.shape)}")
        check_padding_mask(padding_mask[None], 1, k.size(0))  # its dtype: bool
        if padding_mask.device != q.device:
            raise ValueError(f"padding_mask must be on q's device {q.device}, got "
                             f"{padding_mask.device}")
    check_whole_number("block_size", block_size, 1)
    check_finite(caller, **tensors)


def trace_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  padding_mask: torch.Tensor | None = None, *, causal: bool = True,
                  block_size: int = 4) -> ForwardTrace:
    """Run :func:`attnbook.online.tiled_attention_forward` and keep every tile's running state.

    Args:
        q, k, v: one sequence, one head, already projected.
        padding_mask: True for real keys; None if all are real.
        causal: block keys ``j > i``.
        block_size: rows and columns per tile.

    Returns:
        A :class:`ForwardTrace`; its ``out`` is the function's output.

    Raises:
        ValueError: if q, k, v are not (T, d) with T_q = T_k when causal, padding_mask is not
            (T_k,), block_size < 1, or an input holds NaN or an infinity.
        TypeError: inputs that are not tensors of one floating dtype, a padding_mask that is
            not bool, a block_size that is not an int, or a causal that is not a bool.

    Shape:
        q: (T_q, d), k: (T_k, d), v: (T_k, d_v), padding_mask: (T_k,)
    """
    _one_sequence(q, k, v, padding_mask, block_size, causal, "trace_forward")
    pad = None if padding_mask is None else padding_mask[None]
    record: list = []
    with torch.no_grad():
        out, lse = tiled_attention_forward(q[None], k[None], v[None], pad, causal, block_size,
                                           record=record)
    steps = [{**s, "m": s["m"][0, :, 0], "l": s["l"][0, :, 0], "acc": s["acc"][0]}
             for s in record]
    return ForwardTrace(out[0], lse[0, :, 0], steps, block_size, q.size(0), k.size(0), causal)


def trace_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor,
                   padding_mask: torch.Tensor | None = None, *, causal: bool = True,
                   block_size: int = 4) -> BackwardTrace:
    """Run the tiled forward and :func:`attnbook.online.tiled_attention_backward`, recording D
    and every tile's contributions, replayed with key blocks outside (the Triton kernel's order).

    Args:
        q, k, v: one sequence, one head, already projected.
        dout: the gradient arriving at the output.
        padding_mask: True for real keys; None if all are real.
        causal: block keys ``j > i``.
        block_size: rows and columns per tile.

    Returns:
        A :class:`BackwardTrace`; its ``dq``, ``dk``, ``dv`` are the function's gradients.

    Raises:
        ValueError, TypeError: as for :func:`trace_forward`, and if dout is not (T_q, d_v) of
            q's dtype.

    Shape:
        q: (T_q, d), k: (T_k, d), v: (T_k, d_v), dout: (T_q, d_v), padding_mask: (T_k,)
    """
    _one_sequence(q, k, v, padding_mask, block_size, causal, "trace_backward", dout)
    if tuple(dout.shape) != (q.size(0), v.size(1)):
        raise ValueError(f"dout must be (T_q, d_v) = ({q.size(0)}, {v.size(1)}), "
                         f"got {tuple(dout.shape)}")
    pad = None if padding_mask is None else padding_mask[None]
    record: list = []
    with torch.no_grad():
        out, lse = tiled_attention_forward(q[None], k[None], v[None], pad, causal, block_size)
        dq, dk, dv = tiled_attention_backward(dout[None], q[None], k[None], v[None], out, lse,
                                              pad, causal, block_size, record=record)
    D = next(s["D"] for s in record if s["step"] == "D")[0, :, 0]
    tiles = [{**s, "dq": s["dq"][0], "dk": s["dk"][0], "dv": s["dv"][0]}
             for s in record if s["step"] == "tile"]
    tiles.sort(key=lambda s: (s["j0"], s["i0"]))  # the kernel's order: key block outside
    return BackwardTrace(dq[0], dk[0], dv[0], D, tiles, block_size, q.size(0), k.size(0),
                         causal)


def tile_kind(i0: int, i1: int, j0: int, j1: int, causal: bool) -> str:
    """``"skipped"`` (wholly in the future), ``"diagonal"`` (needs the mask) or ``"full"``."""
    if causal and j0 >= i1:
        return "skipped"
    if causal and j1 - 1 > i0:
        return "diagonal"
    return "full"


def draw_tiles(ax, T_q: int, T_k: int, block: int, causal: bool = True,
               labels: dict | None = None, current: tuple[int, int] | None = None,
               fontsize: float = 9):
    """The (query block, key block) grid in the book's style: computed tiles blue, diagonal tiles
    green with their masked part hatched, skipped tiles white and marked "skip"; so colour is
    never the only cue. ``labels`` maps (I, J) to a text written in that tile; ``current`` gets
    a thick orange frame and the mark "now".

    Returns:
        The axes, with key blocks along x and query blocks along y (block numbers as ticks).

    Raises:
        TypeError, ValueError: ``T_q``, ``T_k`` not whole numbers >= 0, ``block`` not >= 1.
    """
    from matplotlib.patches import Rectangle

    check_whole_number("T_q", T_q, 0)
    check_whole_number("T_k", T_k, 0)
    check_whole_number("block", block, 1)
    n_q, n_k = -(-T_q // block), -(-T_k // block)
    labels = labels or {}
    for I in range(n_q):
        for J in range(n_k):
            i0, i1 = I * block, min((I + 1) * block, T_q)
            j0, j1 = J * block, min((J + 1) * block, T_k)
            kind = tile_kind(i0, i1, j0, j1, causal)
            colour = {"skipped": "white", "diagonal": DIAGONAL, "full": FULL}[kind]
            ax.add_patch(Rectangle((J, I), 1, 1, fc=colour, ec="grey", lw=0.8))
            if kind == "diagonal":  # the masked corner: scores j > i, pale and hatched
                for r in range(i1 - i0):
                    first = max(i0 + r + 1 - j0, 0)  # first masked column of row i0 + r
                    if first < j1 - j0:
                        ax.add_patch(Rectangle((J + first / block, I + r / block),
                                               (j1 - j0 - first) / block, 1 / block,
                                               fc=MASKED_PART, ec="#4d4d4d", hatch="////", lw=0))
            text = labels.get((I, J), "skip" if kind == "skipped" else "")
            if text:
                dark = kind == "skipped"
                ax.text(J + 0.5, I + 0.5, text, ha="center", va="center", fontsize=fontsize,
                        color="dimgrey" if dark else "white", fontweight="bold",
                        bbox=None if dark else dict(fc="black", alpha=0.45, lw=0, pad=1))
    if current is not None:
        I, J = current
        ax.add_patch(Rectangle((J + 0.04, I + 0.04), 0.92, 0.92, fill=False, ec=CURRENT, lw=3.2))
        ax.text(J + 0.5, I + 0.92, "now", ha="center", va="bottom", fontsize=fontsize - 1,
                color="black", fontweight="bold", bbox=dict(fc="white", lw=0, pad=0.5))
    ax.set_xlim(0, n_k)
    ax.set_ylim(n_q, 0)
    ax.set_aspect("equal")
    ax.set_xticks([J + 0.5 for J in range(n_k)], [str(J) for J in range(n_k)])
    ax.set_yticks([I + 0.5 for I in range(n_q)], [str(I) for I in range(n_q)])
    ax.tick_params(length=0)
    ax.set_xlabel("key block J")
    ax.set_ylabel("query block I")
    return ax


def _rows(a: int, b: int) -> str:
    return f"{a}–{b - 1}" if b - a > 1 else str(a)


def _error_text(e: float) -> str:
    return "0" if e == 0 else f"{e:.0e}"


def _check_exact(trace: ForwardTrace, exact: torch.Tensor) -> None:
    """ValueError unless ``exact`` is the whole output, (T_q, d_v) like ``trace.out``."""
    if not isinstance(exact, torch.Tensor) or exact.shape != trace.out.shape:
        got = tuple(exact.shape) if isinstance(exact, torch.Tensor) else type(exact).__name__
        raise ValueError(f"exact must be the exact output (T_q, d_v) = "
                         f"{tuple(trace.out.shape)}, one sequence like the trace's, got {got}")


def forward_errors(trace: ForwardTrace, exact: torch.Tensor, i: int) -> list[float]:
    """Largest difference between program ``i``'s partial output and ``exact``, after each tile.

    Raises:
        ValueError: ``i`` is not a query block, or ``exact`` is not (T_q, d_v).

    Shape:
        exact: (T_q, d_v)
    """
    _check_exact(trace, exact)
    return [(trace.partial(s) - exact[s["i0"]:s["i1"]]).abs().max().item()
            for s in trace.program(i)]


def forward_alt(trace: ForwardTrace, exact: torch.Tensor, i: int, j: int) -> str:
    """What :func:`show_forward_step` draws for (query block i, key block j), in words."""
    steps = trace.program(i)
    b = trace.block_size
    _check_block("key block j", j, -(-trace.T_k // b))
    i0, i1 = i * b, min((i + 1) * b, trace.T_q)
    errors = forward_errors(trace, exact, i)
    if j < len(steps):
        s = steps[j]
        ms = ", ".join(f"{m:.2f}" for m in s["m"].tolist())
        ls = ", ".join(f"{l:.2f}" for l in s["l"].tolist())
        return (f"Tile grid of {-(-trace.T_q // b)} by {-(-trace.T_k // b)} blocks; program {i} "
                f"(query rows {_rows(i0, i1)}) at key block {j}, tile {j + 1} of {len(steps)}, "
                f"{'diagonal, masked' if s['masked'] else 'no mask'}: Q rows {_rows(i0, i1)} "
                f"and K, V rows {_rows(s['j0'], s['j1'])} in SRAM. Running maximum m = {ms}; "
                f"running sum ℓ = {ls}. Largest error of the partial output: "
                f"{_error_text(errors[j])}.")
    return (f"Tile grid; program {i} (query rows {_rows(i0, i1)}): key block {j} is wholly in "
            f"the future, skipped and never loaded; the loop ended after {len(steps)} "
            f"tile{'s' if len(steps) > 1 else ''} with "
            f"an output error of {_error_text(errors[-1])}.")


def show_forward_step(trace: ForwardTrace, exact: torch.Tensor, i: int, j: int,
                      rows: int = 4):
    """One view of the forward loop: program ``i`` after key block ``j`` (a figure, left open).

    Left, the tile grid: the program's visited tiles numbered in order, the current one framed
    ("now"), skipped tiles marked. Middle, the running ``m`` and ``ℓ`` of the first ``rows``
    rows of the block. Right, the error of the partial output against ``exact`` after each
    tile, down to rounding at the last (diagonal) tile.

    Returns:
        The matplotlib figure.

    Raises:
        ValueError: ``i`` or ``j`` is not a block of the trace, ``exact`` is not (T_q, d_v),
            or ``rows`` < 1.
    """
    import matplotlib.pyplot as plt

    steps = trace.program(i)
    b = trace.block_size
    _check_block("key block j", j, -(-trace.T_k // b))
    check_whole_number("rows", rows, 1)
    i0, i1 = i * b, min((i + 1) * b, trace.T_q)
    now = min(j, len(steps) - 1)
    skipped = j >= len(steps)
    errors = forward_errors(trace, exact, i)
    fig, (a_grid, a_tab, a_err) = plt.subplots(1, 3, figsize=(9.4, 3.2),
                                               gridspec_kw={"width_ratios": [1.0, 0.8, 1.0]})
    labels = {(i, n): str(n + 1) for n in range(now + 1)}
    draw_tiles(a_grid, trace.T_q, trace.T_k, b, trace.causal, labels,
               current=None if skipped else (i, j))
    for I in range(-(-trace.T_q // b)):
        if I != i:  # other programs run elsewhere at the same time: greyed out
            a_grid.add_patch(plt.Rectangle((0, I), a_grid.get_xlim()[1], 1, fc="white",
                                           alpha=0.6, lw=0))
    if skipped:
        a_grid.add_patch(plt.Rectangle((j + 0.04, i + 0.04), 0.92, 0.92, fill=False, ec="black",
                                       lw=2.5, ls="--"))
        title = f"key block {j} is in the future:\nskipped, never loaded"
    else:
        s = steps[j]
        title = (f"tile {j + 1} of {len(steps)}, {'masked' if s['masked'] else 'no mask'}\n"
                 f"in SRAM: Q {_rows(i0, i1)}, K and V {_rows(s['j0'], s['j1'])}")
    a_grid.set_title(f"program {i}: " + title, fontsize=9)

    s = steps[now]
    prev = steps[now - 1] if now > 0 else None
    a_tab.axis("off")
    lines = [f"after tile {now + 1} of {len(steps)}", "", r" row      m      $\ell$"]
    for r in range(min(rows, i1 - i0)):
        m, l = s["m"][r].item(), s["l"][r].item()
        grew = prev is not None and m > prev["m"][r].item() and not skipped
        lines.append(f"{i0 + r:4d} {m:6.2f}{'↑' if grew else ' '} {l:6.2f}")
    lines += ["", "↑ new maximum: the old", r"$\ell$ and acc were rescaled", "by exp(m_old − m)"]
    a_tab.text(0.02, 0.95, "\n".join(lines), family="monospace", fontsize=9, va="top",
               transform=a_tab.transAxes)
    a_tab.set_title("running maximum m\nand sum ℓ (in registers)", fontsize=9)

    floor = 1e-17
    xs = list(range(1, len(steps) + 1))
    heights = [max(e, floor) for e in errors]
    bars = a_err.bar(xs, heights, color=[FULL if n <= now else "white" for n in range(len(steps))],
                     edgecolor="black", lw=0.8)
    for n, bar in enumerate(bars):
        if n > now:
            bar.set_hatch("..")  # not yet computed at this step
        elif n == now and not skipped:
            bar.set_edgecolor(CURRENT)
            bar.set_linewidth(2.5)
        if n <= now:
            a_err.text(bar.get_x() + bar.get_width() / 2, heights[n] * 1.6,
                       _error_text(errors[n]), ha="center", va="bottom", fontsize=8)
    a_err.set_yscale("log")
    a_err.set_ylim(floor, 1e3)
    a_err.set_xticks(xs, [f"{n}" for n in xs])
    a_err.set_xlabel("after tile (dotted: not yet)")
    a_err.set_ylabel("largest error")
    a_err.set_title("error of the partial output\nacc / ℓ against the exact", fontsize=9)
    fig.tight_layout()
    return fig


def backward_alt(trace: BackwardTrace, reference: tuple, n: int) -> str:
    """What :func:`show_backward_step` draws at step ``n`` (0 = D, before the loop), in words."""
    _check_reference(trace, reference, n)
    b = trace.block_size
    if n == 0:
        return (f"Before the loop: D = rowsum(dO ∘ O) for all {trace.T_q} queries, one number "
                f"each, from {min(trace.D.tolist()):.2f} to {max(trace.D.tolist()):.2f}; no tile "
                "computed yet; every gradient is zero.")
    s = trace.steps[n - 1]
    I, J = s["i0"] // b, s["j0"] // b
    column = [t for t in trace.steps if t["j0"] == s["j0"]]
    adds = sum(1 for t in trace.steps[:n] if t["i0"] == s["i0"])
    errors = _remaining(trace, reference, n)
    return (f"Step {n} of {len(trace.steps)}: program {J} (key rows {_rows(s['j0'], s['j1'])}) "
            f"at query block {I}, tile {column.index(s) + 1} of {len(column)} in its column; "
            f"dK and dV of key block {J} accumulate in registers; dQ rows "
            f"{_rows(s['i0'], s['i1'])} receive atomic add number {adds}. Distance from "
            f"autograd's gradients, relative to their size: dQ {errors[0]:.2f}, "
            f"dK {errors[1]:.2f}, dV {errors[2]:.2f}.")


def _check_reference(trace: BackwardTrace, reference, n: int) -> None:
    """ValueError unless ``n`` is a step and ``reference`` is (dQ, dK, dV) shaped as the trace's."""
    trace.check_step(n)
    want = [tuple(t.shape) for t in (trace.dq, trace.dk, trace.dv)]
    got = ([tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            for t in reference] if isinstance(reference, (tuple, list))
           else type(reference).__name__)
    if got != want:
        raise ValueError(f"reference must be the three gradients (dQ, dK, dV) of shapes {want}, "
                         f"got {got}")


def _remaining(trace: BackwardTrace, reference: tuple, n: int) -> list[float]:
    """‖reference − accumulated‖ / ‖reference‖ for dQ, dK, dV after ``n`` steps (the distance
    itself where a reference gradient is all zeros: 0 once it is reached, never 0 / 0)."""
    errors = []
    for a, r in zip(trace.accumulated(n), reference):
        size = r.norm()
        errors.append(((r - a).norm() / (size if size > 0 else 1.0)).item())
    return errors


def show_backward_step(trace: BackwardTrace, reference: tuple, n: int):
    """One view of the backward loop, key blocks outside, at step ``n`` (0 = D, before the loop).

    Left, the tile grid with the tiles done numbered and the current one framed; beside it the
    dQ row blocks with the atomic adds each has received, below it the dK, dV blocks: waiting,
    accumulating in registers, or stored. Middle, D, computed before the loop. Right, how far
    the accumulated dQ, dK, dV still are from ``reference`` (autograd's gradients).

    Returns:
        The matplotlib figure.

    Raises:
        ValueError: ``n`` is not a step (0 to the number of tiles), or ``reference`` is not
            three gradients shaped like the trace's.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    _check_reference(trace, reference, n)
    b = trace.block_size
    n_q, n_k = -(-trace.T_q // b), -(-trace.T_k // b)
    done = trace.steps[:n]
    current = trace.steps[n - 1] if n > 0 else None
    fig, (a_grid, a_D, a_err) = plt.subplots(1, 3, figsize=(9.6, 3.3),
                                             gridspec_kw={"width_ratios": [1.3, 0.8, 1.1]})
    labels = {(s["i0"] // b, s["j0"] // b): str(k + 1) for k, s in enumerate(done)}
    cur = None if current is None else (current["i0"] // b, current["j0"] // b)
    draw_tiles(a_grid, trace.T_q, trace.T_k, b, trace.causal, labels, current=cur,
               fontsize=9 if max(n_q, n_k) <= 4 else 7.5)
    for I in range(n_q):  # dQ row blocks: how many atomic adds so far
        k = sum(1 for s in done if s["i0"] // b == I)
        hit = cur is not None and cur[0] == I
        a_grid.add_patch(Rectangle((n_k + 0.25, I + 0.1), 0.9, 0.8, fc="#f2f2f2",
                                   ec=CURRENT if hit else "grey", lw=2.5 if hit else 0.8))
        a_grid.text(n_k + 0.7, I + 0.5, f"+{k}", ha="center", va="center", fontsize=9)
    a_grid.text(n_k + 0.7, n_q + 0.7, "dQ\nadds", ha="center", va="center", fontsize=8.5)
    for J in range(n_k):  # dK, dV blocks: waiting, in registers, stored
        column = [s for s in trace.steps if s["j0"] // b == J]
        k = sum(1 for s in done if s["j0"] // b == J)
        state = "—" if k == 0 else "✓" if k == len(column) else f"{k}/{len(column)}"
        hit = cur is not None and cur[1] == J
        a_grid.add_patch(Rectangle((J + 0.05, n_q + 0.25), 0.9, 0.9, fc="#f2f2f2",
                                   ec=CURRENT if hit else "grey", lw=2.5 if hit else 0.8))
        a_grid.text(J + 0.5, n_q + 0.7, state, ha="center", va="center", fontsize=8.5)
    a_grid.text(-0.1, n_q + 0.7, "dK, dV\n(✓ stored)", ha="right", va="center", fontsize=8.5)
    a_grid.set_xlim(0, n_k + 1.2)
    a_grid.set_ylim(n_q + 1.2, 0)
    if current is None:
        a_grid.set_title("before the loop: D = rowsum(dO ∘ O)", fontsize=8.5)
    else:
        a_grid.set_title(f"step {n}: program {cur[1]} (key block {cur[1]}) at query block "
                         f"{cur[0]}", fontsize=8.5)

    rows = torch.arange(trace.T_q)
    hits = (torch.zeros(trace.T_q, dtype=torch.bool) if current is None
            else (rows >= current["i0"]) & (rows < current["i1"]))
    bars = a_D.barh(rows.tolist(), trace.D.tolist(), color=[CURRENT if h else FULL for h in hits],
                    edgecolor="black", lw=0.4)
    for bar, h in zip(bars, hits):
        if h:
            bar.set_hatch("////")  # the rows of the current query block
    a_D.axvline(0, color="black", lw=0.6)
    a_D.set_ylim(trace.T_q - 0.5, -0.5)
    a_D.set_yticks(list(range(0, trace.T_q, b)))
    a_D.set_ylabel("query i")
    a_D.set_xlabel("D_i")
    a_D.set_title("D, before the loop\n(hatched: rows read now)", fontsize=8.5)

    steps = list(range(len(trace.steps) + 1))
    errors = [_remaining(trace, tuple(reference), k) for k in steps]
    for c, (name, marker, ls) in enumerate((("dQ", "o", "-"), ("dK", "s", "--"),
                                            ("dV", "^", ":"))):
        ys = [e[c] for e in errors]
        a_err.plot(steps, ys, color="lightgrey", lw=1)
        a_err.plot(steps[:n + 1], ys[:n + 1], marker=marker, ms=4, lw=1.4, ls=ls, label=name)
    a_err.axvline(n, color=CURRENT, lw=2)
    a_err.set_ylim(bottom=0)
    a_err.set_xticks(steps[::2])
    a_err.set_xlabel("step (0: D only)")
    a_err.set_ylabel("‖autograd − accumulated‖ / ‖autograd‖")
    a_err.set_title("distance from autograd's gradients", fontsize=8.5)
    a_err.legend(fontsize=8.5, loc="upper right")
    fig.tight_layout()
    return fig
