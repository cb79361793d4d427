"""Cost of each position scheme (chapter 20): one training step of the tiny model, and SDPA
with ALiBi's float bias against its bool masks, as ratios measured in one run.

Every call of a table is timed in the same interleaved rounds (``attnbook.lab.measure.compare``:
two warm-up rounds, then repeats that alternate the calls), and the ratios are of medians, so
a change in the machine's load falls on all of them alike.

    .venv/bin/python benchmarks/bench_positions.py [--repeats 15] [--threads 1]
    .venv/bin/python benchmarks/bench_positions.py --save benchmarks/results_positions.md
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from attnbook import TinyConfig, TinyModel
from attnbook.lab.measure import compare, conditions
from attnbook.positions import POSITION_SCHEMES, alibi_bias

SCHEMES = ("none",) + tuple(s for s in POSITION_SCHEMES if s != "none")


def training_step(model: TinyModel, idx: torch.Tensor, targets: torch.Tensor):
    """One forward and backward of the tiny model (no optimiser step: the schemes add no
    parameter that an optimiser would see, except the learned table)."""
    def run():
        model.zero_grad(set_to_none=True)
        logits = model(idx)  # (B, T, V)
        F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    return run


def step_table(B: int, T: int, d: int, h: int, layers: int, fused: bool, repeats: int,
               threads: int) -> str:
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 16, (B, T), generator=g)
    targets = torch.randint(0, 16, (B, T), generator=g)
    calls = {}
    for scheme in SCHEMES:
        torch.manual_seed(0)
        model = TinyModel(TinyConfig(16, T, d, h, n_layers=layers, position=scheme,
                                     fused=fused))
        calls[scheme] = training_step(model, idx, targets)
    t = compare(calls, repeats, threads=threads)
    base = t["none"].median
    path = "fused (SDPA)" if fused else "explicit"
    lines = [f"Training step (forward + backward), TinyModel B={B}, T={T}, d={d}, h={h}, "
             f"{layers} layers, {path} path, {threads} thread(s):", "",
             "| scheme | median (ms) | ratio to none | spread |", "|---|---|---|---|"]
    for name, timing in t.items():
        lines.append(f"| {name} | {timing.median * 1e3:.2f} | {timing.median / base:.2f} | "
                     f"±{50 * timing.spread:.0f}% |")
    return "\n".join(lines)


def sdpa_table(B: int, h: int, T: int, d_h: int, repeats: int, threads: int) -> str:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, h, T, d_h, generator=g, requires_grad=True) for _ in range(3))
    real = torch.ones(B, T, dtype=torch.bool)
    real[0, : T // 4] = False  # some left padding, so the key mask does something
    keys = real[:, None, None, :]  # (B, 1, 1, T) bool, True = may attend
    bias = alibi_bias(h, T, T)[None]  # (1, h, T, T) float
    biased_keys = bias.masked_fill(~keys, float("-inf"))  # (B, h, T, T)
    causal_bool = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T) True = may attend
    merged = bias.masked_fill(~causal_bool, float("-inf")).masked_fill(~keys, float("-inf"))

    def run(**kw):
        def f():
            out = F.scaled_dot_product_attention(q, k, v, **kw)
            out.sum().backward()
        return f

    calls = {
        "is_causal only": run(is_causal=True),
        "bool key mask (B,1,1,T) + is_causal": run(attn_mask=keys, is_causal=True),
        "float ALiBi bias (1,h,T,T) + is_causal": run(attn_mask=bias, is_causal=True),
        "float bias + padding (B,h,T,T) + is_causal": run(attn_mask=biased_keys, is_causal=True),
        "float bias, causal merged (B,h,T,T)": run(attn_mask=merged),
    }
    t = compare(calls, repeats, threads=threads)
    base = t["bool key mask (B,1,1,T) + is_causal"].median
    lines = [f"SDPA forward + backward on CPU, B={B}, h={h}, T={T}, d_h={d_h}, float32, "
             f"{threads} thread(s) (every call runs _scaled_dot_product_flash_attention_for_cpu):",
             "", "| attn_mask | median (ms) | ratio to bool key mask | spread |",
             "|---|---|---|---|"]
    for name, timing in t.items():
        lines.append(f"| {name} | {timing.median * 1e3:.2f} | {timing.median / base:.2f} | "
                     f"±{50 * timing.spread:.0f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--save", default=None,
                   help="also write the tables to this Markdown file (benchmarks/"
                   "results_positions.md) and their values to the .json next to it")
    from bench_results import add_load_argument, check_load, write_results

    add_load_argument(p)
    a = p.parse_args(argv)
    # The load rule ("How we measure"): a run that saves starts on a machine no busier
    # than its cores.
    load = check_load(a.allow_loaded) if a.save else None
    parts = []
    for part in (lambda: step_table(16, 64, 64, 4, 2, True, a.repeats, a.threads),
                 lambda: step_table(16, 64, 64, 4, 2, False, a.repeats, a.threads),
                 lambda: sdpa_table(8, 4, 512, 16, a.repeats, a.threads),
                 lambda: f"Measured under {conditions()}; torch {torch.__version__}."):
        parts.append(part())
        print(parts[-1], "\n", flush=True)
    if a.save:
        write_results(a.save, "\n\n".join(parts), "Position schemes: cost per training step",
                      " ".join(["python benchmarks/bench_positions.py"]
                               + (sys.argv[1:] if argv is None else argv)),
                      kind="results_positions", load=load)


if __name__ == "__main__":
    main()
