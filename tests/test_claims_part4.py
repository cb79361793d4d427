"""Claims of Part IV (chapters 13 and 14) about cost and PyTorch's behaviour, pinned.

Each test names the sentence of the book it backs. If a new PyTorch changes the behaviour, the
test fails and the page must change with it.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attnbook import Attention
from attnbook.lab.tasks import IGNORE, get_task
from attnbook.lab.train import train
from attnbook.model import TinyConfig, TinyModel
from attnbook.multihead import MultiHeadAttention


def matmul_flops(module: nn.Module, T: int) -> dict[str, int]:
    """FLOPs per aten op that FlopCounterMode records for one forward pass on one sequence."""
    x = torch.randn(1, T, module.d_model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(x, return_weights=True)
    return {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}


def n_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# Chapter 13, "Parameters and cost" and its table.

def test_flop_counter_counts_two_flops_per_multiply_add_and_ignores_softmax():
    """'FLOPs, two per multiply-add, ... leaves out the softmax and the masking.'"""
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    with FlopCounterMode(display=False) as counter:
        a @ b
        torch.softmax(a, dim=-1).masked_fill(a > 0, float("-inf"))
    assert counter.get_total_flops() == 2 * 5 * 7 * 3


@pytest.mark.parametrize("T, d, h", [(16, 8, 2), (32, 24, 3), (20, 64, 8)])
def test_cost_table_formulas(T, d, h):
    """Table tab-mha-cost: every entry, for the three modules, counted on the modules."""
    single, one, many = Attention(d, T), MultiHeadAttention(d, T, 1), MultiHeadAttention(d, T, h)
    assert n_parameters(single) == 3 * d * d
    assert n_parameters(one) == n_parameters(many) == 4 * d * d
    assert matmul_flops(single, T) == {"aten.mm": 6 * T * d * d, "aten.bmm": 4 * T * T * d}
    for m in (one, many):
        assert matmul_flops(m, T) == {"aten.mm": 8 * T * d * d, "aten.bmm": 4 * T * T * d}
    x = torch.randn(1, T, d)
    assert single(x, return_weights=True)[1].numel() == T * T
    assert one(x, return_weights=True)[1].numel() == T * T
    assert many(x, return_weights=True)[1].numel() == h * T * T


def test_fused_path_never_forms_the_weights():
    """'The fused path of Part III never forms these matrices.'"""
    m = MultiHeadAttention(8, 6, n_heads=2)
    q = k = v = torch.randn(1, 2, 6, 4)
    out, weights = m.attend(q, k, v, fused=True)
    assert weights is None and out.shape == (1, 2, 6, 4)


def test_exercise_shapes_and_parameters():
    """Exercise ex-mha-shapes: d = 512, h = 8, B = 4, T = 100."""
    m = MultiHeadAttention(512, 100, n_heads=8)
    x = torch.randn(4, 100, 512)
    assert m.d_head == 64
    assert m.split_heads(m.query(x)).shape == (4, 8, 100, 64)
    y, w = m(x, return_weights=True)
    assert w.shape == (4, 8, 100, 100) and y.shape == (4, 100, 512)
    assert n_parameters(m) == 1_048_576


# Chapter 13, "The code" and "Checking against PyTorch".

def test_split_is_a_view_and_merge_copies_only_on_the_explicit_path():
    """'Splitting is a change of view ... on the explicit path reshape copies ... on the fused
    path SDPA's CPU kernel lays its output out like its query ... the same query made
    contiguous gives a (B, h, T, d_h) output.'"""
    m = MultiHeadAttention(8, 6, n_heads=2)
    x = torch.randn(2, 6, 8)
    q = m.query(x)
    heads = m.split_heads(q)
    assert heads.data_ptr() == q.data_ptr() and heads._base is q
    assert not heads.is_contiguous()
    with torch.no_grad():
        explicit, _ = m.attend(*m.project_heads(x), fused=False)  # (B, h, T, d_h)
        fused, _ = m.attend(*m.project_heads(x), fused=True)
    # explicit: weights @ v is a new contiguous (B, h, T, d_h); moved back it is not, so copied
    assert explicit.is_contiguous() and not explicit.transpose(1, 2).is_contiguous()
    merged = m.merge_heads(explicit)
    assert merged.data_ptr() != explicit.data_ptr() and merged._base is None
    assert torch.equal(m.split_heads(merged), explicit)
    # fused (CPU flash kernel): the query is a (B, T, h, d_h)-ordered view and the output is
    # stored the same way, so the transpose back is contiguous
    assert not fused.is_contiguous() and fused.transpose(1, 2).is_contiguous()
    merged = m.merge_heads(fused)
    assert merged.data_ptr() == fused.data_ptr() and merged._base is not None
    torch.testing.assert_close(merged, m.merge_heads(explicit))
    # the output follows the query's layout, not a fixed token-major order: a contiguous
    # (B, h, T, d_h) query gives a contiguous (B, h, T, d_h) output, which the merge copies
    q, k, v = m.project_heads(x)
    with torch.no_grad():
        fused_c, _ = m.attend(q.contiguous(), k, v, fused=True)
    assert fused_c.is_contiguous() and not fused_c.transpose(1, 2).is_contiguous()
    assert m.merge_heads(fused_c)._base is None
    torch.testing.assert_close(fused_c, fused)


def test_nn_multihead_attention_conventions():
    """in_proj_weight is [W_q; W_k; W_v], (3d, d); bool attn_mask True = blocked;
    key_padding_mask True = ignore."""
    torch.manual_seed(0)
    d, h, T = 6, 2, 5
    ref = nn.MultiheadAttention(d, h, bias=False, batch_first=True).double()
    assert ref.in_proj_weight.shape == (3 * d, d)
    Wq, Wk, Wv = ref.in_proj_weight.detach().chunk(3)
    x = torch.randn(1, T, d, dtype=torch.float64)

    def by_hand(blocked):  # blocked: (T, T), True = may not attend
        q, k, v = (x @ W.T for W in (Wq, Wk, Wv))  # (1, T, d)
        split = [t.view(1, T, h, d // h).transpose(1, 2) for t in (q, k, v)]
        s = split[0] @ split[1].transpose(-2, -1) / math.sqrt(d // h)
        a = torch.softmax(s.masked_fill(blocked, float("-inf")), dim=-1)
        heads = (a @ split[2]).transpose(1, 2).reshape(1, T, d)
        return heads @ ref.out_proj.weight.detach().T

    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    out, _ = ref(x, x, x, attn_mask=causal, need_weights=False)
    torch.testing.assert_close(out, by_hand(causal))

    ignore_last_two = torch.tensor([[False, False, False, True, True]])
    out, _ = ref(x, x, x, key_padding_mask=ignore_last_two, need_weights=False)
    torch.testing.assert_close(out, by_hand(ignore_last_two.expand(T, T)))


def test_sdpa_on_4d_input_scales_by_last_dim_and_bool_mask_means_allowed():
    """'SDPA treats every leading dimension as a batch ... scaled by sqrt(d_h) ...
    Its boolean attn_mask is True where attention is allowed.'"""
    torch.manual_seed(0)
    B, h, T, d_h = 2, 3, 5, 4
    q, k, v = (torch.randn(B, h, T, d_h, dtype=torch.float64) for _ in range(3))
    allowed = torch.rand(B, 1, T, T) > 0.3
    allowed[..., 0] = True  # every query sees at least one key
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    s = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    expected = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1) @ v
    torch.testing.assert_close(out, expected)


# Chapter 14.

def test_a_stack_without_positions_or_masks_is_permutation_equivariant():
    """Theorem thm-tiny-equivariant: attention, residual, LayerNorm, MLP, and any stack of them."""
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(7, 9, d_model=16, n_heads=4, n_layers=2, mlp=True,
                                 positions=False)).double()
    for block in model.blocks:
        block.attn.mask.fill_(False)  # the explicit path reads this buffer ...
        block.attn.fused = False  # ... the fused one applies is_causal=True instead
    idx = torch.randint(7, (3, 9))
    perm = torch.randperm(9)
    torch.testing.assert_close(model(idx[:, perm]), model(idx)[:, perm])


def test_one_causal_layer_sees_a_multiset_and_a_causal_stack_can_see_order():
    """Theorem thm-tiny-causal-set, and 'The theorem is about one layer, not a stack': without
    positions, reordering the tokens before the last one leaves one causal layer's last output
    unchanged, and changes a two-layer stack's."""
    torch.manual_seed(0)
    idx = torch.tensor([[0, 1, 2, 3, 4]])
    swapped = torch.tensor([[1, 0, 3, 2, 4]])
    for n_layers, same in ((1, True), (2, False)):
        model = TinyModel(TinyConfig(5, 5, d_model=16, n_heads=2, n_layers=n_layers,
                                     mlp=False, positions=False)).double()
        with torch.no_grad():
            last, last_swapped = model(idx)[0, -1], model(swapped)[0, -1]
        change = (last - last_swapped).abs().max().item()
        assert (change < 1e-12) if same else (change > 1e-3), (n_layers, change)


def test_layernorm_gives_mean_zero_variance_one_before_scale_and_shift():
    """'LayerNorm rescales each token vector to mean 0 and variance 1 (then a learned scale and
    shift).'"""
    norm = nn.LayerNorm(16).double()
    assert torch.equal(norm.weight, torch.ones(16)) and torch.equal(norm.bias, torch.zeros(16))
    y = norm(3 + 5 * torch.randn(4, 10, 16, dtype=torch.float64))
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 10, dtype=torch.float64))
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4, 10, dtype=torch.float64),
                               atol=1e-4, rtol=0)  # LayerNorm's eps = 1e-5


def test_mlp_is_d_to_4d_to_d_with_gelu():
    """'the MLP (d -> 4d -> d with a GELU)'."""
    model = TinyModel(TinyConfig(5, 4, d_model=8, n_heads=2, n_layers=1, mlp=True))
    first, act, second = model.blocks[0].mlp
    assert (first.in_features, first.out_features) == (8, 32) and isinstance(act, nn.GELU)
    assert (second.in_features, second.out_features) == (32, 8)


def test_ignore_is_cross_entropys_default_ignore_index():
    """'Where no answer can be known yet, y_t is IGNORE (-100) and is not scored.'"""
    logits = torch.randn(6, 5)
    y = torch.tensor([1, IGNORE, 3, IGNORE, 0, 2])
    kept = y != IGNORE
    torch.testing.assert_close(F.cross_entropy(logits, y), F.cross_entropy(logits[kept], y[kept]))


def test_training_loop_warms_up_for_5_percent_then_cosine_to_zero_and_clips_at_1(monkeypatch):
    """'clips the gradient norm at 1 ... the learning rate warms up for 5% of the steps and then
    follows a cosine to zero.'"""
    lrs, norms = [], []
    step = torch.optim.AdamW.step
    clip = torch.nn.utils.clip_grad_norm_

    def recording_step(self, *args, **kwargs):
        lrs.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    def recording_clip(parameters, max_norm, *args, **kwargs):
        norms.append(max_norm)
        return clip(parameters, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording_clip)
    task = get_task("copy", length=6, n_symbols=4)
    model = TinyModel(TinyConfig(task.vocab_size, task.seq_len, d_model=8, n_heads=2,
                                 n_layers=1, mlp=False))
    steps, lr = 40, 1e-2
    train(model, task, steps=steps, batch_size=4, lr=lr, progress=False, eval_sequences=8)
    warmup = steps * 5 // 100
    assert lrs[:warmup] == pytest.approx([lr * (i + 1) / warmup for i in range(warmup)])
    assert lrs[warmup] == pytest.approx(lr)
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))
    assert lrs[-1] < lr * 0.01
    assert norms == [1.0] * steps


def test_exercise_parameter_count_of_the_labs_model():
    """Exercise ex-tiny-params: V = 8, T = 10, d = 32, h = 2, two blocks without MLP: 9224."""
    task = get_task("induction", length=10, n_symbols=8)
    model = TinyModel(TinyConfig(task.vocab_size, task.seq_len, d_model=32, n_heads=2,
                                 n_layers=2, mlp=False))
    assert model.num_parameters() == 256 + 320 + 2 * (64 + 4096) + 64 + 264 == 9224
