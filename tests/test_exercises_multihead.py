"""The checkers of the lab "From one head to many" accept right answers on every hidden case,
name the typical mistakes, and apply the grade's rules in the notebook."""

from __future__ import annotations

import math

import pytest
import torch

from attnbook.exercises import hidden_cases
from attnbook.exercises.multihead import (
    GRADED,
    check_head_scores,
    check_parameter_count,
    check_split_heads,
)
from attnbook.multihead import MultiHeadAttention


def split_qkv_heads(qkv, n_heads):
    B, T, three_d = qkv.shape
    return qkv.view(B, T, 3, n_heads, three_d // 3 // n_heads).permute(2, 0, 3, 1, 4)


def split_by_chunks(qkv, n_heads):
    """Another right answer: cut into Q, K, V first, then split each."""
    B, T, _ = qkv.shape
    return torch.stack([p.unflatten(-1, (n_heads, -1)).transpose(1, 2)
                        for p in qkv.chunk(3, dim=-1)])


def gqa_scores(q, k, n_heads, n_kv_heads):
    B, T, d = q.shape
    d_h = d // n_heads
    qh = q.view(B, T, n_heads, d_h).transpose(1, 2)
    kh = k.view(B, T, n_kv_heads, d_h).transpose(1, 2)
    kh = kh.repeat_interleave(n_heads // n_kv_heads, dim=1)
    return qh @ kh.transpose(-2, -1) / math.sqrt(d_h)


def gqa_scores_by_groups(q, k, n_heads, n_kv_heads):
    """Another right answer: each group of query heads against its key head, by broadcasting."""
    B, T, d = q.shape
    d_h, g = d // n_heads, n_heads // n_kv_heads
    qh = q.view(B, T, n_kv_heads, g, d_h).permute(0, 2, 3, 1, 4)  # (B, h_kv, g, T, d_h)
    kh = k.view(B, T, n_kv_heads, 1, d_h).permute(0, 2, 3, 1, 4)  # (B, h_kv, 1, T, d_h)
    return (qh @ kh.transpose(-2, -1)).flatten(1, 2) / d_h ** 0.5


def parameter_count(d_model, n_heads, n_kv_heads):
    return 2 * d_model ** 2 + 2 * d_model * n_kv_heads * (d_model // n_heads)


@pytest.mark.parametrize("seed", [0, 1, 7, 2024])
def test_right_answers_pass_every_hidden_case(seed):
    for name, solve in (("check_split_heads", split_qkv_heads),
                        ("check_split_heads", split_by_chunks),
                        ("check_head_scores", gqa_scores),
                        ("check_head_scores", gqa_scores_by_groups),
                        ("check_parameter_count", parameter_count)):
        spec = GRADED[name]
        for case in hidden_cases(spec, seed):
            fb = spec.check(solve(*case.call), *case.check_args)
            assert fb.ok, (name, case.label, fb.message)


def test_the_checkers_agree_with_the_module():
    torch.manual_seed(0)
    for h, h_kv in ((2, 2), (4, 2), (4, 1)):
        m = MultiHeadAttention(8, 6, n_heads=h, n_kv_heads=h_kv).double()
        x = torch.randn(2, 6, 8, dtype=torch.float64)
        with torch.no_grad():
            q, k, v = m.project_heads(x)  # (B, h, T, d_h), (B, h_kv, T, d_h) twice
            qd, kd = m.query(x), m.key(x)
        group = h // h_kv
        assert check_head_scores(q @ k.repeat_interleave(group, 1).transpose(-2, -1)
                                 / math.sqrt(8 // h), qd, kd, h, h_kv).ok
        count = sum(p.numel() for p in m.parameters())
        assert check_parameter_count(count, 8, h, h_kv).ok
    full = MultiHeadAttention(8, 6, n_heads=2).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    with torch.no_grad():
        packed = x @ torch.cat([full.query.weight, full.key.weight, full.value.weight]).T
        assert check_split_heads(torch.stack(full.project_heads(x)), packed, 2).ok


PACKED = torch.arange(2 * 3 * 24, dtype=torch.float32).view(2, 3, 24)  # the lab's input


@pytest.mark.parametrize("answer, phrase", [
    (PACKED.view(2, 3, 4, 3, 2).permute(3, 0, 2, 1, 4), "heads interleaved"),
    (PACKED.view(2, 3, 3, 4, 2).permute(2, 0, 1, 3, 4), "must come before the tokens"),
    (PACKED.reshape(3, 2, 4, 3, 2), "direct .view(3, B, h, T, d_h)"),
    (PACKED.view(2, 3, 3, 2, 4).permute(2, 0, 4, 1, 3), "every h-th feature"),
    (PACKED.view(2, 3, 4, 6).transpose(1, 2), "split into h heads as one"),
    (PACKED.view(2, 3, 3, 4, 2).permute(2, 0, 3, 1, 4)[0], "queries only"),
    (tuple(PACKED.view(2, 3, 3, 4, 2).permute(2, 0, 3, 1, 4)), "three separate tensors"),
    (None, "still empty"),
    ([1, 2], "shape"),
    ("qkv", "should be a tensor"),
])
def test_split_heads_mistakes_are_named(answer, phrase):
    fb = check_split_heads(answer, PACKED, 4)
    assert not fb.ok and phrase in fb.message, fb.message


def test_split_heads_right_answer_on_the_labs_input():
    assert check_split_heads(split_qkv_heads(PACKED, 4), PACKED, n_heads=4).ok
    assert check_split_heads(split_by_chunks(PACKED, 4).double(), PACKED, 4).ok


@pytest.fixture
def qk():
    torch.manual_seed(3)
    return torch.randn(1, 6, 8), torch.randn(1, 6, 4)  # h = 4, h_kv = 2, d_h = 2


def _raw(q, k, h=4, h_kv=2):
    B, T, d = q.shape
    d_h = d // h
    qh = q.view(B, T, h, d_h).transpose(1, 2)
    kh = k.view(B, T, h_kv, d_h).transpose(1, 2)
    return qh, kh


@pytest.mark.parametrize("make, phrase", [
    (lambda qh, kh: qh @ kh.repeat(1, 2, 1, 1).transpose(-2, -1) / math.sqrt(2), "in turn"),
    (lambda qh, kh: qh @ kh.repeat_interleave(2, 1).transpose(-2, -1) / math.sqrt(8),
     "sqrt(d_model)"),
    (lambda qh, kh: qh @ kh.repeat_interleave(2, 1).transpose(-2, -1), "unscaled"),
    (lambda qh, kh: qh @ kh.repeat_interleave(2, 1).transpose(-2, -1) / 2, "divided by d_h"),
    (lambda qh, kh: (qh @ kh.repeat_interleave(2, 1).transpose(-2, -1)).transpose(-2, -1)
     / math.sqrt(2), "transposed"),
    (lambda qh, kh: qh @ kh.repeat_interleave(2, 1).transpose(-2, -1) / math.sqrt(4),
     "keys' width h_kv·d_h (the same number here)"),
])
def test_head_scores_mistakes_are_named(qk, make, phrase):
    q, k = qk
    fb = check_head_scores(make(*_raw(q, k)), q, k, 4, 2)
    assert not fb.ok and phrase in fb.message, fb.message


def test_head_scores_keys_width_is_named_apart_from_d_h():
    """h_kv != d_h: dividing by sqrt(h_kv·d_h) and by d_h give different scores."""
    torch.manual_seed(4)
    q, k = torch.randn(2, 5, 12), torch.randn(2, 5, 6)  # h = 4, h_kv = 2, d_h = 3
    qh, kh = _raw(q, k)
    raw = qh @ kh.repeat_interleave(2, 1).transpose(-2, -1)
    fb = check_head_scores(raw / math.sqrt(6), q, k, 4, 2)
    assert not fb.ok and "keys' width" in fb.message and "same number" not in fb.message
    fb = check_head_scores(raw / 3, q, k, 4, 2)
    assert not fb.ok and "divided by d_h, not sqrt(d_h)" in fb.message, fb.message


def test_head_scores_bad_input(qk):
    q, k = qk
    for answer, phrase in ((..., "still empty"), (torch.zeros(1, 2, 6, 6), "shape"),
                           (torch.zeros(1, 4, 6, 6).max(-1), "should be a tensor")):
        fb = check_head_scores(answer, q, k, 4, 2)
        assert not fb.ok and phrase in fb.message, fb.message


def test_parameter_count_mistakes_are_named():
    d, h, h_kv = 64, 8, 2
    kv = h_kv * (d // h)
    assert check_parameter_count(parameter_count(d, h, h_kv), d, h, h_kv).ok
    cases = {"count of multi-head attention": 4 * d * d,
             "key/value heads of width d": 2 * d * d + 2 * d * h_kv * d,
             "no output projection": d * d + 2 * d * kv,
             "W_q shrunk as well": d * d + 3 * d * kv,
             "only one of W_k and W_v": 3 * d * d + d * kv,
             "group size": 2 * d * d + 2 * d * (d // h) * (h // h_kv),
             "not d_h x d_h": (h + 2 * h_kv) * 8 * 8 + d * d}
    for phrase, answer in cases.items():
        fb = check_parameter_count(answer, d, h, h_kv)
        assert not fb.ok and phrase in fb.message, fb.message
    assert "differs" in check_parameter_count(parameter_count(d, h, h_kv) + 1, d, h, h_kv).message
    assert "still empty" in check_parameter_count(None, d, h, h_kv).message


def test_practice_checks_refuse_the_module():
    """Issue 31: in the notebook the check applies the grade's method limits."""
    ns = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.multihead import MultiHeadAttention\n"
         "from attnbook.exercises.multihead import check_parameter_count, check_split_heads\n"
         "def parameter_count(d_model, n_heads, n_kv_heads):\n"
         "    m = MultiHeadAttention(d_model, 4, n_heads, n_kv_heads=n_kv_heads)\n"
         "    return sum(p.numel() for p in m.parameters())\n"
         "helper = MultiHeadAttention(8, 4, 4)\n"
         "def split_qkv_heads(qkv, n_heads):\n"
         "    return torch.stack([helper.split_heads(p) for p in qkv.chunk(3, -1)])\n"
         "packed = torch.arange(2 * 3 * 24.0).view(2, 3, 24)\n"
         "first = check_parameter_count(parameter_count(64, 8, 2), 64, 8, 2)\n"
         "second = check_split_heads(split_qkv_heads(packed, 4), packed, 4)\n", ns)
    assert ns["first"].message.startswith("Right values, but parameter_count uses "
                                          "MultiHeadAttention"), ns["first"].message
    assert ns["second"].message.startswith("Right values, but split_qkv_heads uses "
                                           "split_heads"), ns["second"].message


def test_answers_fixed_to_the_labs_input_fail_the_second_input():
    ns = {"__name__": "__main__"}
    exec("import math, torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.multihead import check_head_scores, check_parameter_count\n"
         "def parameter_count(d_model, n_heads, n_kv_heads):\n"
         "    return 10240\n"
         "def gqa_scores(q, k, n_heads, n_kv_heads):\n"
         "    qh = q.view(1, 6, 4, 2).transpose(1, 2)\n"
         "    kh = k.view(1, 6, 2, 2).transpose(1, 2).repeat_interleave(2, 1)\n"
         "    return qh @ kh.transpose(-2, -1) / math.sqrt(2)\n"
         "q, k = torch.randn(1, 6, 8), torch.randn(1, 6, 4)\n"
         "first = check_parameter_count(parameter_count(64, 8, 2), 64, 8, 2)\n"
         "second = check_head_scores(gqa_scores(q, k, 4, 2), q, k, 4, 2)\n", ns)
    for verdict in (ns["first"], ns["second"]):
        assert verdict.message.startswith("Right values on the lab's input, but not on a "
                                          "second input"), verdict.message
