"""The methods the attention benchmark compares, each built as a function x -> y.

Every method uses the same seeded projection weights, so all seven compute the same function
(``nn.MultiheadAttention``'s output projection, which it always applies, is set to the identity;
``tests/test_benchmark_quick.py`` checks that the outputs agree):

* ``explicit`` (attnbook.Attention, step by step), ``fused``
  (AttentionLayer(fused=True)), ``online``
  (attnbook.online.tiled_attention with its recomputing backward), ``online_autograd`` (plain
  autograd through the tiles, memory only);
* ``mha`` (nn.MultiheadAttention, one head, bool causal mask) and ``mha_causal`` (the same with
  the ``is_causal=True`` hint); ``sdpa`` (F.scaled_dot_product_attention on (B, 1, T, d) with
  is_causal=True: the best raw call) and ``sdpa_3d`` (the same on 3-D input: the math kernel);
* padded rows: ``fused_left``, ``fused_right``, ``fused_mixed``, ``online_*`` likewise, and
  ``fused_general`` (mixed padding through the general (B, 1, T, T) route);
* ``<method>_1t``: the method on one thread.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnbook import AttentionLayer
from attnbook.fused import general_masked_attention
from attnbook.online import tiled_attention

METHODS = ["explicit", "fused", "online", "mha", "mha_causal", "sdpa", "sdpa_3d"]
PADDED = ["fused_left", "fused_right", "fused_mixed", "fused_general",
          "online_left", "online_right", "online_mixed"]
# Forward only, one thread each: the online method runs ~10 operations per tile, each a parallel
# region; on a busy machine every region can wait a time slice for its second thread.
SINGLE_THREAD = ["online_1t", "sdpa_1t", "fused_1t", "fused_mixed_1t"]
MODES = ["fwd", "fwd+bwd"]


def padding(kind: str, B: int, T: int) -> torch.Tensor:
    """A (B, T) padding mask (True = real) of one of three kinds.

    * ``left``: the first quarter of sequence 0 is padding (the issue's case);
    * ``right``: the last quarter of sequence 0 is padding;
    * ``mixed``: sequence 0 left-padded by a quarter, sequence 1 right-padded by a quarter,
      sequence 2 (if any) has a hole of T/8 tokens in the middle.
    """
    pad = torch.ones(B, T, dtype=torch.bool)
    if kind in ("left", "mixed"):
        pad[0, : T // 4] = False
    if kind == "right":
        pad[0, T - T // 4 :] = False
    if kind == "mixed" and B > 1:
        pad[1, T - T // 4 :] = False
    if kind == "mixed" and B > 2:
        pad[2, T // 2 : T // 2 + max(1, T // 8)] = False
    return pad


def build(method: str, d: int, T: int, B: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The method as a function x -> y, all with the same seeded projection weights."""
    if method.endswith("_1t"):
        inner = build(method[:-3], d, T, B)

        def one_thread(x):
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                return inner(x)
            finally:
                torch.set_num_threads(threads)
        one_thread.module = parameters_module(inner)
        return one_thread
    torch.manual_seed(0)
    ref = AttentionLayer(d, T)  # the fused path and project_heads are its options
    base, _, kind = method.partition("_")
    if method == "explicit":
        return ref
    if method == "fused":
        ref.fused = True
        return ref
    if base == "fused" and kind in ("left", "right", "mixed"):
        ref.fused = True
        pad = padding(kind, B, T)

        def fused_padded(x):
            return ref(x, pad)
        fused_padded.module = ref
        return fused_padded
    if method == "fused_general":
        pad = padding("mixed", B, T)

        def general(x):
            q, k, v = ref.project_heads(x)  # (B, 1, T, d) each
            return general_masked_attention(q, k, v, pad)[:, 0]
        general.module = ref
        return general
    if method in ("online", "online_autograd") or base == "online":
        recompute = method != "online_autograd"
        pad = padding(kind, B, T) if kind in ("left", "right", "mixed") else None

        def online(x):
            return tiled_attention(ref.query(x), ref.key(x), ref.value(x), pad,
                                   recompute=recompute)
        online.module = ref
        return online
    if method in ("sdpa", "sdpa_3d"):
        four_d = method == "sdpa"

        def sdpa(x):
            q, k, v = ref.query(x), ref.key(x), ref.value(x)
            if four_d:  # (B, 1, T, d): the CPU flash kernel
                return F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None],
                                                      is_causal=True)[:, 0]
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # math kernel
        sdpa.module = ref
        return sdpa
    if method in ("mha", "mha_causal"):
        mha = nn.MultiheadAttention(d, num_heads=1, bias=False, batch_first=True)
        with torch.no_grad():  # the same W_q, W_k, W_v, stacked; the output projection it
            mha.in_proj_weight.copy_(torch.cat([ref.query.weight, ref.key.weight,  # always
                                                ref.value.weight]))  # applies is the identity
            mha.out_proj.weight.copy_(torch.eye(d))  # so it computes the same function
        blocked = ref.mask[:T, :T]  # MHA's bool attn_mask: True = blocked, like ours
        hint = method == "mha_causal"

        def run_mha(x):
            return mha(x, x, x, attn_mask=blocked, need_weights=False, is_causal=hint)[0]
        run_mha.module = mha
        return run_mha
    raise ValueError(f"unknown method {method!r}")


def parameters_module(f) -> nn.Module:
    """The module holding a method's parameters."""
    return f if isinstance(f, nn.Module) else f.module


def step(f, x: torch.Tensor, mode: str, grad: torch.Tensor | None = None):
    """One forward (no autograd) or one forward+backward."""
    if mode == "fwd":
        with torch.no_grad():
            return f(x)
    for p in [x, *parameters_module(f).parameters()]:
        p.grad = None
    y = f(x)
    y.backward(grad)
    return None


def inputs(B: int, T: int, d: int, mode: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    x = torch.randn(B, T, d, requires_grad=(mode != "fwd"))
    return x, (torch.randn(B, T, d) if mode != "fwd" else None)
