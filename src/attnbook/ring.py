"""Ring attention: one sequence split across processes, keys and values passed around a ring.

Each of the P ranks of a process group holds a shard of the queries, keys and values. In P
steps the key/value shards travel once around the ring (rank r sends to r + 1 and receives
from r - 1); at every step a rank attends from its queries to the shard it holds (with
PyTorch's fused CPU kernel, which returns the log-sum-exp the merge needs, or with chapter 10's
tiled attention) and folds the result into its running state with the online-softmax merge
(Liu et al., 2023). Besides its own keys and values, which the caller keeps, a rank holds the
shard it computes on and the one arriving: three shards at steps 1 to P - 2. The backward runs
the same ring again, recomputing from the saved log-sum-exp; the gradients for keys and values
travel with their shard and arrive home after the last step. Every transfer is posted before a
step's compute and waited on after it, the gradients' included.

``simulate_ring`` and ``simulate_ring_grads`` play all ranks in one process with the same
per-step functions; their ``record`` list receives what each rank did at each step (see
:mod:`attnbook.lab.ring_trace`).

A sequence is cut into 2P chunks of equal length (padded at the end with masked keys when T is
not a multiple of 2P); every rank holds two chunks. ``"contiguous"`` gives rank r chunks 2r and
2r + 1; ``"zigzag"`` gives it chunks r and 2P - 1 - r, one from each end, which balances the
causal work (the layout of Llama 3's context parallelism, Dubey et al., 2024; striped attention,
Brandon et al., 2023, balances it by dealing tokens round-robin instead).

RoPE (chapter 20) is applied before the ring: each rank rotates its own queries and keys by
the *global* positions of its two chunks (:func:`shard_positions`, :func:`rotate_shard`), so
the keys travel already rotated and the scores depend on global distances, zigzag included.

Masks follow attnbook's conventions: causal (key ``j > i`` blocked) and ``padding_mask`` True
for real tokens (it masks keys). A query that sees no real key outputs zeros, with zero
gradients.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .checks import check_finite, check_padding_mask, check_whole_number
from .online import NEG_INF, _finite, tiled_attention_backward, tiled_attention_forward
from .positions import apply_rope

LAYOUTS = ("contiguous", "zigzag")
KERNELS = ("auto", "fused", "tiled")


def chunk_ids(rank: int, world: int, layout: str = "zigzag") -> tuple[int, int]:
    """The two chunks (of 2 * world) that ``rank`` holds in ``layout``."""
    if layout == "contiguous":
        return 2 * rank, 2 * rank + 1
    if layout == "zigzag":
        return rank, 2 * world - 1 - rank
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def shard(x: torch.Tensor, rank: int, world: int, layout: str = "zigzag",
          dim: int = -2) -> torch.Tensor:
    """This rank's part of a sequence: pad it to a multiple of 2P, keep the rank's two chunks.

    The padding is zeros (False for a boolean mask), so padded keys are masked out once the
    padding mask is sharded the same way (see :func:`shard_inputs`).

    Shape:
        x: (..., T, ...) with T along ``dim`` -> (..., 2c, ...) with c = ceil(T / 2P)
    """
    T = x.size(dim)
    c = math.ceil(T / (2 * world))
    if 2 * world * c > T:
        pad_shape = list(x.shape)
        pad_shape[dim] = 2 * world * c - T
        x = torch.cat([x, x.new_zeros(pad_shape)], dim)
    chunks = x.split(c, dim)
    a, b = chunk_ids(rank, world, layout)
    return torch.cat([chunks[a], chunks[b]], dim)


def unshard(shards: list[torch.Tensor], T: int, layout: str = "zigzag",
            dim: int = -2) -> torch.Tensor:
    """The whole sequence from every rank's shard (rank order), without the end padding.

    Shape:
        P tensors (..., 2c, ...) -> (..., T, ...)
    """
    world = len(shards)
    chunks: list[torch.Tensor | None] = [None] * (2 * world)
    for rank, part in enumerate(shards):
        a, b = chunk_ids(rank, world, layout)
        chunks[a], chunks[b] = part.chunk(2, dim)
    return torch.cat(chunks, dim).narrow(dim, 0, T)


def shard_positions(T: int, rank: int, world: int, layout: str = "zigzag",
                    device=None) -> torch.Tensor:
    """The global positions of the tokens in ``rank``'s shard (its two chunks, in order).

    The end padding (when 2P does not divide T) continues the count; those keys are masked.

    Shape:
        () -> (2c,) long, c = ceil(T / 2P)
    """
    c = math.ceil(T / (2 * world))
    chunks = torch.arange(2 * world * c, device=device).split(c)
    a, b = chunk_ids(rank, world, layout)
    return torch.cat([chunks[a], chunks[b]])


def rotate_shard(q: torch.Tensor, k: torch.Tensor, T: int, rank: int, world: int,
                 layout: str = "zigzag", base: float = 10000.0, rope_layout: str = "half"):
    """RoPE on one rank's shard, by the global positions of its chunks (before the ring).

    Args:
        q, k: this rank's queries and keys (from :func:`shard_inputs`).
        T: length of the whole sequence; rank, world, layout: how it was sharded.
        base, rope_layout: RoPE's base and feature layout (:func:`attnbook.positions.apply_rope`).

    Returns:
        The rotated q and k.

    Shape:
        q, k: (B, 2c, d) or (B, h, 2c, d_h) -> same
    """
    pos = shard_positions(T, rank, world, layout, device=q.device)  # (2c,)
    return (apply_rope(q, pos, base, rope_layout, seq_dim=-2),
            apply_rope(k, pos, base, rope_layout, seq_dim=-2))


def shard_inputs(q, k, v, padding_mask, rank: int, world: int, layout: str = "zigzag"):
    """Shard q, k, v and the padding mask; when T needs end padding, a mask is made to hide it.

    Shape:
        q, k, v: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T) or None
        -> the same with 2c in place of T; the mask (B, 2c) or None
    """
    T = q.size(-2)
    if padding_mask is None and T % (2 * world):
        padding_mask = torch.ones(q.size(0), T, dtype=torch.bool, device=q.device)
    parts = [shard(t, rank, world, layout, dim=-2) for t in (q, k, v)]
    mask = None if padding_mask is None else shard(padding_mask, rank, world, layout, dim=-1)
    return (*parts, mask)


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    *,
    causal: bool = True,
    layout: str = "zigzag",
    group: dist.ProcessGroup | None = None,
    block_size: int = 256,
    kernel: str = "auto",
) -> torch.Tensor:
    """Attention over a sequence sharded across the ranks of ``group``, by ring.

    Every rank of the group calls it with its own shard (from :func:`shard_inputs`).

    Args:
        q, k, v: this rank's queries, keys and values, already projected.
        padding_mask: this rank's part of the mask, True for real tokens; None if all are real.
        causal: block keys in the future of each query (``j > i``, in global positions).
        layout: ``"contiguous"`` or ``"zigzag"``; how the shards were cut (:func:`chunk_ids`).
        group: the process group (default: the world group).
        block_size: tile size of the per-step tiled attention (``kernel="tiled"``).
        kernel: the per-step attention: ``"fused"`` (PyTorch's CPU flash kernel, which returns
            the log-sum-exp), ``"tiled"`` (chapter 10's Python loop) or ``"auto"`` (fused where
            it is available, see :func:`pick_kernel`).

    Returns:
        This rank's outputs, equal to its shard of :meth:`attnbook.Attention.attend` on the
        whole sequence up to rounding. A query with no visible key outputs zeros.

    Raises:
        ValueError: for an unknown layout or kernel, or ``"fused"`` off the CPU.

    Shape:
        q, k, v: (B, 2c, d) or (B, h, 2c, d_h); padding_mask: (B, 2c) -> same as q
    """
    # Before any communication; no pass over the values (finite=False): this is the fast path.
    kernel = check_ring_inputs(q, k, v, None, padding_mask, None, layout, causal, block_size,
                               kernel, caller="ring_attention", finite=False)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if needs_grad:
        return RingAttention.apply(q, k, v, padding_mask, causal, layout, group, block_size,
                                   kernel)
    return ring_attention_forward(q, k, v, padding_mask, causal, layout, group, block_size,
                                  kernel)[0]


def ring_attention_forward(q, k, v, padding_mask, causal, layout, group, block_size,
                           kernel="tiled"):
    """P steps: attend to the key/value shard in hand while the next one is on its way.

    Returns:
        ``out`` and the log-sum-exp ``lse`` of each of this rank's queries.

    Shape:
        q, k, v: (..., 2c, d); padding_mask: (B, 2c) -> (..., 2c, d_v), (..., 2c, 1)
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    state = new_state(q, v)  # running m, l: (B, 2c, 1); acc: (B, 2c, d_v)
    held = [k, v] if padding_mask is None else [k, v, padding_mask]  # what travels
    for step in range(world):
        src = (rank - step) % world  # whose keys and values this rank holds now
        if step < world - 1:  # post the exchange first: it runs while we compute
            arriving, pending = pass_on(held, group)
        fold_shard(state, q, *held[:2], held[2] if len(held) == 3 else None,
                   chunk_ids(rank, world, layout), chunk_ids(src, world, layout), causal,
                   block_size, kernel)
        if step < world - 1:
            wait_all(pending)
            held, arriving, pending = arriving, None, None  # the shard in hand is freed
    return finish_state(state, q.dtype)


def ring_attention_backward(dout, q, k, v, out, lse, padding_mask, causal, layout, group,
                            block_size, kernel="tiled"):
    """The ring again: dk and dv travel with their shard and take one last step home.

    A step adds its share into fresh buffers first, and only then waits for the travelling
    sums of the same shard (sent by the previous rank one step earlier) and adds them in: the
    gradient transfer runs during the compute, like the keys and values.

    Shape:
        dout, out: (..., 2c, d_v); q, k, v: (..., 2c, d); lse: (..., 2c, 1)
        -> dq, dk, dv with the shapes of q, k, v
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    dq = torch.zeros_like(q, dtype=lse.dtype)
    held = [k, v] if padding_mask is None else [k, v, padding_mask]
    grads_in = grads_out = None  # the travelling dk, dv: arriving / being sent, with their work
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:  # the next keys and values do not depend on this step
            arriving, pending = pass_on(held, group)
        dk_s = torch.zeros_like(held[0], dtype=lse.dtype)  # this step's share for shard src
        dv_s = torch.zeros_like(held[1], dtype=lse.dtype)
        shard_grads(dq, dk_s, dv_s, dout, q, *held[:2], out, lse,
                    held[2] if len(held) == 3 else None, chunk_ids(rank, world, layout),
                    chunk_ids(src, world, layout), causal, block_size, kernel)
        if grads_in is not None:  # shard src's sums from ranks src .. rank - 1, sent last step
            wait_all(grads_in[1])  # also completes our own send of the step before
            dk_s += grads_in[0][0]
            dv_s += grads_in[0][1]
        if world > 1:  # post dk, dv to rank + 1 (after the last step: home to their owner)
            grads_in = pass_on([dk_s, dv_s], group)
            grads_out = dk_s, dv_s  # kept alive until the send completes
        else:
            grads_in = ([dk_s, dv_s], [])
        if step < world - 1:
            wait_all(pending)
            held, arriving, pending = arriving, None, None
    wait_all(grads_in[1])  # after P steps and P passes, dk and dv are back with their owner
    del grads_out
    dk, dv = grads_in[0]
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class RingAttention(torch.autograd.Function):
    """Ring attention whose backward runs the ring again, recomputing from the saved lse."""

    @staticmethod
    def forward(ctx, q, k, v, padding_mask, causal, layout, group, block_size, kernel):
        out, lse = ring_attention_forward(q, k, v, padding_mask, causal, layout, group,
                                          block_size, kernel)
        ctx.save_for_backward(q, k, v, out, lse, padding_mask)  # this rank's shards only
        ctx.args = causal, layout, group, block_size, kernel
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse, padding_mask = ctx.saved_tensors
        dq, dk, dv = ring_attention_backward(dout.contiguous(), q, k, v, out, lse,
                                             padding_mask, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None


def pass_on(tensors: list[torch.Tensor], group) -> tuple[list[torch.Tensor], list]:
    """Send ``tensors`` to the next rank and receive the previous rank's; returns (buffers, work).

    Both directions are posted at once with ``batch_isend_irecv``, so no pair of ranks waits
    for the other to start; the caller waits on the work before it reads the buffers.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    arriving = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, group=group, group_peer=(rank + 1) % world)
           for t in tensors]
    ops += [dist.P2POp(dist.irecv, t, group=group, group_peer=(rank - 1) % world)
            for t in arriving]
    return arriving, dist.batch_isend_irecv(ops)


def wait_all(work: list) -> None:
    """Wait for every posted send and receive of one :func:`pass_on`."""
    for w in work:
        w.wait()


def fused_available() -> bool:
    """Whether this PyTorch has the CPU flash kernel that returns the log-sum-exp."""
    return hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")


def pick_kernel(kernel: str, q: torch.Tensor) -> str:
    """``"fused"`` or ``"tiled"``: ``"auto"`` takes the fused kernel for float32 and float64 CPU
    tensors if present, the tiled loop otherwise.

    Raises:
        ValueError: for an unknown name, or ``"fused"`` for tensors not on the CPU or in half
            precision (the CPU flash kernel's backward takes float32 and float64 only).
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    fits = q.device.type == "cpu" and fused_available()
    half = q.dtype in (torch.float16, torch.bfloat16)
    if kernel == "auto":
        return "fused" if fits and not half else "tiled"
    if kernel == "fused" and not fits:
        raise ValueError(f"kernel='fused' needs CPU tensors and PyTorch's CPU flash kernel; got "
                         f"a tensor on {q.device}: use kernel='tiled' or 'auto'")
    if kernel == "fused" and half:
        raise ValueError(f"kernel='fused' runs PyTorch's CPU flash kernel, whose backward takes "
                         f"float32 or float64, not {q.dtype}: use kernel='tiled' or 'auto' "
                         "(which accumulate half inputs in float32) or convert the inputs")
    return kernel


def check_ring_inputs(q, k, v, dout, padding_mask, world, layout, causal, block_size,
                      kernel, *, caller: str = "ring attention", finite: bool = True) -> str:
    """The per-step kernel to use (:func:`pick_kernel`), after checking that the ring can run:
    TypeError or ValueError otherwise, naming what was expected.

    The ring cuts queries, keys and values of one sequence alike, so q, k, v share (B, T) or
    (B, h, T) (no grouped-query heads), k has q's width d, and dout (None in a forward) is the
    output's shape; of one floating dtype, on one device; T and d at least 1; with ``finite``
    also free of NaN and infinities (a pass over the inputs, skipped by the distributed ring).
    ``world`` None skips its check (the process group's size).
    """
    tensors = {"q": q, "k": k, "v": v} | ({} if dout is None else {"dout": dout})
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{caller}: {name} must be a torch.Tensor of shape (B, T, d) or "
                            f"(B, h, T, d_h), got {type(t).__name__}")
    shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in tensors.items())
    if q.dim() not in (3, 4) or any(t.dim() != q.dim() for t in tensors.values()):
        raise ValueError(f"{caller}: q, k, v and dout must all be (B, T, d) or all "
                         f"(B, h, T, d_h); got {shapes}")
    if k.shape != q.shape or v.shape[:-1] != q.shape[:-1] or \
            (dout is not None and dout.shape != (*q.shape[:-1], v.size(-1))):
        raise ValueError(f"{caller}: k must have q's shape {tuple(q.shape)}, v the same up to "
                         "its width d_v, and dout the output's shape (q's, with v's width): "
                         "the ring shards one sequence of queries, keys and values alike (as "
                         f"many key/value heads as query heads); got {shapes}")
    if q.size(-2) < 1 or q.size(-1) < 1 or v.size(-1) < 1:
        raise ValueError(f"{caller} needs at least one token (T >= 1) and widths d, d_v >= 1; "
                         f"got {shapes}")
    if not q.is_floating_point() or len({t.dtype for t in tensors.values()}) > 1:
        raise TypeError(f"{caller}: q, k, v and dout must share one floating dtype, got "
                        + ", ".join(str(t.dtype) for t in tensors.values()))
    if len({t.device for t in tensors.values()}) > 1:
        raise ValueError(f"{caller}: q, k, v and dout must be on one device, got "
                         + ", ".join(str(t.device) for t in tensors.values()))
    if padding_mask is not None:
        check_padding_mask(padding_mask, q.size(0), q.size(-2))
        if padding_mask.device != q.device:
            raise ValueError(f"padding_mask must be on q's device {q.device}, got "
                             f"{padding_mask.device}")
    if world is not None:
        check_whole_number("world", world, 1)
    check_whole_number("block_size", block_size, 1)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    chunk_ids(0, 1, layout)  # ValueError for an unknown layout
    if finite:
        check_finite(caller, **tensors)
    return pick_kernel(kernel, q)  # ValueError for an unknown kernel, or "fused" that cannot run


def _fused_bias(padding_mask, q) -> torch.Tensor | None:
    """A key mask as the additive bias the CPU flash kernel takes: 0 or -inf, (B, 1, 1, c)."""
    if padding_mask is None:
        return None
    bias = torch.zeros(padding_mask.shape, dtype=q.dtype, device=q.device)
    return bias.masked_fill(~padding_mask, NEG_INF)[:, None, None, :]


def _no_visible_key(padding_mask, diagonal: bool, c: int) -> torch.Tensor | None:
    """True for the query rows of one chunk pair that see no real key there; (B, c, 1) or None."""
    if padding_mask is None:
        return None
    seen = padding_mask.cumsum(-1) if diagonal else padding_mask.sum(-1, keepdim=True)
    return (seen == 0).expand(-1, c)[..., None]


def attend_pair(q, k, v, padding_mask, diagonal: bool, block_size: int, kernel: str):
    """One (query chunk, key chunk) pair: the normalised output and log-sum-exp of each query.

    ``"fused"`` calls PyTorch's CPU flash kernel (the op behind ``scaled_dot_product_attention``
    on the CPU), which also returns the log-sum-exp; it reports 0 for a row with no visible key,
    so that row's is set to ``-inf`` here, which the merge adds as nothing. ``"tiled"`` is
    chapter 10's ``tiled_attention_forward``. ``diagonal``: a chunk with itself, causal mask.

    Shape:
        q: (..., c, d), k, v: (..., c, d), (..., c, d_v); padding_mask: (B, c) or None
        -> (..., c, d_v), (..., c, 1)
    """
    if kernel == "tiled":
        return tiled_attention_forward(q, k, v, padding_mask, diagonal, block_size)
    one_head = q.dim() == 3  # the kernel takes (B, h, c, d): one head becomes h = 1
    q4, k4, v4 = (t.unsqueeze(1) if one_head else t for t in (q, k, v))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q4, k4, v4, 0.0, diagonal, attn_mask=_fused_bias(padding_mask, q))
    lse = lse[..., None]  # (B, h, c, 1)
    empty = _no_visible_key(padding_mask, diagonal, q.size(-2))
    if empty is not None:
        lse = lse.masked_fill(empty[:, None], NEG_INF)
    return (out.squeeze(1), lse.squeeze(1)) if one_head else (out, lse)


def pair_grads(dout, q, k, v, out, lse, padding_mask, diagonal: bool, block_size: int,
               kernel: str):
    """dq, dk, dv of one (query chunk, key chunk) pair, from the final ``out`` and ``lse``.

    The weights are recomputed as ``exp(s - lse)`` with the log-sum-exp over *all* keys, so the
    pair's share of the gradient comes out directly. A row with no visible key anywhere
    (``lse = -inf``) is given ``lse = 0``: its scores are all ``-inf``, its weights exactly 0.

    Shape:
        like :func:`attend_pair`, plus dout, out: (..., c, d_v), lse: (..., c, 1)
        -> the shapes of q, k, v
    """
    if kernel == "tiled":
        return tiled_attention_backward(dout, q, k, v, out, lse, padding_mask, diagonal,
                                        block_size)
    one_head = q.dim() == 3
    dout4, q4, k4, v4, out4 = (t.unsqueeze(1) if one_head else t
                               for t in (dout, q, k, v, out))
    lse4 = _finite(lse[..., 0]).to(q.dtype)  # (B, h, c); the kernel reads it as q's dtype
    lse4 = lse4.unsqueeze(1) if one_head else lse4
    grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        dout4, q4, k4, v4, out4, lse4.contiguous(), 0.0, diagonal,
        attn_mask=_fused_bias(padding_mask, q))
    return tuple(g.squeeze(1) for g in grads) if one_head else grads


def chunk_pairs(q_chunks: tuple[int, int], k_chunks: tuple[int, int],
                causal: bool) -> list[tuple[int, int, bool]]:
    """The (query half, key half, diagonal) pairs that need any work; future pairs are skipped.

    Half 0 or 1 of a shard is chunk ``q_chunks[0]`` or ``q_chunks[1]``. A pair of different
    chunks is either wholly visible or (causal) wholly in the future; only a chunk with itself
    needs the causal mask.
    """
    pairs = []
    for a, qc in enumerate(q_chunks):
        for b, kc in enumerate(k_chunks):
            if not causal:
                pairs.append((a, b, False))
            elif kc <= qc:
                pairs.append((a, b, kc == qc))
    return pairs


def new_state(q: torch.Tensor, v: torch.Tensor) -> list[torch.Tensor]:
    """(m, l, acc) before any key: m = -inf, l = 0, acc = 0 (float32 for half inputs)."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    m = q.new_full((*q.shape[:-1], 1), NEG_INF, dtype=dtype)  # (..., 2c, 1)
    return [m, torch.zeros_like(m), q.new_zeros((*q.shape[:-1], v.size(-1)), dtype=dtype)]


def merge_block(state: list[torch.Tensor], rows: slice, out_b: torch.Tensor,
                lse_b: torch.Tensor) -> None:
    """Fold one block's result into the running state of ``rows``: chapter 10's merge.

    A block's normalised output and log-sum-exp are the state (m = lse_b, l = 1, acc = out_b),
    so the rule is the online recurrence with one term: rescale both to the larger maximum.
    An empty block (lse_b = -inf) adds exactly nothing.
    """
    m, l, acc = (t[..., rows, :] for t in state)
    m_new = torch.maximum(m, lse_b)
    shift = _finite(m_new)  # no visible key yet: shift by 0, not -inf
    alpha, beta = torch.exp(m - shift), torch.exp(lse_b - shift)
    state[0][..., rows, :] = m_new
    state[1][..., rows, :] = alpha * l + beta
    state[2][..., rows, :] = alpha * acc + beta * out_b


def finish_state(state: list[torch.Tensor],
                 dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``out = acc / l`` (an empty row, l = 0, gives 0; cast to ``dtype``) and
    ``lse = m + log l``."""
    m, l, acc = state
    out = acc / l.masked_fill(l == 0, 1.0)
    return (out if dtype is None else out.to(dtype)), m + torch.log(l)


def fold_shard(state, q, k, v, padding_mask, q_chunks, k_chunks, causal, block_size,
               kernel="tiled", record=None) -> None:
    """One ring step: attend from this rank's queries to one key/value shard, merge the result.

    ``record``, if a list, receives one dict per chunk pair computed: its ``q_chunk``,
    ``k_chunk``, ``diagonal`` and the pair's ``out`` and ``lse`` (the partial state merged).
    """
    c = q.size(-2) // 2  # tokens per chunk; a shard is two chunks
    for a, b, diagonal in chunk_pairs(q_chunks, k_chunks, causal):
        qs, ks = slice(a * c, (a + 1) * c), slice(b * c, (b + 1) * c)  # query, key chunk
        mask = None if padding_mask is None else padding_mask[:, ks]  # (B, c)
        out_b, lse_b = attend_pair(q[..., qs, :], k[..., ks, :], v[..., ks, :], mask, diagonal,
                                   block_size, kernel)  # (B, c, d_v), (B, c, 1)
        if record is not None:
            record.append({"q_chunk": q_chunks[a], "k_chunk": k_chunks[b],
                           "diagonal": diagonal, "out": out_b.clone(), "lse": lse_b.clone()})
        merge_block(state, qs, out_b, lse_b)


def shard_grads(dq, dk, dv, dout, q, k, v, out, lse, padding_mask, q_chunks, k_chunks, causal,
                block_size, kernel="tiled", record=None) -> None:
    """One backward ring step: add this shard pair's gradients into dq and the step's dk, dv.

    ``record``, if a list, receives one dict per chunk pair computed: ``q_chunk``, ``k_chunk``,
    ``diagonal`` and the pair's contributions ``dq``, ``dk``, ``dv``.
    """
    c = q.size(-2) // 2
    for a, b, diagonal in chunk_pairs(q_chunks, k_chunks, causal):
        qs, ks = slice(a * c, (a + 1) * c), slice(b * c, (b + 1) * c)
        mask = None if padding_mask is None else padding_mask[:, ks]
        g = pair_grads(dout[..., qs, :], q[..., qs, :], k[..., ks, :], v[..., ks, :],
                       out[..., qs, :], lse[..., qs, :], mask, diagonal, block_size, kernel)
        if record is not None:
            record.append({"q_chunk": q_chunks[a], "k_chunk": k_chunks[b],
                           "diagonal": diagonal, "dq": g[0].clone(), "dk": g[1].clone(),
                           "dv": g[2].clone()})
        dq[..., qs, :] += g[0]
        dk[..., ks, :] += g[1]
        dv[..., ks, :] += g[2]


def _tagged(record, **tags):
    """A list whose appended dicts get ``tags`` added and go on to ``record`` (or None)."""
    if record is None:
        return None

    class Tagged(list):
        def append(self, item):
            record.append({**tags, **item})

    return Tagged()


def _simulate_forward(ranks, world, causal, layout, block_size, kernel, record):
    """The forward ring in one process; per rank (out, lse). ``ranks``: shard_inputs per rank."""
    states = [new_state(qr, vr) for qr, _, vr, _ in ranks]
    held = [(kr, vr, mr) for _, kr, vr, mr in ranks]  # held[r]: the shard rank r has now
    for step in range(world):
        for r in range(world):
            src = (r - step) % world
            fold_shard(states[r], ranks[r][0], *held[r], chunk_ids(r, world, layout),
                       chunk_ids(src, world, layout), causal, block_size, kernel,
                       _tagged(record, kind="pair", pass_="forward", step=step, rank=r,
                               src=src))
        held = [held[(r - 1) % world] for r in range(world)]  # every rank passes to r + 1
    return [finish_state(s, qr.dtype) for s, (qr, *_) in zip(states, ranks)]


def simulate_ring(q, k, v, padding_mask=None, *, world: int, causal: bool = True,
                  layout: str = "zigzag", block_size: int = 256, kernel: str = "tiled",
                  record: list | None = None, rope_base: float | None = None,
                  rope_layout: str = "half") -> torch.Tensor:
    """The forward ring run by one process playing all ``world`` ranks (for reading and labs).

    The same :func:`fold_shard` and :func:`merge_block` as :func:`ring_attention`; the ring is
    a list whose shards move one place per step instead of messages between processes.

    Args:
        record: a list that receives, in order, one dict per chunk pair a rank computes:
            ``kind="pair"``, ``pass_="forward"``, ``step``, ``rank``, ``src`` (whose shard
            it holds) and :func:`fold_shard`'s keys. None records nothing.
        rope_base: with a base, every rank rotates its unrotated q and k shards by their
            global positions (:func:`rotate_shard`, layout ``rope_layout``) before the ring.

    Shape:
        q, k, v: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T) -> same as q
    """
    kernel = check_ring_inputs(q, k, v, None, padding_mask, world, layout, causal, block_size,
                               kernel, caller="simulate_ring")
    ranks = [shard_inputs(q, k, v, padding_mask, r, world, layout) for r in range(world)]
    if rope_base is not None:
        T = q.size(-2)
        ranks = [(*rotate_shard(qr, kr, T, r, world, layout, rope_base, rope_layout), vr, pm)
                 for r, (qr, kr, vr, pm) in enumerate(ranks)]
    outs = _simulate_forward(ranks, world, causal, layout, block_size, kernel, record)
    return unshard([o for o, _ in outs], q.size(-2), layout)


def simulate_ring_grads(q, k, v, dout, padding_mask=None, *, world: int, causal: bool = True,
                        layout: str = "zigzag", block_size: int = 256, kernel: str = "tiled",
                        record: list | None = None):
    """Forward and backward ring in one process: the output and the gradients for q, k, v.

    The backward is :func:`ring_attention_backward`'s: each step's share of dk, dv goes into
    fresh buffers, the travelling sums of the same shard (from the previous rank) are added,
    and the result passes to rank + 1; after the last step it arrives home.

    Args:
        dout: the gradient arriving at the output (whole sequence).
        record: a list that receives the forward's dicts (see :func:`simulate_ring`), then per
            backward step, rank by rank: one ``kind="pair"`` dict per chunk pair computed
            (:func:`shard_grads`' keys) and one ``kind="send"`` dict with the ``dk`` and ``dv``
            sums of shard ``src`` that the rank passes to ``to`` (``home`` when ``to == src``).

    Returns:
        ``out, dq, dk, dv`` for the whole sequence.

    Shape:
        q, k, v, dout: (B, T, d) or (B, h, T, d_h); padding_mask: (B, T) -> four like q
    """
    kernel = check_ring_inputs(q, k, v, dout, padding_mask, world, layout, causal, block_size,
                               kernel, caller="simulate_ring_grads")
    T = q.size(-2)
    ranks = [shard_inputs(q, k, v, padding_mask, r, world, layout) for r in range(world)]
    douts = [shard(dout, r, world, layout) for r in range(world)]
    outs = _simulate_forward(ranks, world, causal, layout, block_size, kernel, record)
    dqs = [torch.zeros_like(qr, dtype=outs[r][1].dtype) for r, (qr, *_) in enumerate(ranks)]
    held = [(kr, vr, mr) for _, kr, vr, mr in ranks]
    travelling = [None] * world  # the dk, dv sums that arrive with the shard a rank holds
    for step in range(world):
        sent = []
        for r in range(world):
            src = (r - step) % world
            (qr, *_), (out_r, lse_r) = ranks[r], outs[r]
            dk_s = torch.zeros_like(held[r][0], dtype=lse_r.dtype)
            dv_s = torch.zeros_like(held[r][1], dtype=lse_r.dtype)
            shard_grads(dqs[r], dk_s, dv_s, douts[r], qr, *held[r][:2], out_r, lse_r,
                        held[r][2], chunk_ids(r, world, layout), chunk_ids(src, world, layout),
                        causal, block_size, kernel,
                        _tagged(record, kind="pair", pass_="backward", step=step, rank=r,
                                src=src))
            if travelling[r] is not None:
                dk_s += travelling[r][0]
                dv_s += travelling[r][1]
            sent.append((dk_s, dv_s))
            if record is not None:
                record.append({"kind": "send", "pass_": "backward", "step": step, "rank": r,
                               "src": src, "to": (r + 1) % world, "dk": dk_s.clone(),
                               "dv": dv_s.clone()})
        travelling = [sent[(r - 1) % world] for r in range(world)]  # rank r passes to r + 1
        held = [held[(r - 1) % world] for r in range(world)]
    # After P passes rank r holds the sums of shard r: its own gradients.
    parts = [[o.to(q.dtype) for o, _ in outs], [g.to(q.dtype) for g in dqs],
             [t[0].to(k.dtype) for t in travelling], [t[1].to(v.dtype) for t in travelling]]
    return tuple(unshard(p, T, layout) for p in parts)


def visible_scores(T: int, world: int, layout: str = "zigzag",
                   causal: bool = True) -> list[int]:
    """Work per rank: how many (query, key) scores each rank computes, padding tail excluded.

    Counts the scores of the chunk pairs a rank attends (a chunk with itself counts its
    lower triangle), so it is proportional to the FLOPs of steps 2 to 6 on that rank.
    """
    c = math.ceil(T / (2 * world))
    sizes = [max(0, min(c, T - n * c)) for n in range(2 * world)]  # real tokens per chunk
    work = []
    for rank in range(world):
        total = 0
        for qc in chunk_ids(rank, world, layout):
            for kc in range(2 * world):
                if not causal or kc < qc:
                    total += sizes[qc] * sizes[kc]
                elif kc == qc:
                    total += sizes[qc] * (sizes[qc] + 1) // 2
        work.append(total)
    return work


def overlap_tokens(flops_per_s: float, link_bytes_per_s: float, causal: bool = False) -> float:
    """The shortest shard (tokens per rank) whose step computes as long as its transfer takes.

    Liu et al. (2023)'s condition: a step over a shard of n tokens costs ``4 n² d`` FLOPs
    (``2 n² d`` multiply-adds, QKᵀ and PV) and receives the next K and V, ``2 n d`` numbers of
    2 bytes (bfloat16), so the transfer hides behind the compute when
    ``4 n² d / F >= 4 n d / W``, that is ``n >= F / W`` (d cancels; Liu et al. call n the block
    size). A balanced causal step (zigzag) computes half of that, so ``n >= 2 F / W``.

    Args:
        flops_per_s: the device's peak FLOP/s F for bfloat16 inputs.
        link_bytes_per_s: the link's bandwidth W in bytes per second, one direction.
        causal: a zigzag causal step (half the work) instead of a full one.

    Returns:
        The smallest n, in tokens (not rounded).
    """
    if flops_per_s <= 0 or link_bytes_per_s <= 0:
        raise ValueError(f"need positive FLOP/s and bandwidth, got {flops_per_s} and "
                         f"{link_bytes_per_s}")
    return (2.0 if causal else 1.0) * flops_per_s / link_bytes_per_s


def spawn_ring(cases: list[dict], world: int, timeout: float = 120.0) -> list[dict]:
    """Run ring attention on ``world`` real processes (gloo on 127.0.0.1); one start for all cases.

    Each case is a dict with the whole-sequence ``q``, ``k``, ``v`` and optionally
    ``padding_mask``, ``causal`` (True), ``layout`` ("zigzag"), ``block_size`` (256),
    ``kernel`` ("auto") and ``dout``, the gradient arriving at the output. Every process shards
    the case, runs :func:`ring_attention` (and its backward when ``dout`` is given), and rank 0
    gathers.

    Returns:
        One dict per case: ``out`` and, with ``dout``, ``dq``, ``dk``, ``dv``, all for the whole
        sequence.
    """
    import os
    import socket
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ring")
        torch.save(cases, path + ".in")
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        context = mp.start_processes(_spawned_rank, args=(world, port, path), nprocs=world,
                                     join=False, start_method="spawn")
        while not context.join(timeout=timeout):  # raises if a rank failed
            pass
        return torch.load(path + ".out")


def _spawned_rank(rank: int, world: int, port: int, path: str) -> None:
    """One process of :func:`spawn_ring`: run every case, gather the results on rank 0."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        results = []
        for case in torch.load(path + ".in"):
            layout = case.get("layout", "zigzag")
            q, k, v, mask = shard_inputs(case["q"], case["k"], case["v"],
                                         case.get("padding_mask"), rank, world, layout)
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            dout = case.get("dout")
            with torch.set_grad_enabled(dout is not None):
                out = ring_attention(q, k, v, mask, causal=case.get("causal", True),
                                     layout=layout, block_size=case.get("block_size", 256),
                                     kernel=case.get("kernel", "auto"))
            found = {"out": out.detach()}
            if dout is not None:
                out.backward(shard(dout, rank, world, layout))
                found.update(dq=q.grad, dk=k.grad, dv=v.grad)
            whole = {}
            for name, part in found.items():
                parts = [torch.empty_like(part) for _ in range(world)]
                dist.all_gather(parts, part.contiguous())
                whole[name] = unshard(parts, case["q"].size(-2), layout)
            results.append(whole)
        if rank == 0:
            torch.save(results, path + ".out")
    finally:
        dist.destroy_process_group()
