"""Decoding against its memory bound (chapter 12): a cached step beside its two floors.

A cached decoding step reads every cached key and value once and the module's weights once, so
it can be no faster than ``bytes read / memory bandwidth`` (the memory bound). It also runs a
few dozen small PyTorch operations, each of which costs a fixed dispatch time however little
it computes, so it can be no faster than ``operations x time of an almost empty operation``
(the dispatch floor). This script measures both floors on this machine and sets the step
beside them:

(a) memory bandwidth: the sum of a 256 MiB float32 tensor (reads only, as a step mostly reads),
    a copy of one (read + write), and sums of an 8 MiB one, which stays in the CPU's caches;
(b) dispatch: the time of ``add_`` on a 1-element tensor and of a ``view``, times the number
    of operations (and of views among them) that one step dispatches, counted with a
    ``TorchDispatchMode`` (:func:`count_ops`);
(c) a cached step (one new token, B = 4) for one head, four heads and the tiny model at a few
    cache lengths, as ``generate`` runs it, beside the public checked call and, for the two
    attention modules, the bare operations of a step without the library around them;
(d) tokens per second of the tiny model's step against the batch size;
(e) a ``torch.compile``'d step with static cache shapes, against the same step eager and the
    library's step (with the first call's compile time).

Times come from interleaved repeats on one thread (``attnbook.lab.measure.compare``): each repeat
runs every row in turn, so a busy moment of this shared machine falls on all rows alike, and
each timed call runs ``--steps`` steps, and the order of the rows rotates from round to round.
Every step time, ratio and verdict is a median over the repeats (the book's rule, "How we
measure"); the best repeat is printed beside it. The floors are best repeats (the bandwidth and
the dispatch cost of their rows in the same rounds): a floor is the fastest the machine did, so
a step's median over its floor is at least the ratio the machine allows. A run refuses to save
when the 1-minute load average at the start exceeds the cores (``--allow-loaded`` marks the file
not quotable); the load average is printed before and after.

    .venv/bin/python benchmarks/bench_decode.py [--repeats 41] [--steps 5] [--no-compile]
    .venv/bin/python benchmarks/bench_decode.py --save benchmarks/bench_decode.md
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from attnbook import Attention, AttentionLayer, MultiHeadAttention, TinyConfig, TinyModel
from attnbook.kv_cache import KVCache, cached_attention, decode_step
from attnbook.lab.measure import compare, conditions

B, D, HEADS, VOCAB = 4, 64, 4, 16
LENGTHS = (64, 256, 1024)
MIDDLE = 256  # the cache length of the overhead, batching and compile parts
BATCHES = (1, 2, 4, 8, 16, 32)
CONTEXT = max(LENGTHS) + 2  # room for the step's own token


# -- counting (not timed) --------------------------------------------------------------------

class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func.overloadpacket.__name__), bool(func.is_view)))
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], object]) -> dict[str, int]:
    """How many ATen operations ``fn()`` dispatches, and how many of them are views.

    A ``TorchDispatchMode`` sees every operation that reaches a kernel (after autograd, so
    under ``no_grad`` each call of ``linear`` shows as its parts: ``t``, ``view``, ``mm``,
    ``_unsafe_view``). A view (``slice``, ``unsqueeze``, ``transpose``, ...) computes nothing
    but still passes the dispatcher.

    Returns:
        ``{"ops": all operations, "views": the views among them}``.
    """
    counter = _OpCounter()
    with torch.no_grad(), counter:
        fn()
    return {"ops": len(counter.ops), "views": sum(v for _, v in counter.ops)}


def cache_bytes_read(caches: list[KVCache], length: int) -> int:
    """Bytes of the keys and values a step reads: ``length`` filled slots of every cache.

    Shape:
        each cache's k, v: (B, h_kv, capacity, d_h); only the first ``length`` slots are read
    """
    return sum(2 * c.k[:, :, :length].numel() * c.k.element_size() for c in caches)


def parameter_bytes(module: torch.nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Bytes of a module's parameters, leaving out those whose name starts with ``skip``
    (an embedding table, of which a step reads one row per sequence)."""
    return sum(p.numel() * p.element_size() for n, p in module.named_parameters()
               if not n.startswith(skip))


def floors(ops: dict[str, int], nbytes: int, per_op_s: float, per_view_s: float,
           bandwidth: float, cache_bandwidth: float | None = None) -> dict[str, float]:
    """The dispatch floor and the memory bounds of a step, in seconds.

    Args:
        ops: :func:`count_ops` of the step.
        nbytes: bytes the step reads.
        per_op_s, per_view_s: time of an almost empty operation and of a view.
        bandwidth: bytes per second from main memory.
        cache_bandwidth: bytes per second from the CPU's caches (None: that bound is left out).
    """
    views = ops["views"]
    out = {"dispatch": (ops["ops"] - views) * per_op_s + views * per_view_s,
           "memory": nbytes / bandwidth}
    if cache_bandwidth is not None:
        out["in_cache"] = nbytes / cache_bandwidth
    return out


# -- the machine -----------------------------------------------------------------------------

def best_per_call(fn: Callable[[], object], calls: int, rounds: int = 5) -> float:
    """The shortest mean time of ``calls`` calls of ``fn`` over ``rounds`` rounds (seconds)."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


MAIN, IN_CACHE = 64 * 2**20, 2 * 2**20  # float32 numbers: 256 MiB (> 32 MiB L3), 8 MiB
CACHE_SUMS = 10  # sums of the small buffer per timed call


def memory_calls() -> dict[str, Callable[[], object]]:
    """Timed beside the steps, in the same interleaved rounds: the sum of 256 MiB (reads from
    main memory), a copy of it (read + write), and ten sums of 8 MiB, a buffer that stays in
    the CPU's caches (L3) when it is read again and again."""
    a, small = torch.ones(MAIN), torch.ones(IN_CACHE)
    b = torch.empty_like(a)

    def in_cache():
        for _ in range(CACHE_SUMS):
            small.sum()
    return {"main read": a.sum, "main copy": lambda: b.copy_(a), "cache read": in_cache}


def bandwidth(t: dict) -> dict[str, float]:
    """Bytes per second from the best repeats of :func:`memory_calls` in a ``compare``."""
    return {"read_bw": 4 * MAIN / t["main read"].min, "copy_bw": 2 * 4 * MAIN / t["main copy"].min,
            "cache_bw": 4 * IN_CACHE * CACHE_SUMS / t["cache read"].min}


DISPATCH_CALLS = 200  # almost empty operations (and views) per timed call


def dispatch_calls() -> dict[str, Callable[[], None]]:
    """Timed beside the steps, in the same interleaved rounds, so that the dispatch floor is
    measured under the same load: ``add_`` on a 1-element tensor, and a ``view`` of it."""
    one = torch.zeros(1)

    def op():
        for _ in range(DISPATCH_CALLS):
            one.add_(1.0)

    def view():
        for _ in range(DISPATCH_CALLS):
            one.view(1)
    return {"empty op": op, "view": view}


def dispatch_cost(t: dict) -> dict[str, float]:
    """Seconds per almost empty operation and per view, the best repeats of a ``compare``."""
    return {"per_op": t["empty op"].min / DISPATCH_CALLS,
            "per_view": t["view"].min / DISPATCH_CALLS}


# -- the steps -------------------------------------------------------------------------------

def filled_cache(attn, length: int, batch: int = B) -> tuple[KVCache, torch.Tensor]:
    """A cache of ``attn`` holding ``length`` random tokens, and one new token (B, 1, d)."""
    g = torch.Generator().manual_seed(length)
    x = torch.randn(batch, length + 1, attn.d_model, generator=g)
    cache = KVCache.for_module(attn, batch)
    with torch.no_grad():
        cached_attention(attn, x[:, :length], cache)
    return cache, x[:, length:]


def rewind(caches: list[KVCache], length: int) -> None:
    """Back to ``length`` cached tokens, so every repeat times the same step (no operation is
    dispatched: the count of real tokens ``seen`` keeps growing, which only RoPE and ALiBi
    would read, and these modules use neither)."""
    for c in caches:
        c.length = length


def attention_steps(attn, length: int) -> tuple[dict[str, Callable[[], object]], list[KVCache]]:
    """One step of an attention module three ways, and its cache: as ``generate`` runs it
    (:func:`decode_step`), through the checked ``cached_attention``, and the bare operations
    (projections, two cache writes, SDPA, the merge) with no library around them."""
    cache, x = filled_cache(attn, length)
    k_buf, v_buf, L = cache.k, cache.v, length

    def bare():
        q, k, v = attn.project_heads(x)  # (B, h, 1, d_h), (B, h_kv, 1, d_h) twice
        k_buf[:, :, L:L + 1] = k
        v_buf[:, :, L:L + 1] = v
        return attn.merge(F.scaled_dot_product_attention(q, k_buf[:, :, :L + 1],
                                                         v_buf[:, :, :L + 1]))
    return {"hot": lambda: decode_step(attn, x, cache),
            "checked": lambda: cached_attention(attn, x, cache), "bare": bare}, [cache]


def model_steps(model: TinyModel, length: int,
                batch: int = B) -> tuple[dict[str, Callable[[], object]], list[KVCache]]:
    """One step of the tiny model (one token through both layers and the readout), and its
    caches: as ``generate`` runs it (``TinyModel.decode``) and through the checked
    ``TinyModel.step``."""
    g = torch.Generator().manual_seed(length)
    caches = model.new_caches(batch)
    with torch.no_grad():
        model.step(torch.randint(VOCAB, (batch, length), generator=g), caches)
    nxt = torch.randint(VOCAB, (batch, 1), generator=g)
    return {"hot": lambda: model.decode(nxt, caches),
            "checked": lambda: model.step(nxt, caches)}, caches


def steps_per_call(name: str, steps: int) -> int:
    """Steps per timed call: ``steps`` for the attention modules, a fifth of them for the tiny
    model, whose step is about five times as long. A call of about half a millisecond is
    seldom preempted on a busy machine; one of many milliseconds nearly always is."""
    return max(1, steps // 5) if name == "tiny model" else steps


def repeated(step: Callable[[], object], caches: list[KVCache], length: int,
             steps: int) -> Callable[[], None]:
    """``steps`` steps, each from ``length`` cached tokens (the call that is timed)."""
    def call():
        with torch.no_grad():
            for _ in range(steps):
                rewind(caches, length)
                step()
    return call


def counted(step: Callable[[], object], caches: list[KVCache], length: int) -> dict[str, int]:
    """:func:`count_ops` of one step from ``length`` cached tokens."""
    rewind(caches, length)
    return count_ops(step)


def modules() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {"one head": AttentionLayer(D, CONTEXT, fused=True).eval(),
            "4 heads": MultiHeadAttention(D, CONTEXT, HEADS, fused=True).eval(),
            "tiny model": TinyModel(TinyConfig(VOCAB, CONTEXT, D, HEADS, n_layers=2)).eval()}


def step_bytes(name: str, module, caches: list[KVCache], length: int) -> int:
    """Bytes a step reads: the filled cache (``length`` + 1 slots, the new token's included)
    and the weights (the tiny model's tables only by the rows it reads, left out here)."""
    skip = ("tokens", "positions") if name == "tiny model" else ()
    return cache_bytes_read(caches, length + 1) + parameter_bytes(module, skip)


def breakdown(mods: dict, repeats: int, steps: int) -> tuple[str, str, str, dict]:
    """Parts (b), (c): the step against its floors, and the library's own per-step cost."""
    calls, counts, nbytes = {}, {}, {}
    for name, mod in mods.items():
        n = steps_per_call(name, steps)
        for L in LENGTHS:
            fns, caches = (model_steps(mod, L) if name == "tiny model"
                           else attention_steps(mod, L))
            # A warm-up step first (timed with the others, never reported), so that each timed
            # call finds this cache's keys and values where the previous step left them, in
            # the CPU's caches, as consecutive steps of a generation do; the copies of 256 MiB
            # in the same rounds evict them.
            calls[name, L, "warm"] = repeated(fns["hot"], caches, L, 1)
            for kind, fn in fns.items():
                calls[name, L, kind] = repeated(fn, caches, L, n)
                counts[name, L, kind] = counted(fn, caches, L)
            nbytes[name, L] = step_bytes(name, mod, caches, L)
    t = compare(calls | dispatch_calls() | memory_calls(), repeats, threads=1, warmup=1)
    m = dispatch_cost(t) | bandwidth(t)
    step = {key: t[key].median / steps_per_call(key[0], steps) for key in calls}
    best = {key: t[key].min / steps_per_call(key[0], steps) for key in calls}
    lines = [f"### Cached step against its floors, B={B}, d={D}, float32, 1 thread",
             "",
             f"One new token per step after L cached ones; the median (and the best) of "
             f"{repeats} interleaved repeats of {steps} steps "
             f"({steps_per_call('tiny model', steps)} for the tiny model), each after a step on "
             "the same cache. "
             f"Dispatch, timed in the same rounds: {m['per_op'] * 1e6:.2f} µs per almost "
             f"empty operation (add_ on 1 element), {m['per_view'] * 1e6:.2f} µs per view. "
             "Dispatch floor = operations × the first (views × the second); memory bound = "
             "bytes read ÷ the read bandwidth from main memory; in-cache bound = bytes read ÷ "
             "the read bandwidth from L3 (a step's few MiB stay in the CPU's caches from one "
             "step to the next, so a step can beat the memory bound).", "",
             "| generator | L | step (µs) | operations (views) | dispatch floor (µs) "
             "| bytes read (KiB) | memory bound (µs) | in-cache bound (µs) "
             "| step ÷ dispatch floor | step ÷ memory bound | step ÷ in-cache bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in mods:
        for L in LENGTHS:
            key = (name, L, "hot")
            f = floors(counts[key], nbytes[name, L], m["per_op"], m["per_view"], m["read_bw"],
                       m["cache_bw"])
            lines.append(
                f"| {name} | {L} | {step[key] * 1e6:.1f} (best {best[key] * 1e6:.0f}) | "
                f"{counts[key]['ops']} ({counts[key]['views']}) | {f['dispatch'] * 1e6:.1f} | "
                f"{nbytes[name, L] / 1024:.0f} | {f['memory'] * 1e6:.1f} | "
                f"{f['in_cache'] * 1e6:.1f} | {step[key] / f['dispatch']:.2f} | "
                f"{step[key] / f['memory']:.2f} | {step[key] / f['in_cache']:.1f} |")
    L = MIDDLE
    over = [f"### The library's own cost per step, cache length {L}", "",
            "The hot step is the step as `generate` runs it (checks once per generation: "
            "`decode_step`, `TinyModel.decode`); the checked step is the public call that "
            "checks its input every time (`cached_attention`, `TinyModel.step`); the bare "
            "operations are a step of the attention modules with no library around them "
            "(projections, two cache writes, SDPA, the merge). Library overhead = hot step − "
            "bare operations. Medians from the rounds of the table above.", "",
            "| generator | hot step (µs) | checked step (µs) | bare operations (µs) "
            "| hot ops | checked ops | bare ops | library overhead (µs) |",
            "|---|---|---|---|---|---|---|---|"]
    for name in mods:
        hot, chk = step[name, L, "hot"], step[name, L, "checked"]
        bare = step.get((name, L, "bare"))
        n = [str(counts[name, L, k]["ops"]) if (name, L, k) in counts else "–"
             for k in ("hot", "checked", "bare")]
        over.append(f"| {name} | {hot * 1e6:.1f} | {chk * 1e6:.1f} | "
                    + ("–" if bare is None else f"{bare * 1e6:.1f}") + " | "
                    + " | ".join(n) + " | "
                    + ("–" if bare is None else f"{(hot - bare) * 1e6:.1f}") + " |")
    memory = (f"Memory bandwidth (1 thread, the best of {repeats} repeats in the rounds of the "
              f"table below, float32): read {m['read_bw'] / 1e9:.1f} GB/s (sum of 256 MiB), "
              f"copy {m['copy_bw'] / 1e9:.1f} GB/s (read + write). Read from the CPU's caches "
              f"(sums of 8 MiB, which stays in L3): {m['cache_bw'] / 1e9:.1f} GB/s.")
    return memory, "\n".join(lines), "\n".join(over), m


def batching(model: TinyModel, m: dict, repeats: int, steps: int) -> str:
    """Part (d): tokens per second of the tiny model's step against the batch size."""
    L = MIDDLE
    calls, counts, nbytes = {}, {}, {}
    steps = steps_per_call("tiny model", steps)
    for b in BATCHES:
        fns, caches = model_steps(model, L, batch=b)
        calls["warm", b] = repeated(fns["hot"], caches, L, 1)  # as in :func:`breakdown`
        calls[b] = repeated(fns["hot"], caches, L, steps)
        counts[b] = counted(fns["hot"], caches, L)
        nbytes[b] = step_bytes("tiny model", model, caches, L)
    t = compare(calls | dispatch_calls(), repeats, threads=1, warmup=1)
    m = m | dispatch_cost(t)
    base = t[1].median
    lines = [f"### Batching: the tiny model's step at cache length {L}, 1 thread", "",
             f"The median (and the best) of {repeats} interleaved repeats of {steps} step(s), "
             "each after a step on the same caches. Each sequence "
             "of the batch has its own cache; the weights are read once per step "
             f"for all of them. Dispatch, timed in the same rounds: {m['per_op'] * 1e6:.2f} µs "
             "per almost empty operation.", "",
             "| batch | step (µs) | tokens/s | step vs batch 1 | dispatch floor (µs) "
             "| memory bound (µs) | in-cache bound (µs) |", "|---|---|---|---|---|---|---|"]
    for b in BATCHES:
        s = t[b].median / steps
        f = floors(counts[b], nbytes[b], m["per_op"], m["per_view"], m["read_bw"], m["cache_bw"])
        lines.append(f"| {b} | {s * 1e6:.0f} (best {t[b].min / steps * 1e6:.0f}) | "
                     f"{b / s:,.0f} | {t[b].median / base:.2f} | {f['dispatch'] * 1e6:.0f} | "
                     f"{f['memory'] * 1e6:.1f} | {f['in_cache'] * 1e6:.1f} |")
    return "\n".join(lines)


def static_step(attn: Attention, slots: torch.Tensor):
    """A one-head step over a static cache: the shapes never change, so a compiled version
    is compiled once. The new key and value go to slot ``pos`` (a 0-d tensor) and the query
    attends to every slot up to it through a mask over the whole buffer."""
    def step(x, k_buf, v_buf, pos):
        q, k, v = attn.project_heads(x)  # (B, 1, 1, d)
        k_buf.index_copy_(2, pos.view(1), k)
        v_buf.index_copy_(2, pos.view(1), v)
        allowed = (slots <= pos)[None]  # (1, capacity)
        return attn.merge(F.scaled_dot_product_attention(q, k_buf, v_buf, attn_mask=allowed))
    return step


def compiled(attn: Attention, step_hot: Callable, repeats: int, steps: int) -> str:
    """Part (e): ``torch.compile`` of a static-shape step against it eager and the library's."""
    L = MIDDLE
    cache, x = filled_cache(attn, L)
    eager = static_step(attn, torch.arange(cache.capacity))
    pos = torch.tensor(L)
    import torch._inductor.config as inductor_config

    with torch.no_grad():
        fn = torch.compile(eager, dynamic=False, fullgraph=True)
        start = time.perf_counter()
        with inductor_config.patch(force_disable_caches=True):  # a first compile, every run
            out = fn(x, cache.k, cache.v, pos)
        first = time.perf_counter() - start
        same = (out - eager(x, cache.k, cache.v, pos)).abs().max().item()

    def run(f):
        def call():
            with torch.no_grad():
                for _ in range(steps):
                    f(x, cache.k, cache.v, pos)
        return call
    t = compare({"library": step_hot, "eager": run(eager), "compiled": run(fn)}, repeats,
                threads=1, warmup=1)
    lib, ea, co = (t[k].median / steps for k in ("library", "eager", "compiled"))
    med = {k: f"(best {t[k].min / steps * 1e6:.0f})" for k in t}
    pays = "yes" if co < 0.9 * lib else "NO"
    return "\n".join([
        f"### Compiled step: one head, static cache of {cache.capacity} slots, "
        f"{L} filled, B={B}, 1 thread", "",
        f"First compiled call (compile included, torch's on-disk caches off): **{first:.1f} s**; "
        f"largest difference from the eager static step: {same:.1e}.", "",
        "| step | time (µs) | vs library step | pays (≤ 0.9× the library step) |",
        "|---|---|---|---|",
        f"| library (hot step) | {lib * 1e6:.1f} {med['library']} | 1.00 | – |",
        f"| static shapes, eager | {ea * 1e6:.1f} {med['eager']} | {ea / lib:.2f} | – |",
        f"| static shapes, torch.compile | {co * 1e6:.1f} {med['compiled']} | {co / lib:.2f} "
        f"| {pays} |"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=41)
    p.add_argument("--steps", type=int, default=5,
                   help="steps per timed call (a fifth of them for the tiny model)")
    p.add_argument("--no-compile", action="store_true", help="skip part (e)")
    p.add_argument("--save", default=None,
                   help="also write the tables to this Markdown file (benchmarks/"
                   "bench_decode.md) and their values to the .json next to it")
    from bench_results import add_load_argument, check_load, write_results

    add_load_argument(p)
    a = p.parse_args(argv)
    # The load rule ("How we measure"): a run that saves starts on a machine no busier
    # than its cores.
    load = check_load(a.allow_loaded) if a.save else None
    began = time.perf_counter()
    load_before = conditions()
    torch.set_num_threads(1)
    mods = modules()
    memory, table, over, m = breakdown(mods, a.repeats, a.steps)
    parts = []
    for part in (memory, table, over):
        parts.append(part)
        print(part, "\n", flush=True)
    parts.append(batching(mods["tiny model"], m, a.repeats, a.steps))
    print(parts[-1], "\n", flush=True)
    if not a.no_compile:
        fns, caches = attention_steps(mods["one head"], MIDDLE)
        hot = repeated(fns["hot"], caches, MIDDLE, a.steps)
        parts.append(compiled(mods["one head"], hot, a.repeats, a.steps))
        print(parts[-1], "\n", flush=True)
    parts.append(f"Load: {load_before} before, {conditions()} after; torch {torch.__version__}. "
                 f"Whole run: {time.perf_counter() - began:.0f} s.")
    print(parts[-1], flush=True)
    if a.save:
        write_results(a.save, "\n\n".join(parts), "Decoding against its memory bound",
                      " ".join(["python benchmarks/bench_decode.py"]
                               + (sys.argv[1:] if argv is None else argv)),
                      kind="bench_decode", load=load)


if __name__ == "__main__":
    main()
