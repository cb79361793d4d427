"""Typical wrong answers, run through the labs' checks as a student meets them (issue 48, item 4).

Each entry is a function a student could write for an exercise, as notebook source: it runs in
a namespace of its own (as a notebook's, ``__name__ == "__main__"``), is called on the lab's
visible input, and the check's verdict is what the notebook would print: the plain check on
that input, then the grade's rules (:func:`attnbook.exercises.practice_verdict`: method limits,
required names, a second input). A mistake counts as *named* when the verdict holds the phrase
that names it; a mistake no message names is listed with ``None`` and must still fail.

Where no single input can tell every named mistake apart (Lab 12's cache before and after it
fills its window, Lab 19's splits decided by the SMs or by the key blocks), the exercise cell
checks two inputs, and a named mistake must fail the plain check on one of them, with its name
(issue 48 §2), not only the second input the grade's rules add.

``python tests/test_check_mistakes.py`` prints, per lab, how many mistakes are named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from attnbook.exercises import Feedback, gpu, kv, mask_functions, positions, practice_verdict


@dataclass(frozen=True)
class Mistake:
    lab: str
    check: str  # the check's name in the module's GRADED
    label: str  # the mistake, in a few words
    source: str  # the student's function (and imports), as typed in the notebook
    named: str | None  # a phrase of the verdict that names it; None: no message names it


# The labs' visible inputs (the exercise cells of labs 20 and 21).
PAIR = torch.tensor([1.0, 0.5], dtype=torch.float64)
M, THETA = 3, 10000.0 ** (-2 * 1 / 8)
QV, KV = torch.randn(2, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
Q_POS, K_POS = torch.arange(6, 10), torch.arange(10)
W = torch.randn(16, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
DOC = torch.tensor([0, 0, 1, 1, 1, 1, 1, 2, 2])
CACHED = torch.arange(6)[:, None] + 4 >= torch.arange(10)[None, :]
SCORES3 = torch.tensor([-80.0, -30.0, -5.0, 0.0, 5.0, 30.0, 80.0], dtype=torch.float64)

VISIBLE = {  # check -> (module, the lab's call of the function, the check's other arguments)
    "check_cache_bytes": (kv, (3, 512, 64, 8, 128, 4), (3, 512, 64, 8, 128, 4)),
    "check_splits": (gpu, (1, 32, 8, 100, 108, 16), (1, 32, 8, 100, 108, 16)),
    "check_rotate_pair": (positions, (PAIR, M, THETA), (PAIR, M, THETA)),
    "check_relative_scores": (positions, (QV, KV, Q_POS, K_POS), (QV, KV, Q_POS, K_POS)),
    "check_to_half": (positions, (W, 2), (W, 2)),
    "check_alibi_slopes": (positions, (6,), (6,)),
    "check_document_mod": (mask_functions, (DOC, 3), (DOC, 3)),
    "check_tile_counts": (mask_functions, (CACHED, 2, 4), (CACHED, 2, 4)),
    "check_softcap_grad": (mask_functions, (SCORES3, 50.0), (SCORES3, 50.0)),
}

# Inputs an exercise cell checks before its graded call (printed above it), where one input
# cannot tell the named mistakes apart: check -> [(call, check_args), ...].
MORE_VISIBLE = {
    "check_cache_bytes": [((5, 100, 64, 8, 128, 4), (5, 100, 64, 8, 128, 4))],  # T < window
    "check_splits": [((3, 32, 8, 32768, 108, 16), (3, 32, 8, 32768, 108, 16))],  # SMs decide
}

L12, L19, L20, L21 = "12_kv_cache", "19_flash_decoding", "20_positions", "21_mask_functions"


def _rotate(body: str) -> str:
    return f"def rotate_pair(pair, m, theta):\n{body}\n"


def _rope(q_at: str, k_at: str, tail: str = "Q @ K.T", layout: str = "") -> str:
    return ("from attnbook.positions import apply_rope\n"
            "def rope_scores(q, k, q_pos, k_pos):\n"
            f"    Q = apply_rope(q.expand(len(q_pos), -1), {q_at}{layout})\n"
            f"    K = apply_rope(k.expand(len(k_pos), -1), {k_at}{layout})\n"
            f"    return {tail}\n")


def _half(order: str, body: str = "weight.reshape(n_heads, d_h, d_in)[:, order]"
          ".reshape(rows, d_in)") -> str:
    return ("def interleaved_to_half(weight, n_heads):\n"
            "    rows, d_in = weight.shape\n"
            "    d_h = rows // n_heads\n"
            f"    order = {order}\n"
            f"    return {body}\n")


def _slopes(body: str) -> str:
    return ("def head_slopes(h):\n"
            "    n = 2 ** int(math.log2(h))\n"
            f"{body}\n"
            "    return torch.tensor(slopes, dtype=torch.float64)\n")


def _doc(condition: str) -> str:
    return ("from attnbook.exercises.mask_functions import allowed_matrix\n"
            "def document_window_allowed(document_ids, w):\n"
            "    def mod(b, h, q_idx, kv_idx):\n"
            "        back = q_idx - kv_idx\n"
            "        same = document_ids[q_idx] == document_ids[kv_idx]\n"
            f"        return {condition}\n"
            "    return allowed_matrix(mod, T=len(document_ids))\n")


def _tiles(rows: str = "allowed.shape[0]", cols: str = "allowed.shape[1]", bm: str = "block_m",
           bn: str = "block_n", kind: str = "0 if not tile.any() else 2 if tile.all() else 1",
           ) -> str:
    return ("def tile_counts(allowed, block_m, block_n):\n"
            "    counts = [0, 0, 0]\n"
            f"    for i0 in range(0, {rows}, {bm}):\n"
            f"        for j0 in range(0, {cols}, {bn}):\n"
            f"            tile = allowed[i0:i0 + {bm}, j0:j0 + {bn}]\n"
            f"            counts[{kind}] += 1\n"
            "    return counts\n")


def _softcap(expr: str) -> str:
    return f"def softcap_grad(scores, cap):\n    return {expr}\n"


def _bytes(expr: str) -> str:
    return ("def cache_bytes(B, T, d, n_layers, window, bytes_per_number):\n"
            f"    return {expr}\n")


def _splits(fill: str = "math.ceil(n_sm / (B * h_kv))", blocks: str = "math.ceil(T / block_n)",
            ) -> str:
    return ("def n_splits(B, h, h_kv, T, n_sm, block_n):\n"
            f"    return max(1, min({fill}, {blocks}))\n")


ROT = "    c, s = math.cos(m * theta), math.sin(m * theta)\n"
HALVES = "list(range(0, d_h, 2)) + list(range(1, d_h, 2))"

KEPT = "min(T, window)"

MISTAKES = [
    # Lab 12, Exercise 2: the bytes of a sliding-window cache.
    Mistake(L12, "check_cache_bytes", "all T tokens",
            _bytes("2 * n_layers * B * T * d * bytes_per_number"), "a cache of all T tokens"),
    Mistake(L12, "check_cache_bytes", "window tokens before the window fills",
            _bytes("2 * n_layers * B * window * d * bytes_per_number"),
            "window tokens even when fewer have arrived"),
    Mistake(L12, "check_cache_bytes", "max, not min",
            _bytes("2 * n_layers * B * max(T, window) * d * bytes_per_number"), KEPT),
    Mistake(L12, "check_cache_bytes", "one layer",
            _bytes(f"2 * B * {KEPT} * d * bytes_per_number"), "one layer only"),
    Mistake(L12, "check_cache_bytes", "keys only",
            _bytes(f"n_layers * B * {KEPT} * d * bytes_per_number"), "the keys only"),
    Mistake(L12, "check_cache_bytes", "numbers, not bytes",
            _bytes(f"2 * n_layers * B * {KEPT} * d"), "a count of numbers, not bytes"),
    Mistake(L12, "check_cache_bytes", "queries too",
            _bytes(f"3 * n_layers * B * {KEPT} * d * bytes_per_number"),
            "queries, keys and values"),
    Mistake(L12, "check_cache_bytes", "no batch",
            _bytes(f"2 * n_layers * {KEPT} * d * bytes_per_number"), "one sequence only"),
    Mistake(L12, "check_cache_bytes", "window one too wide",
            _bytes("2 * n_layers * B * min(T, window + 1) * d * bytes_per_number"),
            "a window one token too wide"),
    Mistake(L12, "check_cache_bytes", "kv_cache_bytes under another name",
            "from attnbook.kv_cache import kv_cache_bytes as size\n"
            + _bytes(f"size(n_layers, B, 1, {KEPT}, d, bytes_per_number)"),
            "uses kv_cache_bytes"),
    # Lab 19, Exercise 2: how many splits.
    Mistake(L19, "check_splits", "no cap", "def n_splits(B, h, h_kv, T, n_sm, block_n):\n"
            "    return max(1, math.ceil(n_sm / (B * h_kv)))\n", "no cap at one key block"),
    Mistake(L19, "check_splits", "B h query heads", _splits(fill="math.ceil(n_sm / (B * h))"),
            "counted B h query heads"),
    Mistake(L19, "check_splits", "rounded down", _splits(fill="n_sm // (B * h_kv)"),
            "rounded down"),
    Mistake(L19, "check_splits", "int(), rounded down", _splits(fill="int(n_sm / (B * h_kv))"),
            "rounded down"),
    Mistake(L19, "check_splits", "T // block_n", _splits(blocks="T // block_n"),
            "T // block_n key blocks"),
    Mistake(L19, "check_splits", "n_sm / B", _splits(fill="math.ceil(n_sm / B)"), "n_sm / B"),
    Mistake(L19, "check_splits", "n_sm", "def n_splits(B, h, h_kv, T, n_sm, block_n):\n"
            "    return n_sm\n", "the B h_kv programs exist already"),
    Mistake(L19, "check_splits", "split_count under another name",
            "from attnbook.gpu.decoding import split_count as rule\n"
            "def n_splits(B, h, h_kv, T, n_sm, block_n):\n"
            "    return rule(B, h_kv, T, n_sm, block_n=block_n)\n", "uses split_count"),
    # Lab 20, Exercise 1: rotate one pair.
    Mistake(L20, "check_rotate_pair", "clockwise", _rotate(
        ROT + "    return torch.stack([c * pair[0] + s * pair[1], -s * pair[0] + c * pair[1]])"),
        "a rotation the other way"),
    Mistake(L20, "check_rotate_pair", "angle theta", _rotate(
        "    c, s = math.cos(theta), math.sin(theta)\n"
        "    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])"),
        "a rotation by θ alone"),
    Mistake(L20, "check_rotate_pair", "cos and sin swapped", _rotate(
        ROT + "    return torch.stack([s * pair[0] - c * pair[1], c * pair[0] + s * pair[1]])"),
        "cos and sin swapped"),
    Mistake(L20, "check_rotate_pair", "unrotated", _rotate("    return pair.clone()"),
            "the pair unrotated"),
    Mistake(L20, "check_rotate_pair", "(m + 1) theta", _rotate(
        "    c, s = math.cos((m + 1) * theta), math.sin((m + 1) * theta)\n"
        "    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])"),
        "(m + 1)·θ"),
    Mistake(L20, "check_rotate_pair", "apply_rope under another name",
            "from attnbook import apply_rope as turn\n" + _rotate(
                "    x = torch.zeros(1, 8, dtype=pair.dtype)  # pair 1 of width 8 turns by theta\n"
                "    x[0, 2:4] = pair\n"
                "    return turn(x, torch.tensor([m]), layout='interleaved')[0, 2:4]"),
            "uses apply_rope"),
    Mistake(L20, "check_rotate_pair", "the angle in degrees", _rotate(
        "    a = math.radians(m * theta)\n"
        "    c, s = math.cos(a), math.sin(a)\n"
        "    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])"),
        "taken in degrees"),
    Mistake(L20, "check_rotate_pair", "the angle times pi / 180", _rotate(
        "    c, s = math.cos(m * theta * math.pi / 180), math.sin(m * theta * math.pi / 180)\n"
        "    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])"),
        "taken in degrees"),
    Mistake(L20, "check_rotate_pair", "the angle converted to degrees", _rotate(
        "    a = math.degrees(m * theta)\n"
        "    c, s = math.cos(a), math.sin(a)\n"
        "    return torch.stack([c * pair[0] - s * pair[1], s * pair[0] + c * pair[1]])"),
        "converted to degrees"),
    # Lab 20, Exercise 2: rotary scores after a cache.
    Mistake(L20, "check_relative_scores", "no rotation", _rope("q_pos", "k_pos", tail=(
        "q.expand(len(q_pos), -1) @ k.expand(len(k_pos), -1).T")), "no rotation at all"),
    Mistake(L20, "check_relative_scores", "query only", _rope("q_pos", "k_pos", tail=(
        "Q @ k.expand(len(k_pos), -1).T")), "only the query rotated"),
    Mistake(L20, "check_relative_scores", "key only", _rope("q_pos", "k_pos", tail=(
        "q.expand(len(q_pos), -1) @ K.T")), "only the key rotated"),
    Mistake(L20, "check_relative_scores", "transpose", _rope("q_pos", "k_pos", tail="K @ Q.T"),
            "the transpose"),
    Mistake(L20, "check_relative_scores", "query at its row number",
            _rope("torch.arange(len(q_pos))", "k_pos"), "not to its position q_pos[i]"),
    Mistake(L20, "check_relative_scores", "key at its column number",
            _rope("q_pos", "torch.arange(len(k_pos))"), "not to its position k_pos[j]"),
    Mistake(L20, "check_relative_scores", "both at row and column numbers",
            _rope("torch.arange(len(q_pos))", "torch.arange(len(k_pos))"),
            "row and column numbers"),
    Mistake(L20, "check_relative_scores", "interleaved layout",
            _rope("q_pos", "k_pos", layout=", layout='interleaved'"), "the interleaved layout"),
    Mistake(L20, "check_relative_scores", "the wrong way", _rope("-q_pos", "-k_pos"),
            "rotations the wrong way"),
    Mistake(L20, "check_relative_scores", "divided by sqrt(d_h)",
            _rope("q_pos", "k_pos", tail="Q @ K.T / math.sqrt(q.numel())"),
            "divided by sqrt(d_h)"),
    # Lab 20, Exercise 3: interleaved to half layout.
    Mistake(L20, "check_to_half", "one permutation over all rows", _half(
        "list(range(0, rows, 2)) + list(range(1, rows, 2))", body="weight[order]"),
        "one permutation over all the rows"),
    Mistake(L20, "check_to_half", "inverse permutation", _half(
        "[i // 2 + (d_h // 2) * (i % 2) for i in range(d_h)]"), "the inverse permutation"),
    Mistake(L20, "check_to_half", "unchanged", _half(HALVES, body="weight.clone()"),
            "the weight unchanged"),
    Mistake(L20, "check_to_half", "columns reordered", _half(
        "list(range(0, d_in, 2)) + list(range(1, d_in, 2))", body="weight[:, order]"),
        "the columns (input features) reordered"),
    Mistake(L20, "check_to_half", "odd features first", _half(
        "list(range(1, d_h, 2)) + list(range(0, d_h, 2))"), "the odd features first"),
    # Lab 20, Exercise 4: ALiBi's slopes for any h.
    Mistake(L20, "check_alibi_slopes", "2^(-8i/h) for any h", _slopes(
        "    slopes = [2.0 ** (-8 * i / h) for i in range(1, h + 1)]"),
        "with h not a power of two"),
    Mistake(L20, "check_alibi_slopes", "i from 0", _slopes(
        "    slopes = [2.0 ** (-8 * i / n) for i in range(n)]\n"
        "    slopes += [2.0 ** (-8 * i / (2 * n)) for i in range(0, 2 * (h - n), 2)]"),
        "i counted from 0"),
    Mistake(L20, "check_alibi_slopes", "i from 0 in n's slopes only", _slopes(
        "    slopes = [2.0 ** (-8 * i / n) for i in range(n)]\n"
        "    slopes += [2.0 ** (-8 * i / (2 * n)) for i in range(1, 2 * (h - n), 2)]"),
        "i counted from 0 in the slopes of the power of two"),
    Mistake(L20, "check_alibi_slopes", "without the 8", _slopes(
        "    slopes = [2.0 ** (-i / n) for i in range(1, n + 1)]\n"
        "    slopes += [2.0 ** (-i / (2 * n)) for i in range(1, 2 * (h - n), 2)]"),
        "without the 8"),
    Mistake(L20, "check_alibi_slopes", "reverse order", _slopes(
        "    slopes = [2.0 ** (-8 * i / n) for i in range(1, n + 1)]\n"
        "    slopes += [2.0 ** (-8 * i / (2 * n)) for i in range(1, 2 * (h - n), 2)]\n"
        "    slopes = slopes[::-1]"), "the slopes in reverse order"),
    Mistake(L20, "check_alibi_slopes", "2^(-8/i)", _slopes(
        "    slopes = [2.0 ** (-8 / i) for i in range(1, n + 1)]\n"
        "    slopes += [2.0 ** (-8 / i) for i in range(1, 2 * (h - n), 2)]"),
        "2^(-8/i)"),
    Mistake(L20, "check_alibi_slopes", "first h - n of 2n", _slopes(
        "    slopes = [2.0 ** (-8 * i / n) for i in range(1, n + 1)]\n"
        "    slopes += [2.0 ** (-8 * i / (2 * n)) for i in range(1, h - n + 1)]"),
        "the first h - n slopes of 2n"),
    Mistake(L20, "check_alibi_slopes", "even-numbered of 2n", _slopes(
        "    slopes = [2.0 ** (-8 * i / n) for i in range(1, n + 1)]\n"
        "    slopes += [2.0 ** (-8 * i / (2 * n)) for i in range(2, 2 * (h - n) + 1, 2)]"),
        "the even-numbered slopes of 2n"),
    Mistake(L20, "check_alibi_slopes", "added slopes first", _slopes(
        "    slopes = [2.0 ** (-8 * i / (2 * n)) for i in range(1, 2 * (h - n), 2)]\n"
        "    slopes += [2.0 ** (-8 * i / n) for i in range(1, n + 1)]"),
        "the added slopes of 2n put first"),
    Mistake(L20, "check_alibi_slopes", "next power of two, cut", _slopes(
        "    n2 = 2 * n if n < h else n\n"
        "    slopes = [2.0 ** (-8 * i / n2) for i in range(1, h + 1)]"),
        "the slopes of the next power of two"),
    Mistake(L20, "check_alibi_slopes", "sorted steepest first", _slopes(
        "    slopes = [2.0 ** (-8 * i / n) for i in range(1, n + 1)]\n"
        "    slopes += [2.0 ** (-8 * i / (2 * n)) for i in range(1, 2 * (h - n), 2)]\n"
        "    slopes = sorted(slopes, reverse=True)"), "the slopes sorted"),
    Mistake(L20, "check_alibi_slopes", "alibi_slopes under another name",
            "from attnbook.positions import alibi_slopes as paper\n"
            "def head_slopes(h):\n"
            "    return paper(h, dtype=torch.float64)\n", "uses alibi_slopes"),
    # Lab 21, Exercise 1: a document mask with a window, through allowed_matrix.
    Mistake(L21, "check_document_mod", "same document alone", _doc("same & (back < w)"),
            "the same-document test alone"),
    Mistake(L21, "check_document_mod", "causal alone", _doc("(back >= 0) & (back < w)"),
            "the causal mask alone"),
    Mistake(L21, "check_document_mod", "the blocked set",
            _doc("~(same & (back >= 0) & (back < w))"), "the blocked set"),
    Mistake(L21, "check_document_mod", "strict inequality",
            _doc("same & (back > 0) & (back < w)"), "a strict inequality"),
    Mistake(L21, "check_document_mod", "same or earlier document", _doc(
        "(document_ids[kv_idx] <= document_ids[q_idx]) & (back >= 0) & (back < w)"),
        "keys of the same or an earlier document"),
    Mistake(L21, "check_document_mod", "position against document id", _doc(
        "(q_idx == document_ids[kv_idx]) & (back >= 0) & (back < w)"),
        "the query's position compared with the key's document id"),
    Mistake(L21, "check_document_mod", "no window", _doc("same & (back >= 0)"),
            "the document mask without the window"),
    Mistake(L21, "check_document_mod", "window one too wide",
            _doc("same & (back >= 0) & (back <= w)"), "a window one key too wide"),
    Mistake(L21, "check_document_mod", "window one too narrow",
            _doc("same & (back >= 0) & (back < w - 1)"), "a window one key too narrow"),
    Mistake(L21, "check_document_mod", "window on both sides",
            _doc("same & (back.abs() < w)"), "a window on both sides"),
    Mistake(L21, "check_document_mod", "multiplied, not bool",
            _doc("same * (back >= 0) * (back < w) * 1"), "must return bool"),
    Mistake(L21, "check_document_mod", "without allowed_matrix",
            "def document_window_allowed(document_ids, w):\n"
            "    i = torch.arange(len(document_ids))\n"
            "    back = i[:, None] - i[None, :]\n"
            "    same = document_ids[:, None] == document_ids[None, :]\n"
            "    return same & (back >= 0) & (back < w)\n", "does not use allowed_matrix"),
    Mistake(L21, "check_document_mod", "a tensor passed as the mask_mod",
            "from attnbook.exercises.mask_functions import allowed_matrix\n"
            "def document_window_allowed(document_ids, w):\n"
            "    i = torch.arange(len(document_ids))\n"
            "    back = i[:, None] - i[None, :]\n"
            "    same = document_ids[:, None] == document_ids[None, :]\n"
            "    return allowed_matrix(same & (back >= 0) & (back < w), T=len(document_ids))\n",
            "allowed_matrix takes a mask_mod"),
    # Lab 21, Exercise 2: empty, partial and full tiles.
    Mistake(L21, "check_tile_counts", "entries, not tiles",
            "def tile_counts(allowed, block_m, block_n):\n"
            "    return [int((~allowed).sum()), 0, int(allowed.sum())]\n",
            "the counts of blocked (empty), mixed and allowed entries"),
    Mistake(L21, "check_tile_counts", "full and empty swapped",
            _tiles(kind="2 if not tile.any() else 0 if tile.all() else 1"),
            "full and empty swapped"),
    Mistake(L21, "check_tile_counts", "partial counted as full",
            _tiles(kind="0 if not tile.any() else 2"), "partial tiles counted as full"),
    Mistake(L21, "check_tile_counts", "partial counted as empty",
            _tiles(kind="2 if tile.all() else 0"), "partial tiles counted as empty"),
    Mistake(L21, "check_tile_counts", "last tiles left out",
            _tiles(rows="allowed.shape[0] // block_m * block_m",
                   cols="allowed.shape[1] // block_n * block_n"), "the last, shorter tiles"),
    Mistake(L21, "check_tile_counts", "b_m and b_n swapped", _tiles(bm="block_n", bn="block_m"),
            "b_m and b_n swapped"),
    Mistake(L21, "check_tile_counts", "T_q for both axes", _tiles(cols="allowed.shape[0]"),
            "used for both axes"),
    Mistake(L21, "check_tile_counts", "order [empty, full, partial]",
            _tiles(kind="0 if not tile.any() else 1 if tile.all() else 2"),
            "the right three counts in another order"),
    # Lab 21, Exercise 3: the derivative of softcapping.
    Mistake(L21, "check_softcap_grad", "the capped score",
            _softcap("cap * torch.tanh(scores / cap)"), "the softcapped score itself"),
    Mistake(L21, "check_softcap_grad", "tanh' at s", _softcap("1 - torch.tanh(scores) ** 2"),
            "tanh's derivative at s, not at s / cap"),
    Mistake(L21, "check_softcap_grad", "no square", _softcap("1 - torch.tanh(scores / cap)"),
            "without the square"),
    Mistake(L21, "check_softcap_grad", "extra 1 / cap",
            _softcap("(1 - torch.tanh(scores / cap) ** 2) / cap"), "an extra 1 / cap"),
    Mistake(L21, "check_softcap_grad", "outer cap kept",
            _softcap("cap * (1 - torch.tanh(scores / cap) ** 2)"), "the outer factor cap"),
    Mistake(L21, "check_softcap_grad", "all ones", _softcap("torch.ones_like(scores)"),
            "all ones"),
    Mistake(L21, "check_softcap_grad", "autograd", (
        "def softcap_grad(scores, cap):\n"
        "    s = scores.detach().clone().requires_grad_()\n"
        "    (cap * torch.tanh(s / cap)).sum().backward()\n"
        "    return s.grad\n"), "uses backward"),
    Mistake(L21, "check_softcap_grad", "sech squared at s / cap, in float32", _softcap(
        "(1 / torch.cosh(scores.float() / cap) ** 2)"), "right only to float32's precision"),
]


def visible_inputs(check: str) -> list[tuple[tuple, tuple]]:
    """The inputs the exercise cell checks, in its order: [(call, check_args), ...]."""
    _, call, check_args = VISIBLE[check]
    return [*MORE_VISIBLE.get(check, []), (call, check_args)]


def _student(m: Mistake) -> dict:
    namespace = {"__name__": "__main__", "torch": torch, "math": math}
    exec(compile(m.source, f"<{m.label}>", "exec"), namespace)  # noqa: S102
    return namespace


def verdict(m: Mistake):
    """What the notebook's check prints for ``m``: the check on the lab's input, then the
    grade's rules (method limits, required names, a second input); where the cell checks more
    than one input, every verdict in the cell's order, joined by " | " (ok if all are)."""
    module = VISIBLE[m.check][0]
    spec = module.GRADED[m.check]
    namespace = _student(m)
    verdicts = []
    for call, check_args in visible_inputs(m.check):
        try:
            answer = namespace[spec.function](*call)
        except Exception as err:  # noqa: BLE001 (the notebook shows the error's message)
            verdicts.append(Feedback(False, f"{type(err).__name__}: {err}"))
            continue
        verdicts.append(practice_verdict(spec, spec.check(answer, *check_args), namespace))
    return Feedback(all(v.ok for v in verdicts), " | ".join(v.message for v in verdicts))


@pytest.mark.parametrize("m", MISTAKES, ids=lambda m: f"{m.lab[:2]}-{m.label}")
def test_a_typical_mistake_fails_and_is_named(m):
    v = verdict(m)
    assert not v.ok, (m.label, v.message)
    if m.named is not None:
        assert m.named in v.message, (m.label, v.message)
        assert "typed in" not in v.message, (m.label, v.message)


# Issue 48 §2: the visible input itself tells these checks' named mistakes apart (not only the
# second input that the grade's rules add). Method limits are no matter of the input.
TOLD_APART_ON_SIGHT = ("check_cache_bytes", "check_splits", "check_rotate_pair", "check_to_half")


@pytest.mark.parametrize("m", [m for m in MISTAKES if m.check in TOLD_APART_ON_SIGHT
                               and m.named is not None and not m.named.startswith("uses ")],
                         ids=lambda m: f"{m.lab[:2]}-{m.label}")
def test_a_named_mistake_fails_a_visible_input_by_name(m):
    """The plain check (no second input) fails the mistake on one of the inputs the exercise
    cell checks, and names it there."""
    spec = VISIBLE[m.check][0].GRADED[m.check]
    namespace = _student(m)
    messages = []
    for call, check_args in visible_inputs(m.check):
        fb = spec.check(namespace[spec.function](*call), *check_args)
        messages.append(fb.message)
        if not fb.ok and m.named in fb.message:
            return
    pytest.fail(f"{m.label}: no visible input names it: {messages}")


def test_the_labs_cells_check_these_inputs():
    """VISIBLE and MORE_VISIBLE are what the exercise cells of labs 12 and 19 call: the graded
    call (the last, the one the grader reads) and the inputs printed above it."""
    import re
    import sys
    from pathlib import Path

    import nbformat

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "scripts"))
    from grading import labs

    for lab, check in ((L12, "check_cache_bytes"), (L19, "check_splits")):
        nb = nbformat.read(root / "notebooks" / f"{lab}.ipynb", as_version=4)
        ex = next(e for e in labs.find_exercises(nb) if e.check == check)
        assert ex.variable == "answer", ex.call
        calls = [tuple(int(n) for n in re.findall(r"=\s*(\d+)", c))
                 for c in re.findall(rf"{check}\((\w+, [^)]*)\)", nb.cells[ex.cell].source)]
        assert calls == [args for _, args in visible_inputs(check)], calls
        assert tuple(int(n) for n in re.findall(r"=\s*(\d+)", ex.call)) == VISIBLE[check][2]


@pytest.mark.parametrize("check, right", [("check_cache_bytes", 2 * 8 * 3 * 128 * 64 * 4),
                                          ("check_splits", 7)])
def test_the_graded_answer_typed_in_is_no_named_mistake_on_the_other_input(check, right):
    """The right number for the graded call, typed in, is no named mistake's value on the input
    printed above it (it would be misnamed there), and the grade's rules ask if it is typed in."""
    module, _, check_args = VISIBLE[check]
    spec = module.GRADED[check]
    assert spec.check(right, *check_args).ok
    for _, other_args in MORE_VISIBLE[check]:
        fb = spec.check(right, *other_args)
        assert not fb.ok and fb.generic, fb.message
    namespace = {"__name__": "__main__", spec.function: lambda *args: right}
    v = practice_verdict(spec, spec.check(right, *check_args), namespace)
    assert not v.ok and "typed in" in v.message, v.message


def test_low_precision_is_named_not_called_typed_in():
    """An answer computed in float32 for a float64 input is named as such, not 'differs by up
    to 1e-7' (which the second input's 'typed in?' made worse); a float32 answer that is simply
    wrong is not."""
    from attnbook.exercises import check_tensor

    right = torch.linspace(-3, 3, 7, dtype=torch.float64).tanh()
    close = right.float() + 1e-7
    v = check_tensor(close, right, name="y", atol=1e-9, rtol=1e-9)
    assert not v.ok and not v.generic and "right only to float32's precision" in v.message
    v = check_tensor((right + 0.1).float(), right, name="y", atol=1e-9, rtol=1e-9)
    assert v.generic and "differs by up to" in v.message
    assert check_tensor(right + 1e-7, right, name="y", atol=1e-9, rtol=1e-9).generic


def counts() -> dict[str, tuple[int, int]]:
    """lab -> (mistakes a message names, mistakes tried)."""
    out: dict[str, tuple[int, int]] = {}
    for m in MISTAKES:
        named, tried = out.get(m.lab, (0, 0))
        out[m.lab] = (named + (m.named is not None), tried + 1)
    return out


def test_most_typical_mistakes_are_named():
    for lab, (named, tried) in counts().items():
        assert named >= 0.85 * tried, (lab, named, tried)


def test_the_right_answers_pass():
    """The book's solutions pass the same harness (so a failure above is the mistake's)."""
    from conftest import book_solutions

    for lab in (L12, L19, L20, L21):
        for check, fn in book_solutions(lab).items():
            if check not in VISIBLE:
                continue  # an exercise of the lab whose mistakes are not scripted here
            spec = VISIBLE[check][0].GRADED[check]
            namespace = {"__name__": "__main__", spec.function: fn}
            for call, check_args in visible_inputs(check):
                v = practice_verdict(spec, spec.check(fn(*call), *check_args), namespace)
                assert v.ok, (check, v.message)


if __name__ == "__main__":
    for lab, (named, tried) in counts().items():
        print(f"{lab}: {named} of {tried} typical mistakes named")
