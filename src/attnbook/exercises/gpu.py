"""Checks for the labs of Part VI, "Attention on a GPU" (Labs 16 to 19)."""

from __future__ import annotations

import math

import torch

from ..gpu.decoding import merge_partials
from ..gpu.io_cost import standard_io
from . import Feedback, check_number, check_tensor


def check_decode_intensity(answer, T: int, d: int, bytes_per: int) -> Feedback:
    """Lab 16: FLOPs per byte of one decoding step (one query, T cached keys and values)."""
    flops = 4 * T * d  # q·k_j for every j, then the weighted sum of the v_j
    right = flops / ((2 * T * d + 2 * d) * bytes_per)  # read K, V and q; write the output
    mistakes = {
        "the count without the values: V is read too, as many bytes as K":
            flops / ((T * d + 2 * d) * bytes_per),
        "FLOPs per element, not per byte: multiply the elements by the bytes per element":
            flops / (2 * T * d + 2 * d),
        "one FLOP per multiply-add: a multiply-add counts as 2 FLOPs":
            flops / 2 / ((2 * T * d + 2 * d) * bytes_per),
    }
    return check_number(answer, right, mistakes, name="the intensity", rtol=1e-3)


def check_standard_io(answer, N: int, d: int) -> Feedback:
    """Lab 16: HBM accesses (elements) of standard attention, Algorithm 0 of Dao et al."""
    mistakes = {
        "the count without P: the softmax writes P, and the weighted sum reads it again":
            4 * N * d + 2 * N * N,
        "only the N x N matrices: Q, K, V are read and O written too": 4 * N * N,
        "the inputs and output only: that is FlashAttention's count with one key block":
            4 * N * d,
    }
    return check_number(answer, standard_io(N, d), mistakes, name="the number of accesses")


def check_programs(answer, B: int, h: int, T: int, block_m: int) -> Feedback:
    """Lab 17: how many programs the forward kernel's grid launches."""
    right = math.ceil(T / block_m) * B * h
    mistakes = {
        "T // block_m: the last, partial query block needs a program too":
            (T // block_m) * B * h,
        "the count without the heads: the grid has one column per (batch, head)":
            math.ceil(T / block_m) * B,
        "one program per query: each program takes a block of block_m queries": T * B * h,
    }
    return check_number(answer, right, mistakes, name="the number of programs")


def causal_tiles(T: int, block_m: int, block_n: int) -> int:
    """(query block, key block) tiles the causal forward loop visits, per (batch, head)."""
    return sum(math.ceil(min(i0 + block_m, T) / block_n) for i0 in range(0, T, block_m))


def check_tiles(answer, T: int, block_m: int, block_n: int) -> Feedback:
    """Lab 17: tiles visited by the causal forward kernel for one (batch, head)."""
    n_m, n_n = math.ceil(T / block_m), math.ceil(T / block_n)
    right = causal_tiles(T, block_m, block_n)
    mistakes = {
        "every tile: the causal loop stops at the diagonal block": n_m * n_n,
        "the tiles strictly below the diagonal: the diagonal tiles are visited (and masked)":
            right - n_m,
    }
    mistakes = {k: v for k, v in mistakes.items() if v != right}
    return check_number(answer, right, mistakes, name="the number of tiles")


def check_delta(answer, dout: torch.Tensor, out: torch.Tensor) -> Feedback:
    """Lab 18: D_i = rowsum(dO ∘ O), one number per query."""
    right = (dout * out).sum(-1)
    mistakes = {
        "dO ∘ O without the row sum: D has one number per query": dout * out,
        "the row sum of dO alone: multiply by O first": dout.sum(-1),
        "the sum over queries, not over the entries of a row": (dout * out).sum(-2),
        "a product of matrices dO Oᵀ: only the diagonal, dO_i · O_i, is needed": dout @ out.mT,
    }
    return check_tensor(answer, right, mistakes, name="D", atol=1e-9, rtol=1e-9)


def check_backward_ratio(answer) -> Feedback:
    """Lab 18: backward FLOPs over forward FLOPs, counting matmuls of one tile."""
    mistakes = {
        "the ratio without recomputing S = Q Kᵀ: the backward recomputes it first": 2.0,
        "three matmuls: dV, dQ and dK need one each, and dP = dO Vᵀ another": 1.5,
        "the total, forward included: the question asks for the backward alone": 3.5,
    }
    return check_number(answer, 2.5, mistakes, name="the ratio", rtol=1e-6)


def check_merge(answer, outs: torch.Tensor, lses: torch.Tensor) -> Feedback:
    """Lab 19: merge the normalised partial outputs of the splits into one output."""
    right = merge_partials(outs, lses)
    mistakes = {
        "the plain average of the splits: weigh each by its share exp(lse_s)": outs.mean(0),
        "weights lse_s instead of exp(lse_s)": (lses * outs).sum(0) / lses.sum(0),
        "the split with the largest log-sum-exp alone: every split contributes":
            outs.gather(0, lses.argmax(0, keepdim=True).expand(1, *outs.shape[1:]))[0],
    }
    if isinstance(answer, torch.Tensor) and answer.shape == right.shape \
            and torch.isnan(answer).any() and not torch.isnan(right).any():
        return Feedback(False, "Not yet: NaN where every split was empty (0 / 0): divide by "
                               "1 where the total weight is 0.")
    return check_tensor(answer, right, mistakes, name="the merged output", atol=1e-9, rtol=1e-9)


def check_splits(answer, B: int, h: int, n_sm: int, h_kv: int | None = None) -> Feedback:
    """Lab 19: the fewest splits per query that give every SM at least one program.

    The split kernel has one program per (split, batch, key/value head), so the rule counts
    ``B · h_kv`` (``h_kv = h`` without grouped-query attention).
    """
    h_kv = h if h_kv is None else h_kv
    right = math.ceil(n_sm / (B * h_kv))
    mistakes = {
        "counted B h query heads: the g heads that share a key/value head are one program, "
        "so count B h_kv": math.ceil(n_sm / (B * h)),
        "n_sm // (B h_kv), rounded down: then some SMs get no program": n_sm // (B * h_kv),
        "n_sm / B: each head is a program of its own already": math.ceil(n_sm / B),
        "n_sm: the B h_kv programs exist already, divide by them": n_sm,
    }
    mistakes = {k: v for k, v in mistakes.items() if v != right}
    return check_number(answer, right, mistakes, name="the number of splits")
