"""Checks for the labs of Part VI, "Attention on a GPU" (Labs 16 to 19).

Every exercise is a function graded on hidden inputs (``GRADED`` at the bottom). This module
imports only the counting and merging code of :mod:`attnbook.gpu` (``io_cost``, ``decoding``),
never Triton: the grader imports it in its own process, where Triton may be missing.
"""

from __future__ import annotations

import math

import torch

from ..gpu.decoding import merge_partials
from . import Feedback, FunctionExercise, HiddenCase, check_number, check_tensor, practise


def _distinct(mistakes: dict, right) -> dict:
    """The mistakes whose value differs from the right one (on this input)."""
    return {k: v for k, v in mistakes.items() if v != right}


def check_decode_intensity(answer, T: int, d: int, g: int, bytes_per: int) -> Feedback:
    """Lab 16: FLOPs per byte of one decoding step of a grouped-query head: ``g`` queries (the
    query heads that share one key/value head) against ``T`` cached keys and values of width
    ``d``, the cache read once for the group, ``g`` queries read and ``g`` outputs written."""
    flops = 4 * g * T * d  # q·k_j for every j and query, then the weighted sums of the v_j
    moved = 2 * T * d + 2 * g * d  # K and V once; g queries and g outputs
    right = flops / (moved * bytes_per)
    mistakes = {
        "the cache read once per query head: the g heads of a group read K and V once between "
        "them (that is what makes grouped-query decoding cheaper)":
            flops / ((2 * g * T * d + 2 * g * d) * bytes_per),
        "the FLOPs of one query: each of the g query heads does its own 4 T d":
            4 * T * d / (moved * bytes_per),
        "one query and one output moved: each of the g heads reads its query and writes its "
        "output (2 g d elements)":
            flops / ((2 * T * d + 2 * d) * bytes_per),
        "the count without the values: V is read too, as many bytes as K":
            flops / ((T * d + 2 * g * d) * bytes_per),
        "FLOPs per element, not per byte: multiply the elements by the bytes per element":
            flops / moved,
        "one FLOP per multiply-add: a multiply-add counts as 2 FLOPs":
            flops / 2 / (moved * bytes_per),
    }
    return check_number(answer, right, _distinct(mistakes, right), name="the intensity",
                        rtol=1e-6)


def check_standard_io(answer, N: int, d: int, n_extra: int) -> Feedback:
    """Lab 16: HBM accesses (elements) of standard attention with ``n_extra`` elementwise
    kernels on the scores before the softmax (a scale, a mask...), each reading the (N, N)
    matrix and writing it back: Algorithm 0 of Dao et al. is ``n_extra = 0``."""
    algo0 = 4 * N * d + 4 * N * N  # read Q, K; write S; read S, write P; read P, V; write O
    right = algo0 + 2 * n_extra * N * N
    mistakes = {
        "Algorithm 0 alone: each extra step reads the (N, N) scores and writes them back, "
        "2 N² more accesses each": algo0,
        "one access per extra step: an elementwise kernel reads S from HBM and writes the "
        "result back, 2 N² per step": algo0 + n_extra * N * N,
        "the count without P: the softmax writes P, and the weighted sum reads it again":
            right - 2 * N * N,
        "only the N x N matrices: Q, K, V are read and O written too": right - 4 * N * d,
        "the inputs and output only: that is FlashAttention's count with one key block":
            4 * N * d,
    }
    return check_number(answer, right, _distinct(mistakes, right),
                        name="the number of accesses")


def check_programs(answer, B: int, h: int, h_kv: int, T_q: int, T_k: int,
                   block_m: int) -> Feedback:
    """Lab 17: how many programs the forward kernel's grid launches for ``T_q`` queries over
    ``T_k`` keys (a chunk after a cache), ``h`` query heads sharing ``h_kv`` key/value heads:
    one per (block of ``block_m`` queries, batch, query head)."""
    right = math.ceil(T_q / block_m) * B * h
    mistakes = {
        "the query blocks counted over the keys: a program takes a block of queries, and "
        "there are T_q of them": math.ceil(T_k / block_m) * B * h,
        "one program per key/value head: every query head has its own rows, so its own "
        "programs (the group shares only the keys and values it loads)":
            math.ceil(T_q / block_m) * B * h_kv,
        "T_q // block_m: the last, partial query block needs a program too":
            (T_q // block_m) * B * h,
        "the count without the heads: every (batch, head) pair has its own query blocks, "
        "one program each":
            math.ceil(T_q / block_m) * B,
        "the count without the batch: every (batch, head) pair has its own query blocks, "
        "one program each":
            math.ceil(T_q / block_m) * h,
        "one program per query: each program takes a block of block_m queries": T_q * B * h,
    }
    return check_number(answer, right, _distinct(mistakes, right),
                        name="the number of programs")


def causal_tiles(T: int, block_m: int, block_n: int) -> int:
    """(query block, key block) tiles the causal forward loop visits, per (batch, head)."""
    return sum(math.ceil(min(i0 + block_m, T) / block_n) for i0 in range(0, T, block_m))


def _chunk_tiles(T_q: int, T_k: int, block_m: int, block_n: int) -> int:
    """The tiles of a causal chunk of T_q queries over T_k keys (query i at i + T_k - T_q)."""
    offset = T_k - T_q
    return sum(math.ceil(min(i0 + block_m + offset, T_k) / block_n)
               for i0 in range(0, T_q, block_m))


def check_tiles(answer, T_q: int, T_k: int, block_m: int, block_n: int) -> Feedback:
    """Lab 17: tiles the causal forward kernel visits for one (batch, head) when ``T_q`` new
    queries attend to ``T_k`` keys, the ``T_k - T_q`` cached ones first."""
    right = _chunk_tiles(T_q, T_k, block_m, block_n)
    n_m, n_n = math.ceil(T_q / block_m), math.ceil(T_k / block_n)
    mistakes = {
        "the triangle of T_q tokens without a cache: new query i sits at position "
        "i + T_k - T_q and sees every cached key, so its loop runs T_k - T_q keys further":
            causal_tiles(T_q, block_m, block_n),
        "the whole causal square of T_k tokens: the cached tokens' queries are not in this "
        "launch, only the T_q new ones": causal_tiles(T_k, block_m, block_n),
        "every tile: the causal loop stops at the block's last query": n_m * n_n,
        "the key blocks rounded down: a partly covered key block is loaded (and masked) "
        "whole": sum(min(i0 + block_m + T_k - T_q, T_k) // block_n
                     for i0 in range(0, T_q, block_m)),
    }
    return check_number(answer, right, _distinct(mistakes, right), name="the number of tiles")


def _heads_apart(x: torch.Tensor, h: int) -> torch.Tensor:
    """(B, T, h·d) -> (B, h, T, d)."""
    B, T, hd = x.shape
    return x.reshape(B, T, h, hd // h).transpose(1, 2)


def check_delta(answer, dout: torch.Tensor, out: torch.Tensor, h: int) -> Feedback:
    """Lab 18: D = rowsum(dO ∘ O) of every (batch, head, query), from outputs kept with their
    heads side by side, (B, T, h·d), as a module has them before its output projection.

    Shape:
        dout, out: (B, T, h·d) -> answer: (B, h, T)
    """
    B, T, hd = out.shape
    prod = dout * out
    right = _heads_apart(prod, h).sum(-1)
    mistakes = {
        "the row sum over all h·d features: one D per (batch, head, query), so sum each "
        "head's d features apart": prod.sum(-1),
        "the right numbers in the layout (B, T, h): the kernel wants (B, h, T), so move the "
        "heads before the queries (transpose)": prod.reshape(B, T, h, hd // h).sum(-1),
        "the heads split with a plain reshape to (B, h, T, d): that cuts the memory in the "
        "wrong order; split the last axis into (h, d), then move the heads forward":
            prod.reshape(B, h, T, hd // h).sum(-1),
        "dO ∘ O without the row sum: D has one number per query": _heads_apart(prod, h),
        "the row sum of dO alone: multiply by O first": _heads_apart(dout, h).sum(-1),
        "the sum over queries, not over the features of a row": _heads_apart(prod, h).sum(-2),
    }
    return check_tensor(answer, right, mistakes, name="D", atol=1e-9, rtol=1e-9)


def check_backward_ratio(answer, d_qk: int, d_v: int) -> Feedback:
    """Lab 18: the recomputing backward's FLOPs over the forward's, for queries and keys of
    width ``d_qk`` and values of width ``d_v`` (a tile's products; the tile's size cancels)."""
    fwd = d_qk + d_v  # S = Q Kᵀ, O = P V, per query-key pair, in units of 2 FLOPs
    right = (3 * d_qk + 2 * d_v) / fwd  # S again, dQ, dK: d_qk; dV, dP: d_v
    mistakes = {
        "the products counted, not their FLOPs: 5 over 2 holds only when d_qk = d_v; "
        "weigh each product by the width it sums over": 2.5,
        "the widths swapped: S, dQ = dS K and dK = dSᵀ Q sum over d_qk; dV = Pᵀ dO and "
        "dP = dO Vᵀ over d_v": (3 * d_v + 2 * d_qk) / fwd,
        "the ratio without recomputing S = Q Kᵀ: the backward recomputes it first":
            (2 * d_qk + 2 * d_v) / fwd,
        "three matmuls: dV, dQ and dK need one each, and dP = dO Vᵀ another": 1.5,
        "the total, forward included: the question asks for the backward alone":
            right + 1,
    }
    return check_number(answer, right, _distinct(mistakes, right), name="the ratio", rtol=1e-6)


def check_merge(answer, outs: torch.Tensor, lses: torch.Tensor, s_new: torch.Tensor,
                v_new: torch.Tensor) -> Feedback:
    """Lab 19: merge the splits' normalised outputs with the new token's own key, which no
    split saw: its score ``s_new`` and value ``v_new``.

    Shape:
        outs: (S, n, d), lses: (S, n, 1), s_new: (n, 1), v_new: (n, d) -> answer: (n, d)
    """
    parts = torch.cat([outs, v_new[None]]), torch.cat([lses, s_new[None]])
    right = merge_partials(*parts)
    unshifted = torch.exp(parts[1])
    mistakes = {
        "the splits merged without the new key: a key no split saw is one more split, with "
        "log-sum-exp s_new and output v_new": merge_partials(outs, lses),
        "the new value given weight exp(0) = 1: its weight is exp(s_new), as a split's is "
        "exp(L)": merge_partials(*parts[:1], torch.cat([lses, torch.zeros_like(s_new)[None]])),
        "the new value averaged in with weight 1/2: weigh the splits' merge by exp(L) and "
        "the new key by exp(s_new)": (merge_partials(outs, lses) + v_new) / 2,
        "the plain average of the parts: weigh each by its share exp(L)": parts[0].mean(0),
        "weights L instead of exp(L)": (parts[1] * parts[0]).sum(0) / parts[1].sum(0),
        "the part with the largest log-sum-exp alone: every part contributes":
            parts[0].gather(0, parts[1].argmax(0, keepdim=True).expand(1, *outs.shape[1:]))[0],
    }
    if isinstance(answer, torch.Tensor) and answer.shape == right.shape \
            and not torch.isfinite(answer).all() and torch.isfinite(right).all():
        naive = (unshifted * parts[0]).sum(0) / unshifted.sum(0)
        if not torch.isfinite(naive).all():
            return Feedback(False, "Not yet: NaN or inf where the log-sum-exps are large: exp(L) "
                                   "overflows. Subtract the largest L of each query before exp, "
                                   "as the merge rule does (the shift cancels).")
        return Feedback(False, "Not yet: NaN or inf in the merged output, where every part is "
                               "finite: an empty split (L = -inf) must weigh exp(-inf) = 0; "
                               "the new key is never empty, so no row is 0 / 0.")
    return check_tensor(answer, right, mistakes, name="the merged output", atol=1e-9, rtol=1e-9)


def check_splits(answer, B: int, h: int, h_kv: int, T: int, n_sm: int,
                 block_n: int) -> Feedback:
    """Lab 19: the split rule: the fewest splits per query that give every SM at least one
    program, but never finer than one key block (at most ``ceil(T / block_n)`` splits).

    The split kernel has one program per (split, batch, key/value head), so the rule counts
    ``B · h_kv`` programs.
    """
    blocks = max(1, math.ceil(T / block_n))
    right = max(1, min(math.ceil(n_sm / (B * h_kv)), blocks))
    mistakes = {
        "no cap at one key block per split: a split shorter than block_n keys still loads a "
        "whole block, and more splits than key blocks leave some empty; at most "
        "ceil(T / block_n)": math.ceil(n_sm / (B * h_kv)),
        "counted B h query heads: the g heads that share a key/value head are one program, "
        "so count B h_kv": max(1, min(math.ceil(n_sm / (B * h)), blocks)),
        "n_sm // (B h_kv), rounded down: then some SMs get no program":
            max(1, min(n_sm // (B * h_kv), blocks)),
        "T // block_n key blocks: the last, partial block counts too":
            max(1, min(math.ceil(n_sm / (B * h_kv)), T // block_n)),
        "n_sm / B: each head is a program of its own already":
            max(1, min(math.ceil(n_sm / B), blocks)),
        "n_sm: the B h_kv programs exist already, divide by them": n_sm,
    }
    return check_number(answer, right, _distinct(mistakes, right), name="the number of splits")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).
# Counts are functions of whole numbers; a case far from the lab's input catches an answer fixed
# to it. Tensors in float64 on the CPU.


def _pick(g: torch.Generator, options) -> int:
    return options[int(torch.randint(len(options), (1,), generator=g))]


def _intensity_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for T, d, grp, b in ((1, 64, 1, 4), (37, 16, 4, 2), (_pick(g, (500, 777, 1000)), 128, 8, 2),
                         (8192, 128, 1, 2), (_pick(g, (3, 5, 9)), 80, 16, 4)):
        args = (T, d, grp, b)
        cases.append(HiddenCase(args, args, f"T = {T}, d = {d}, g = {grp}, {b} bytes"))
    return cases


def _standard_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for N, d, k in ((1, 1, 0), (_pick(g, (100, 300, 1000)), 64, 3), (4096, 128, 1),
                    (_pick(g, (7, 12, 50)), 16, 0), (65536, 256, 5)):
        cases.append(HiddenCase((N, d, k), (N, d, k), f"N = {N}, d = {d}, n_extra = {k}"))
    return cases


def _program_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for B, h, h_kv, T_q, cached, bm in ((1, 1, 1, 1, 0, 16), (3, 8, 8, 513, 0, 64),
                                        (1, 32, 4, _pick(g, (1, 7, 100)), 4000, 128),
                                        (5, 12, 3, 1000, _pick(g, (1, 250, 999)), 32),
                                        (16, 64, 8, 32768, 0, 128)):
        args = (B, h, h_kv, T_q, T_q + cached, bm)
        cases.append(HiddenCase(args, args, f"B = {B}, h = {h}, h_kv = {h_kv}, T_q = {T_q}, "
                                            f"T_k = {T_q + cached}, block_m = {bm}"))
    return cases


def _tile_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for T_q, cached, bm, bn in ((1, 0, 16, 16), (300, 0, 64, 32), (1, 4095, 128, 64),
                                (_pick(g, (33, 70, 129)), _pick(g, (5, 100, 1000)), 32, 16),
                                (100, 60, 16, 48), (4096, 4096, 128, 128)):
        args = (T_q, T_q + cached, bm, bn)
        cases.append(HiddenCase(args, args, f"T_q = {T_q}, T_k = {T_q + cached}, "
                                            f"block_m = {bm}, block_n = {bn}"))
    return cases


def _delta_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for B, T, h, d in ((1, 1, 1, 1), (2, 5, 3, 4), (1, 7, 4, 2), (3, 2, 2, 8), (2, 6, 1, 3)):
        out, dout = (torch.randn(B, T, h * d, generator=g, dtype=torch.float64)
                     for _ in range(2))
        cases.append(HiddenCase((dout.clone(), out.clone(), h), (dout, out, h),
                                f"dO and O of shape ({B}, {T}, {h * d}), h = {h}"))
    return cases


def _ratio_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for d_qk, d_v in ((64, 64), (192, 128), (_pick(g, (16, 24, 32)), 256), (512, 1),
                      (_pick(g, (40, 80, 96)), _pick(g, (8, 48, 200)))):
        cases.append(HiddenCase((d_qk, d_v), (d_qk, d_v), f"d_qk = {d_qk}, d_v = {d_v}"))
    return cases


def _merge_case(g: torch.Generator, S: int, n: int, d: int, scale: float, empty=(),
                shift: float = 0.0):
    outs = torch.randn(S, n, d, generator=g, dtype=torch.float64)
    lses = shift + scale * torch.randn(S, n, 1, generator=g, dtype=torch.float64)
    for u, row in empty:  # a split that saw only padding: output 0, L = -inf
        outs[u, row], lses[u, row] = 0.0, float("-inf")
    s_new = shift + scale * torch.randn(n, 1, generator=g, dtype=torch.float64)
    v_new = torch.randn(n, d, generator=g, dtype=torch.float64)
    return (outs, lses, s_new, v_new)


def _merge_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for S, n, d, scale, empty, shift, label in (
            (1, 1, 1, 1.0, (), 0.0, "one split, one query of width 1"),
            (4, 3, 5, 2.0, ((0, 0), (2, 1)), 0.0, "4 splits, 3 queries, two splits empty"),
            (2, 2, 3, 1.0, ((0, 1), (1, 1)), 0.0, "2 splits, a query whose splits are all empty"),
            (3, 2, 4, 5.0, (), 800.0, "3 splits, log-sum-exps near 800 (exp overflows there)"),
            (6, 1, 2, 5.0, ((5, 0),), 0.0, "6 splits, one query")):
        args = _merge_case(g, S, n, d, scale, empty, shift)
        cases.append(HiddenCase(tuple(a.clone() for a in args), args, label))
    return cases


def _split_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for B, h, h_kv, T, n_sm, bn in ((1, 1, 1, 1, 1, 16), (2, 8, 8, 32768, 108, 64),
                                    (1, 16, 2, 32768, 132, 64), (1, 32, 8, 100, 108, 16),
                                    (_pick(g, (1, 3)), 8, 1, _pick(g, (40, 200, 1000)), 40, 32),
                                    (64, 32, 32, 4096, 132, 64)):
        args = (B, h, h_kv, T, n_sm, bn)
        cases.append(HiddenCase(args, args, f"B = {B}, h = {h}, h_kv = {h_kv}, T = {T}, "
                                            f"n_sm = {n_sm}, block_n = {bn}"))
    return cases


# The library counts and merges these itself: the exercises ask for the reasoning.
_COUNTERS = ("count_kernel", "decoding_bytes", "flop_count", "TrafficCounter", "standard_io",
             "flash_io", "flash_flops", "flash_io_bound")
_TILES = ("causal_tiles", "flash_flops", "flash_io", "trace_forward", "tile_kind")

GRADED = {
    "check_decode_intensity": FunctionExercise("decode_intensity", check_decode_intensity,
                                               _intensity_cases, forbidden=_COUNTERS),
    "check_standard_io": FunctionExercise("standard_accesses", check_standard_io,
                                          _standard_cases, forbidden=_COUNTERS),
    "check_programs": FunctionExercise("n_programs", check_programs, _program_cases),
    "check_tiles": FunctionExercise("tiles_visited", check_tiles, _tile_cases, forbidden=_TILES),
    "check_delta": FunctionExercise("delta", check_delta, _delta_cases,
                                    forbidden=("flash_attention", "flash_backward",
                                               "tiled_attention_backward", "trace_backward")),
    "check_backward_ratio": FunctionExercise("backward_ratio", check_backward_ratio,
                                             _ratio_cases, forbidden=("flop_count",
                                                                      "FlopCounterMode")),
    "check_merge": FunctionExercise("merge_with_new", check_merge, _merge_cases,
                                    forbidden=("merge_partials", "merge_stats", "flash_decoding",
                                               "split_partials", "online_softmax_stats",
                                               "tiled_attention")),
    "check_splits": FunctionExercise("n_splits", check_splits, _split_cases,
                                     forbidden=("split_count", "flash_decoding",
                                                "decoding_config")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
