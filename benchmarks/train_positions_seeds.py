"""Lab 20's training runs over seeds, with the controls chapter 20's conclusions need.

Lab 20 trains the tiny model on the copy task with each position scheme, seed 0, and scores it
at T, 2T and 4T. A conclusion drawn from training needs more than one seed and a control for
each cause the text names ("How we measure"). This script reruns the lab's exact harness (the
same model, task, steps, batch, learning rate and held-out sequences) for every seed asked for,
and for each seed:

* trains every scheme of the chapter's table: ``none``, ``learned``, ``sinusoidal``, ``rope``,
  ``alibi`` with the rule's slopes, ``alibi_mid`` (1/2, 1/4) and ``alibi_steep`` (2, 1);
* trains partial rotary (``rotary8``, ``rotary4``: rotary_dim 8 and 4 of d_h = 16) and the
  base-matched controls that change one thing at a time: ``rotary8_base100`` and
  ``rotary4_base10`` (the four or two fastest frequencies of full RoPE, plus position-free
  features), ``rotary16_base1e8`` and ``rotary16_base1e16`` (every feature rotated, with the
  frequencies of rotary_dim 8 and 4 as the fastest pairs);
* gives the trained RoPE model each ``rope_scaling`` type at 2T and 4T (``factor`` the growth,
  ``original_max_position_embeddings`` T, as the lab does), static NTK-aware scaling at
  s = 2, 3, 4, 8, 13, and ``dynamic`` with factor 1: dynamic scaling reads the call's length n
  and sets the base to base * (f n / T - (f - 1)) ** (r / (r - 2)), so with factor f at n = f T
  it is NTK at s = f^2 - f + 1 (3 at 2T, 13 at 4T), and with factor 1 it is NTK at s = f;
* fine-tunes the RoPE model at 2T, as trained and with position interpolation (s = 2), over a
  grid of steps and learning rates (the lab's one point: 50 steps at a tenth of the rate).

Seed s draws the initial weights (``torch.manual_seed(s)``) and the training batches
(``train(seed=s)``); the fine-tuning batches use seed s + 1 (the lab's seed 0 uses 1). So seed
0 gives the lab's stored numbers, which ``tests/test_positions_seeds.py`` checks. The results
hold accuracies and losses, no timings, so the load rule of "How we measure" (for timings) does
not refuse a run; the load at the start and the end is recorded.

Usage (one thread, about 2 minutes per seed on a quiet core):

    nice -n 10 python benchmarks/train_positions_seeds.py --seeds 0-4 \\
        --cache /tmp/positions_seeds.json --save benchmarks/results_positions_seeds.md

With ``--save`` the results file is rewritten after every seed, so a run cut short keeps the
seeds it finished; with ``--cache`` a second run skips the seeds already done (add seeds with
``--seeds 5-9``: the file then reports every seed in the cache).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from attnbook.lab.position_lab import extrapolation
from attnbook.lab.tasks import IGNORE, copy_set_baseline, get_task
from attnbook.lab.train import EVAL_SEED, sequence_loss, train
from attnbook.model import TinyConfig, TinyModel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_results  # noqa: E402

STEM = "results_positions_seeds"
TITLE = "Positions past the training length, over seeds (Lab 20's harness)"

# Lab 20's harness (notebooks/20_positions.ipynb), unchanged.
SMALL = {"d_model": 32, "n_heads": 2, "n_layers": 2, "mlp": False}
T, STEPS, BATCH, LR = 16, 300, 64, 1e-2
EVAL_SEQUENCES = 256  # what the lab passes to train(); extrapolation() scores its own 512

# Trained arms: name -> TinyConfig keywords beyond the lab's (and the lengths scored).
TRAINED = {
    "none": {"position": "none"},
    "learned": {"position": "learned"},
    "sinusoidal": {"position": "sinusoidal"},
    "rope": {"position": "rope"},
    "alibi": {"position": "alibi"},
    "alibi_mid": {"position": "alibi", "alibi_slopes": (0.5, 0.25)},
    "alibi_steep": {"position": "alibi", "alibi_slopes": (2.0, 1.0)},
    "rotary8": {"position": "rope", "rotary_dim": 8},
    "rotary4": {"position": "rope", "rotary_dim": 4},
    "rotary8_base100": {"position": "rope", "rotary_dim": 8, "rope_base": 100.0},
    "rotary4_base10": {"position": "rope", "rotary_dim": 4, "rope_base": 10.0},
    "rotary16_base1e8": {"position": "rope", "rope_base": 1e8},
    "rotary16_base1e16": {"position": "rope", "rope_base": 1e16},
}
WHAT = {
    "none": "no positions",
    "learned": "a learned table of T vectors (refuses longer inputs)",
    "sinusoidal": "the fixed sinusoidal table",
    "rope": "RoPE, every feature rotated, base 10^4: θ_c = 10^(−c/2), c = 0..7",
    "alibi": "ALiBi, the rule's slopes for 2 heads (1/16, 1/256)",
    "alibi_mid": "ALiBi, slopes 1/2, 1/4",
    "alibi_steep": "ALiBi, slopes 2, 1",
    "rotary8": "rotary_dim 8, base 10^4: θ_c = 10^(−c), c = 0..3, 8 features without position",
    "rotary4": "rotary_dim 4, base 10^4: θ_c = 10^(−2c), c = 0..1, 12 without position",
    "rotary8_base100": "rotary_dim 8, base 100: θ_c = 10^(−c/2), c = 0..3 (RoPE's four fastest)",
    "rotary4_base10": "rotary_dim 4, base 10: θ_c = 10^(−c/2), c = 0..1 (RoPE's two fastest)",
    "rotary16_base1e8": "every feature rotated, base 10^8: θ_c = 10^(−c), c = 0..7 "
                        "(rotary_dim 8's four, then four slower)",
    "rotary16_base1e16": "every feature rotated, base 10^16: θ_c = 10^(−2c), c = 0..7 "
                         "(rotary_dim 4's two, then six slower)",
    "rope_linear": "the RoPE model, linear (position interpolation, θ_c / f)",
    "rope_dynamic": "the RoPE model, dynamic, factor f (= NTK at s = f² − f + 1)",
    "rope_dynamic_f1": "the RoPE model, dynamic, factor 1 (= NTK at s = f)",
    "rope_yarn": "the RoPE model, yarn, factor f",
    "rope_yarn_cold": "the RoPE model, yarn, factor f, attention_factor 1",
    "rope_llama3": "the RoPE model, llama3, factor f, low 1, high 4",
}
NTK_SCALES = (2, 3, 4, 8, 13)
WHAT.update({f"rope_ntk{s}": f"the RoPE model, static NTK-aware base, s = {s}"
             for s in NTK_SCALES})
# Fine-tuning the RoPE model at 2T: (steps, learning rate divisor), as trained and with
# position interpolation (s = 2). The lab's point is (50, 10).
FINE_TUNE = ((50, 10), (200, 10), (800, 10), (50, 1), (100, 1), (200, 1))
# The model as trained recovers at the smallest budgets already: its larger ones are not run.
PLAIN_SKIPPED = ((800, 10), (100, 1))
for _steps, _div in FINE_TUNE:
    for _arm, _how in (("plain", "as trained"), ("pi", "with position interpolation, s = 2")):
        _lr = "lr" if _div == 1 else f"lr/{_div}"
        WHAT[f"ft_{_arm}_{_steps}_lr{'' if _div == 1 else _div}"] = (  # ft_name's key
            f"the RoPE model fine-tuned at 2T, {_how}: {_steps} steps at {_lr}")

# Chapter 14's runs without positions (Lab 14's harness: T = 16, the same SMALL model, seed s):
# two layers for 200 steps, and with an MLP for 400; scored as Lab 14 scores them.
CH14 = (("ch14_nopos", {"positions": False}, 200),
        ("ch14_nopos_mlp", {"positions": False, "mlp": True}, 400))
WHAT["ch14_nopos"] = "Lab 14: no positions, 200 steps (2048 held-out sequences)"
WHAT["ch14_nopos_mlp"] = "Lab 14: no positions, an MLP per block, 400 steps (2048 sequences)"

LENGTHS = {1: "T", 2: "2T", 4: "4T"}


_SKIPPED = {("plain", point) for point in PLAIN_SKIPPED}


def ft_name(arm: str, steps: int, div: int) -> str:
    """``ft_pi_200_lr10``: fine-tuned ``arm`` for ``steps`` steps at LR / ``div``."""
    return f"ft_{arm}_{steps}_lr{'' if div == 1 else div}"

# The results file's tables, for bench_results (keys: acc.ARM.LENGTH.COLUMN, loss.ARM...).
TABLES = [(r"### Arms", "arms", 1), (r"### Accuracy", "acc", 2), (r"### Loss", "loss", 2),
          (r"### Below the blind predictor", "below", 2)]
bench_results.TABLES.setdefault(STEM, TABLES)
bench_results.FACTS.setdefault(STEM, [
    (r"Seeds: (\d+) \(", ("seeds.count",)),
    (r"loss below the blind predictor's in (\d+) of \d+ seeds, by more than 3 standard errors "
     r"in (\d+)", ("below.ch14_nopos.seeds_below", "below.ch14_nopos.seeds_above_3_se"))])


def rope_types(f: int) -> dict:
    """The lab's rope_scaling dicts for a context f times T, and the controls."""
    L = {"factor": f, "original_max_position_embeddings": T}
    out = {"linear": {"rope_type": "linear", "factor": f},
           "dynamic": {"rope_type": "dynamic", **L},
           "dynamic_f1": {"rope_type": "dynamic", "factor": 1.0,
                          "original_max_position_embeddings": T},
           "yarn": {"rope_type": "yarn", **L},
           "yarn_cold": {"rope_type": "yarn", "attention_factor": 1.0, **L},
           "llama3": {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      **L}}
    out.update({f"ntk{s}": ("ntk", s) for s in NTK_SCALES})
    return out


def stretched(model: TinyModel, scaling) -> TinyModel:
    """A copy of ``model`` whose every layer uses ``scaling`` (as the lab's ``stretched``)."""
    out = copy.deepcopy(model)
    for block in out.blocks:
        block.attn.rope_scaling = scaling
    return out


def run_seed(seed: int, tasks: dict, log=print) -> dict:
    """Every arm for one seed: {arm: {length: [accuracy, loss]}} (lengths "T", "2T", "4T")."""
    out: dict = {}
    trained: dict = {}
    for name, options in TRAINED.items():
        room = T if name == "learned" else 4 * T
        torch.manual_seed(seed)
        model = TinyModel(TinyConfig(tasks[1].vocab_size, room, **options, **SMALL))
        train(model, tasks[1], steps=STEPS, batch_size=BATCH, lr=LR, seed=seed, progress=False,
              eval_sequences=EVAL_SEQUENCES)
        trained[name] = model
        out[name] = {LENGTHS[f]: list(extrapolation(model, tasks[f], T))
                     for f in (1, 2, 4) if name != "learned" or f == 1}
        log(f"  seed {seed} {name}: " + ", ".join(f"{k} {v[0]:.0%}" for k, v in out[name].items()))
    rope = trained["rope"]
    for name in rope_types(2):
        out[f"rope_{name}"] = {LENGTHS[f]: list(extrapolation(stretched(rope, rope_types(f)[name]),
                                                              tasks[f], T)) for f in (2, 4)}
    out.update(fine_tune(rope, seed, tasks))
    log(f"  seed {seed} rope types and fine-tuning done")
    out["_below"] = {}
    for name, options, steps in CH14:
        torch.manual_seed(seed)
        model = TinyModel(TinyConfig(tasks[1].vocab_size, T, **{**SMALL, **options}))
        history = train(model, tasks[1], steps=steps, batch_size=BATCH, lr=LR, seed=seed,
                        progress=False)
        acc, nats, gap_pct, z = below_blind(model, tasks[1])
        out[name] = {"T": [history.accuracy, nats]}
        out["_below"][name] = {"gap_pct": gap_pct, "z": z}
        log(f"  seed {seed} {name}: {history.accuracy:.1%}, {gap_pct:.2f}% below, z {z:.1f}")
    return out


@functools.lru_cache
def _set_baseline(options: tuple) -> tuple[float, float]:
    return copy_set_baseline(**dict(options))


def fine_tune(rope: TinyModel, seed: int, tasks: dict, done=()) -> dict:
    """The fine-tuning grid at 2T, as trained and with interpolation (arms not in ``done``)."""
    out = {}
    for steps, div in FINE_TUNE:
        for arm, scaling in (("plain", None), ("pi", ("interpolation", 2))):
            if ft_name(arm, steps, div) in done or (arm, (steps, div)) in _SKIPPED:
                continue
            model = stretched(rope, scaling)
            train(model, tasks[2], steps=steps, batch_size=BATCH, lr=LR / div, seed=seed + 1,
                  progress=False, eval_sequences=EVAL_SEQUENCES)
            out[ft_name(arm, steps, div)] = {"2T": list(extrapolation(model, tasks[2], T))}
    return out


def extend_seed(seed: int, tasks: dict, done: dict) -> dict:
    """A seed run before the fine-tuning grid grew: retrain its RoPE model (the same weights),
    check it against the stored numbers, and add the grid's missing points."""
    torch.manual_seed(seed)
    rope = TinyModel(TinyConfig(tasks[1].vocab_size, 4 * T, **TRAINED["rope"], **SMALL))
    train(rope, tasks[1], steps=STEPS, batch_size=BATCH, lr=LR, seed=seed, progress=False,
          eval_sequences=EVAL_SEQUENCES)
    if list(extrapolation(rope, tasks[2], T)) != done["rope"]["2T"]:
        raise RuntimeError(f"seed {seed}: the retrained RoPE model differs from the stored one")
    return {**done, **fine_tune(rope, seed, tasks, done)}


def arm_order() -> list[str]:
    """Every arm, in the results file's order."""
    return (list(TRAINED) + [f"rope_{n}" for n in rope_types(2)]
            + [ft_name(a, st, dv) for st, dv in FINE_TUNE for a in ("plain", "pi")
               if (a, (st, dv)) not in _SKIPPED]
            + [name for name, _, _ in CH14])


def below_blind(model: TinyModel, task) -> tuple[float, float, float, float]:
    """Lab 14's paired comparison with the best predictor blind to order, on 2048 held-out
    sequences: (accuracy, loss, the loss's gap below the blind predictor's in % of the exact
    bound, that gap in standard errors of the per-sequence difference)."""
    delay = task.options["delay"]
    set_nats = _set_baseline(tuple(sorted(task.options.items())))[1]
    xe, ye = task.batch(2048, seed=EVAL_SEED)  # (B, T) each
    model.eval()
    with torch.no_grad():
        logits = model(xe)  # (B, T, V)
    nats = sequence_loss(logits, ye).item()
    acc = (logits.argmax(-1)[ye != IGNORE] == ye[ye != IGNORE]).double().mean().item()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ye, ignore_index=IGNORE,
                                            reduction="none")[:, delay:]  # (B, T - delay)
    blind = torch.stack([-torch.log((xe[:, :t] == ye[:, t:t + 1]).sum(1) / t)
                         for t in range(delay, xe.size(1))], dim=1)  # (B, T - delay)
    gap = (blind.double() - nll.double()).mean(1)  # (B,)
    mean, se = gap.mean().item(), (gap.std() / len(gap) ** 0.5).item()
    return acc, nats, 100 * mean / set_nats, mean / se


def fmt_seeds(seeds: list[int]) -> str:
    """[0, 1, 2, 4] -> '0-2, 4'."""
    parts, run = [], [seeds[0]]
    for s in seeds[1:]:
        if s == run[-1] + 1:
            run.append(s)
        else:
            parts.append(run)
            run = [s]
    parts.append(run)
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in parts)


def report(cache: dict, seconds: float, loads: tuple[float, float]) -> str:
    """The results file's text: the harness, the arms, then accuracy and loss per seed."""
    seeds = sorted(int(s) for s in cache)
    arms = [a for a in arm_order() if all(a in cache[str(s)] for s in seeds)]
    lines = [
        "Harness: Lab 20's. Copy task (the token three places back, 10 symbols, chance 10 %), "
        f"trained at T = {T}: TinyModel {SMALL}, {STEPS} steps, batches of {BATCH}, AdamW "
        f"lr {LR} (warm-up + cosine), 1 thread. Seed s draws the initial weights and the "
        "training batches; fine-tuning uses batches of seed s + 1. Held-out: 512 sequences "
        "(the lab's evaluation seed), at 2T and 4T only the positions t ≥ T. Seed 0 is the "
        "lab's run.", "",
        f"Seeds: {len(seeds)} ({fmt_seeds(seeds)}). Whole run: {seconds:.0f} s; load average "
        f"{loads[0]:.2f} at the start, {loads[1]:.2f} at the end on {os.cpu_count()} cores "
        "(accuracies do not depend on the load; nothing here is a timing).", "",
        "### Arms", "", "| arm | what |", "|---|---|"]
    lines += [f"| {a} | {WHAT[a]} |" for a in arms]
    cols = [f"s{s}" for s in seeds]
    for title, index, spec in (("### Accuracy (%) on the scored positions", 0, ".1f"),
                               ("### Loss (nats) on the scored positions", 1, ".3f")):
        lines += ["", title, "",
                  "| arm | length | n | mean | min | max | " + " | ".join(cols) + " |",
                  "|---|---|---:|---:|---:|---:|" + "---:|" * len(cols)]
        for arm in arms:
            for length in cache[str(seeds[0])][arm]:
                vals = [cache[str(s)][arm][length][index] * (100 if index == 0 else 1)
                        for s in seeds]
                cells = [format(v, spec) for v in vals]
                stats = [format(x, spec) for x in (statistics.fmean(vals), min(vals), max(vals))]
                lines.append(f"| {arm} | {length} | {len(vals)} | " + " | ".join(stats) + " | "
                             + " | ".join(cells) + " |")
    below = cache[str(seeds[0])].get("_below", {})
    if below:
        lines += ["", "### Below the blind predictor (Lab 14's paired comparison: the loss's gap "
                  "below the best predictor blind to order, in % of its exact loss, and in "
                  "standard errors of the per-sequence difference)", "",
                  "| arm | quantity | n | mean | min | max | " + " | ".join(cols) + " |",
                  "|---|---|---:|---:|---:|---:|" + "---:|" * len(cols)]
        for arm in below:
            for quantity, spec in (("gap_pct", ".2f"), ("z", ".1f")):
                vals = [cache[str(s)]["_below"][arm][quantity] for s in seeds]
                stats = [format(x, spec) for x in (statistics.fmean(vals), min(vals), max(vals))]
                lines.append(f"| {arm} | {quantity} | {len(vals)} | " + " | ".join(stats) + " | "
                             + " | ".join(format(v, spec) for v in vals) + " |")
        if "ch14_nopos" in below:
            z = [cache[str(s)]["_below"]["ch14_nopos"]["z"] for s in seeds]
            lines += ["", f"Lab 14's two layers without positions: the loss below the blind "
                      f"predictor's in {sum(v > 0 for v in z)} of {len(z)} seeds, by more than 3 "
                      f"standard errors in {sum(v > 3 for v in z)}."]
    return "\n".join(lines)


def parse_seeds(text: str) -> list[int]:
    """'0-4' -> [0, 1, 2, 3, 4]; '0,2,5-6' -> [0, 2, 5, 6]."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2,5-9")
    parser.add_argument("--cache", type=Path, default=None,
                        help="JSON of the seeds done so far; seeds in it are not rerun")
    parser.add_argument("--save", type=Path, default=None,
                        help="write benchmarks/results_positions_seeds.md and its .json "
                        "(after every seed)")
    parser.add_argument("--steps", type=int, default=None, help="smoke test: fewer steps")
    args = parser.parse_args(argv)
    global STEPS
    if args.steps is not None:
        STEPS = args.steps
    torch.set_num_threads(1)  # the lab's numbers are one thread's
    tasks = {f: get_task("copy", length=f * T) for f in (1, 2, 4)}
    cache: dict = {}
    if args.cache is not None and args.cache.is_file():
        cache = json.loads(args.cache.read_text(encoding="utf-8"))
    load0 = os.getloadavg()[0]
    spent = float(cache.pop("_seconds", 0.0))
    for seed in parse_seeds(args.seeds):
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        t0 = time.perf_counter()
        if str(seed) not in cache:
            cache[str(seed)] = run_seed(seed, tasks, log=log)
        elif set(arm_order()) - set(cache[str(seed)]):
            cache[str(seed)] = extend_seed(seed, tasks, cache[str(seed)])
        else:
            continue
        spent += time.perf_counter() - t0
        print(f"seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        if args.cache is not None:
            args.cache.write_text(json.dumps({**cache, "_seconds": spent}), encoding="utf-8")
        if args.save:
            save(args.save, report(cache, spent, (load0, os.getloadavg()[0])), argv)
    if cache:
        text = report(cache, spent, (load0, os.getloadavg()[0]))
        if args.save:  # also when every seed came from the cache
            save(args.save, text, argv)
        print(f"# {TITLE}\n\n{text}")


def save(path: Path, text: str, argv: list[str] | None) -> None:
    """The results file and its JSON (bench_results.write_results)."""
    command = "python benchmarks/train_positions_seeds.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    bench_results.write_results(path, text, TITLE, command, kind=STEM)


if __name__ == "__main__":
    main()
