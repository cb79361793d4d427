"""KV-cache generation for the attention benchmark: medians of repeats, 1 and 2 threads.

Every repeat runs all generators with and without the cache on 1 and on 2 threads, interleaved
(``attnbook.lab.measure.compare``), and the load average is recorded before and after: on a machine
whose two cores other programs also use, a two-thread parallel region waits for a core at every
operation, which slowed the recomputing generators by up to 15 times in an earlier run that timed
each thread count in a block of its own.

Three generators, each with and without the cache: one head (attnbook.Attention), four heads
(attnbook.MultiHeadAttention), and the tiny model (TinyModel.generate, two layers of four heads).
Without the cache every step reruns the whole sequence on the fused path.
"""

from __future__ import annotations

import torch

from attnbook import Attention, AttentionLayer, MultiHeadAttention, TinyConfig, TinyModel
from attnbook.kv_cache import KVCache, cached_attention, generate
from attnbook.lab.measure import compare, conditions

GENERATORS = ["one head", "4 heads", "tiny model"]


def kv_benchmark(B: int, d: int, prompt_len: int, tokens: int, repeats: int,
                 threads: tuple[int, ...] = (1, 2)) -> dict:
    """Times of generating ``tokens`` tokens after a ``prompt_len``-token prompt."""
    torch.manual_seed(0)
    context = prompt_len + tokens + 1
    modules = {"one head": AttentionLayer(d, context, fused=True).eval(),
               "4 heads": MultiHeadAttention(d, context, 4, fused=True).eval()}
    model = TinyModel(TinyConfig(vocab_size=16, context_length=context, d_model=d, n_heads=4,
                                 n_layers=2)).eval()
    prompt = torch.randn(B, prompt_len, d)
    ids = torch.randint(16, (B, prompt_len))
    calls = {}
    for name, m in modules.items():
        for cache in (True, False):
            calls[name, cache] = (lambda m=m, c=cache: generate(m, prompt, tokens, use_cache=c))
    for cache in (True, False):
        calls["tiny model", cache] = (lambda c=cache: model.generate(ids, tokens, use_cache=c))
    load_before = conditions()
    times = compare({(name, cache, n): on_threads(fn, n)
                     for n in threads for (name, cache), fn in calls.items()},
                    repeats, threads=None, warmup=1)
    load = f"{load_before} before, {conditions()} after"
    diffs = {name: (generate(m, prompt, tokens) - generate(m, prompt, tokens, use_cache=False))
             .abs().max().item() for name, m in modules.items()}
    same_tokens = bool(torch.equal(model.generate(ids, tokens),
                                   model.generate(ids, tokens, use_cache=False)))
    return dict(times=times, max_diff=diffs, same_tokens=same_tokens, B=B, d=d, tokens=tokens,
                repeats=repeats, load=load,
                prompt=prompt_len, threads=threads, per_step=per_step(modules["one head"], B, d,
                                                                      tokens))


def on_threads(fn, n: int):
    """``fn`` run on ``n`` threads. Each repeat of ``compare`` runs every generator on 1 and on
    2 threads in turn, so a busy moment of the machine falls on both thread counts alike."""
    def call():
        torch.set_num_threads(n)  # a fraction of a microsecond
        return fn()
    return call


def per_step(attn: Attention, B: int, d: int, tokens: int) -> dict:
    """Time of one generation step at a few lengths, cached and recomputed (median of 5)."""
    lengths = sorted({max(1, tokens * f // 8) for f in range(1, 9)})
    out = {"length": lengths, "cache": [], "recompute": []}
    with torch.no_grad():
        for L in lengths:
            x = torch.randn(B, L + 1, d)
            cache = KVCache.for_module(attn, B)
            cached_attention(attn, x[:, :L], cache)

            def step(L=L, x=x, cache=cache):
                cache.length = L  # back to L cached tokens: every repeat times the same step
                return cached_attention(attn, x[:, L:], cache)
            t = compare({"cache": step, "recompute": lambda x=x: attn(x)}, 5, threads=None)
            out["cache"].append(t["cache"].median)
            out["recompute"].append(t["recompute"].median)
    return out
