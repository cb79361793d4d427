"""Ring attention, recorded: what every rank holds and computes at every step, and drawn.

:func:`trace_ring` runs :func:`attnbook.ring.simulate_ring_grads` with its ``record`` hook and
keeps what the library's own per-step code did: for each pass (forward, backward), step and
rank, the key/value shard it held, the (query chunk, key chunk) pairs it computed with their
partial results, and, in the backward, the dK/dV sums it passed on. Nothing here recomputes
attention: :func:`replay_forward` merges the recorded partial states and
:func:`replay_backward` adds the recorded gradient shares, and the tests check that both give
the ring's own output and gradients, bit for bit. :func:`draw_ring_step` draws one step from
the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..checks import check_whole_number
from ..ring import (
    chunk_ids,
    finish_state,
    merge_block,
    new_state,
    simulate_ring_grads,
    unshard,
)

PASSES = ("forward", "backward")
RANK_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]


@dataclass
class RingTrace:
    """The record of one ring run (forward and backward) and the run's own results.

    Attributes:
        world, layout, causal, T: the run's settings; ``chunk`` tokens per chunk (c).
        events: the dicts the ring's ``record`` hook received, in order (see
            :func:`attnbook.ring.simulate_ring_grads`).
        out, dq, dk, dv: what the ring returned (whole sequence).
    """

    world: int
    layout: str
    causal: bool
    T: int
    chunk: int
    events: list[dict] = field(repr=False)
    out: torch.Tensor = field(repr=False)
    dq: torch.Tensor = field(repr=False)
    dk: torch.Tensor = field(repr=False)
    dv: torch.Tensor = field(repr=False)

    def pairs(self, pass_: str, step: int, rank: int) -> list[tuple[int, int, bool]]:
        """(query chunk, key chunk, diagonal) of the pairs ``rank`` computed at ``step``."""
        _check_pass(pass_)
        return [(e["q_chunk"], e["k_chunk"], e["diagonal"]) for e in self.events
                if e["kind"] == "pair" and e["pass_"] == pass_ and e["step"] == step
                and e["rank"] == rank]

    def source(self, step: int, rank: int) -> int:
        """Whose key/value shard ``rank`` held at ``step`` (read from the ring's own record of
        the backward pass, which records a send for every rank and step)."""
        for e in self.events:
            if e["kind"] == "send" and e["step"] == step and e["rank"] == rank:
                return e["src"]
        raise ValueError(f"no step {step} for rank {rank} in a ring of {self.world}")

    def skipped(self, pass_: str, step: int, rank: int) -> list[tuple[int, int]]:
        """The pairs of the held shard that ``rank`` did not compute (wholly in the future)."""
        done = {(a, b) for a, b, _ in self.pairs(pass_, step, rank)}
        q_chunks = chunk_ids(rank, self.world, self.layout)
        k_chunks = chunk_ids(self.source(step, rank), self.world, self.layout)
        return [(a, b) for a in q_chunks for b in k_chunks if (a, b) not in done]

    def carriers(self, step: int, rank: int) -> list[int]:
        """The ranks whose shares are in the dK/dV sums that ``rank`` passes on at ``step``:
        every rank that held the same shard at this step or before, in ring order."""
        src = self.source(step, rank)
        return [r for t in range(step + 1) for r in range(self.world)
                if self.source(t, r) == src]

    def sends(self, step: int) -> list[dict]:
        """The backward's dK/dV messages of ``step``, rank by rank (``src``, ``to``, sums)."""
        return [e for e in self.events if e["kind"] == "send" and e["step"] == step]

    def work(self, pass_: str = "forward") -> list[list[int]]:
        """Scores computed by each rank at each step, ``[step][rank]``, from the recorded pairs
        (a diagonal pair counts its lower triangle; padding tokens count too)."""
        _check_pass(pass_)
        c = self.chunk
        table = [[0] * self.world for _ in range(self.world)]
        for e in self.events:
            if e["kind"] == "pair" and e["pass_"] == pass_:
                table[e["step"]][e["rank"]] += c * (c + 1) // 2 if e["diagonal"] else c * c
        return table


def _check_pass(pass_: str) -> None:
    """ValueError unless ``pass_`` is ``"forward"`` or ``"backward"``."""
    if pass_ not in PASSES:
        raise ValueError(f"pass_ must be one of {PASSES}, got {pass_!r}")


def trace_ring(q, k, v, dout, padding_mask=None, *, world: int, layout: str = "zigzag",
               causal: bool = True, block_size: int = 256, kernel: str = "tiled") -> RingTrace:
    """Run the simulated ring forward and backward with its record hook on.

    Args:
        q, k, v, dout: the whole sequence's queries, keys, values and output gradient.
        padding_mask, world, layout, causal, block_size, kernel: as for
            :func:`attnbook.ring.simulate_ring_grads`.

    Returns:
        A :class:`RingTrace`.

    Raises:
        ValueError, TypeError: inputs the ring does not take, named by
            :func:`attnbook.ring.simulate_ring_grads`, which checks them first
            (:func:`attnbook.ring.check_ring_inputs`).

    Shape:
        q, k, v, dout: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T)
    """
    events: list[dict] = []
    out, dq, dk, dv = simulate_ring_grads(q, k, v, dout, padding_mask, world=world,
                                          causal=causal, layout=layout,
                                          block_size=block_size, kernel=kernel, record=events)
    T = q.size(-2)
    chunk = -(-T // (2 * world))
    return RingTrace(world, layout, causal, T, chunk, events, out, dq, dk, dv)


def _rank_tensor_like(trace: RingTrace, template: torch.Tensor) -> list:
    """One zero (..., 2c, width) tensor per rank, shaped like a recorded chunk ``template``."""
    shape = list(template.shape)
    shape[-2] = 2 * trace.chunk
    return [template.new_zeros(shape) for _ in range(trace.world)]


def _half(trace: RingTrace, rank: int, chunk: int) -> slice:
    """Where ``chunk`` sits in ``rank``'s shard (first or second half)."""
    a = chunk_ids(rank, trace.world, trace.layout).index(chunk)
    return slice(a * trace.chunk, (a + 1) * trace.chunk)


def replay_forward(trace: RingTrace) -> torch.Tensor:
    """The output from the recorded partial states alone: merge them in recorded order.

    Shape:
        -> (B, T, d_v) or (B, h, T, d_v), like ``trace.out``
    """
    pairs = [e for e in trace.events if e["kind"] == "pair" and e["pass_"] == "forward"]
    template = pairs[0]["out"]
    acc = _rank_tensor_like(trace, template)
    states = [new_state(a, a) for a in acc]
    for e in pairs:
        merge_block(states[e["rank"]], _half(trace, e["rank"], e["q_chunk"]), e["out"], e["lse"])
    outs = [finish_state(s, template.dtype)[0] for s in states]
    return unshard(outs, trace.T, trace.layout)


def replay_backward(trace: RingTrace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv from the recorded per-pair shares alone, added in the ring's order.

    dq: each share added to its rank's rows. dk, dv: at every step, a rank's shares for the
    shard it holds are summed, and that step sum is added to the sums the shard brought along;
    this is what travels. Also checks the record's messages: each must carry exactly these
    sums, and the last one goes home to the shard's owner.

    Raises:
        AssertionError: if a recorded message differs from the sums of the recorded shares.
    """
    P, layout = trace.world, trace.layout
    backward = [e for e in trace.events if e["pass_"] == "backward"]
    pairs = [e for e in backward if e["kind"] == "pair"]
    dq = _rank_tensor_like(trace, pairs[0]["dq"])
    carried: list = [None] * P  # the dk, dv sums of shard s, wherever they are now
    for step in range(P):
        for rank in range(P):
            src = trace.source(step, rank)
            dk_s = _rank_tensor_like(trace, pairs[0]["dk"])[0]  # this step's shares
            dv_s = _rank_tensor_like(trace, pairs[0]["dv"])[0]
            for e in pairs:
                if e["step"] == step and e["rank"] == rank:
                    dq[rank][..., _half(trace, rank, e["q_chunk"]), :] += e["dq"]
                    dk_s[..., _half(trace, src, e["k_chunk"]), :] += e["dk"]
                    dv_s[..., _half(trace, src, e["k_chunk"]), :] += e["dv"]
            if carried[src] is not None:
                dk_s += carried[src][0]
                dv_s += carried[src][1]
            carried[src] = dk_s, dv_s
            [sent] = [e for e in trace.sends(step) if e["rank"] == rank]
            assert torch.equal(sent["dk"], dk_s) and torch.equal(sent["dv"], dv_s), \
                f"step {step}, rank {rank}: the message is not the sum of the shares"
            assert step < P - 1 or sent["to"] == src, "the last pass must bring dK, dV home"
    dk = [carried[r][0] for r in range(P)]
    dv = [carried[r][1] for r in range(P)]
    return unshard(dq, trace.T, layout), unshard(dk, trace.T, layout), unshard(dv, trace.T, layout)


def _check_view(step: int, pass_: str) -> None:
    """ValueError unless ``step`` is a whole number >= 0 and ``pass_`` a pass of the ring."""
    check_whole_number("step", step, 0)
    _check_pass(pass_)


def describe_step(trace: RingTrace, step: int, pass_: str = "forward") -> str:
    """One view's alternative text: what each rank holds, computes, skips, or sends.

    A ``step`` past the last (``world - 1``) is described as the finished ring.
    """
    _check_view(step, pass_)
    P = trace.world
    head = f"{pass_.capitalize()} pass, {trace.layout} layout, P = {P}"
    if step >= P:
        return (f"{head}: the ring has only {P} steps (0 to {P - 1}), so step {step} does not "
                f"occur; the grid shows every chunk pair done.")
    parts = []
    for r in range(P):
        src, n, skip = trace.source(step, r), len(trace.pairs(pass_, step, r)), \
            len(trace.skipped(pass_, step, r))
        does = f"computes {n} chunk pair{'s' * (n != 1)}" if n else "is idle"
        text = f"rank {r} holds the keys and values of rank {src}, {does}"
        if skip:
            text += f", skips {skip} in the future"
        if pass_ == "backward":
            to = (r + 1) % P
            text += (f", passes dK, dV of shard {src} to rank {to}"
                     + (" (home)" if to == src else ""))
        parts.append(text)
    return (f"{head}, step {step} of {P - 1}: " + "; ".join(parts) + ". The grid of query "
            "chunk by key chunk marks each pair computed at this step with its rank's number, "
            "pairs skipped as future with hatching and an x, and pairs of earlier steps with a "
            "dot.")


def draw_ring_step(trace: RingTrace, step: int, pass_: str = "forward", ax=None):
    """Draw one step from the record: the chunk grid and, per rank, what it holds and does.

    Left, the (query chunk, key chunk) grid of the whole sequence: pairs computed at this
    step carry their rank's number and colour, pairs skipped by causality are hatched with an
    x, pairs of earlier steps a dot. Right, one line per rank: the shard it holds, the pairs
    it computes or "idle", and in the backward where its dK/dV sums go.

    Returns:
        The matplotlib figure (left open; the caller shows or saves it).

    Raises:
        ValueError: a negative or non-whole ``step``, an unknown ``pass_``, or an ``ax`` (the
            view is a figure of two panels of its own).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    _check_view(step, pass_)
    if ax is not None:
        raise ValueError("draw_ring_step draws a figure of its own (the chunk grid and the "
                         "ranks' table); call it without ax and use the figure it returns")
    P, n = trace.world, 2 * trace.world
    fig, (grid, table) = plt.subplots(1, 2, figsize=(6.4, 2.6),
                                      gridspec_kw={"width_ratios": [1, 1.45], "wspace": 0.04})
    fig.subplots_adjust(left=0.07, right=0.995, bottom=0.15, top=0.9)
    last = min(step, P - 1) if step < P else P - 1
    for t in range(last + 1):
        current = t == step
        for r in range(P):
            colour = RANK_COLOURS[r % len(RANK_COLOURS)]
            for a, b, _ in trace.pairs(pass_, t, r):
                if current:
                    grid.add_patch(Rectangle((b, a), 1, 1, facecolor=colour, alpha=0.85,
                                             edgecolor="white"))
                    grid.text(b + 0.5, a + 0.5, str(r), ha="center", va="center",
                              fontsize=9, color="white", fontweight="bold")
                else:
                    grid.add_patch(Rectangle((b, a), 1, 1, facecolor="0.88",
                                             edgecolor="white"))
                    grid.text(b + 0.5, a + 0.5, "·", ha="center", va="center", fontsize=9,
                              color="0.35")
            for a, b in trace.skipped(pass_, t, r):
                grid.add_patch(Rectangle((b, a), 1, 1, facecolor="white",
                                         edgecolor=colour if current else "0.8",
                                         hatch="xx" if current else "", lw=0.6))
                if not current:
                    grid.text(b + 0.5, a + 0.5, "x", ha="center", va="center", fontsize=7,
                              color="0.6")
    grid.set_xlim(0, n)
    grid.set_ylim(n, 0)
    grid.set_aspect("equal")
    grid.set_xticks([i + 0.5 for i in range(n)], range(n), fontsize=8)
    grid.set_yticks([i + 0.5 for i in range(n)], range(n), fontsize=8)
    grid.set_xlabel("key chunk", fontsize=9)
    grid.set_ylabel("query chunk", fontsize=9)
    grid.tick_params(length=0)

    table.set_axis_off()
    table.set_xlim(0, 1)
    table.set_ylim(P + 1.2, -0.2)
    if step >= P:
        title = f"{pass_}, step {step}: no such step (the ring has {P})"
        table.text(0, 1, f"Done after {P} steps:\nevery pair was computed once.", fontsize=9,
                   va="top")
    else:
        title = f"{pass_}, {trace.layout}, P = {P}, step {step}"
        for r in range(P):
            src, pairs = trace.source(step, r), trace.pairs(pass_, step, r)
            colour = RANK_COLOURS[r % len(RANK_COLOURS)]
            table.add_patch(Rectangle((0, r + 0.15), 0.04, 0.7, facecolor=colour,
                                      edgecolor="black", lw=0.5,
                                      hatch="" if pairs else "..", transform=table.transData))
            kv = "K,V of {} (chunks {}, {})".format(src, *chunk_ids(src, P, trace.layout))
            does = f"{len(pairs)} pair{'s' * (len(pairs) != 1)}" if pairs else "IDLE"
            line = f"rank {r}: {kv}: {does}"
            if pass_ == "backward":
                to = (r + 1) % P
                senders = ", ".join(map(str, trace.carriers(step, r)))
                line += (f"\n  dK,dV of {src}, sums of {senders}"
                         f" → rank {to}{' home' if to == src else ''}")
            table.text(0.06, r + 0.5, line, fontsize=9.5, va="center")
    grid.set_title(title, fontsize=10, loc="left")
    return fig


def step_work_figure(traces: dict[str, RingTrace], pass_: str = "forward"):
    """Bars: scores each rank computes at each step, one panel per layout (from the records).

    A dashed line marks each step's slowest rank, which every rank waits for; the hatched gap
    under it is idle time.

    Returns:
        The matplotlib figure (left open).

    Raises:
        TypeError: ``traces`` is not a non-empty dict of :class:`RingTrace`.
        ValueError: an unknown ``pass_``.
    """
    import matplotlib.pyplot as plt

    if not isinstance(traces, dict) or not traces or \
            not all(isinstance(t, RingTrace) for t in traces.values()):
        raise TypeError("traces must be a non-empty dict, a panel's title -> a RingTrace from "
                        f"trace_ring, got {type(traces).__name__}")
    _check_pass(pass_)
    hatches = ["", "//", "..", "xx", "\\\\", "++"]
    fig, axes = plt.subplots(1, len(traces), figsize=(4.2 * len(traces), 2.8), sharey=True,
                             layout="constrained")
    axes = [axes] if len(traces) == 1 else list(axes)
    for ax, (name, trace) in zip(axes, traces.items()):
        table, P = trace.work(pass_), trace.world
        width = 0.8 / P
        for r in range(P):
            xs = [t - 0.4 + width * (r + 0.5) for t in range(P)]
            ax.bar(xs, [table[t][r] for t in range(P)], width=width,
                   color=RANK_COLOURS[r % len(RANK_COLOURS)], hatch=hatches[r % len(hatches)],
                   edgecolor="black", lw=0.4, label=f"rank {r}")
        for t in range(P):
            ax.hlines(max(table[t]), t - 0.42, t + 0.42, colors="black", linestyles="--",
                      lw=0.8)
        busy = sum(map(sum, table)) / (P * sum(max(row) for row in table))
        ax.set_title(f"{name}: ranks busy {busy:.0%} of the time", fontsize=9)
        ax.set_xticks(range(P), [f"step {t}" for t in range(P)], fontsize=8)
        ax.set_xlabel("ring step (dashed: the step's slowest rank)", fontsize=8)
    axes[0].set_ylabel("scores computed", fontsize=8)
    axes[-1].legend(fontsize=7, ncol=2)
    return fig
