"""Where a kernel lands on a roofline: its FLOPs and bytes, counted by the library, then drawn.

Each point is one key/value head and its ``g`` query heads (``g = 1`` without grouped-query
attention), batch 1, causal, float16 by default:

- ``"explicit"``: the explicit module (Chapter 8), :meth:`attnbook.Attention.attend` run on
  ``meta`` tensors (shapes only, no arithmetic), its FLOPs counted by PyTorch's
  FlopCounterMode and its bytes by :class:`~attnbook.gpu.io_cost.TrafficCounter`;
- ``"fused"``: the tiled forward kernel of Chapter 17 on a whole prompt,
  :func:`~attnbook.gpu.io_cost.flash_flops` and :func:`~attnbook.gpu.io_cost.flash_io`
  (each query head's programs read their keys and values themselves), with the blocks the
  library launches on the chosen GPU (:func:`attnbook.gpu.configs.forward_config`);
- ``"decode"``: one new query per head against ``T`` cached keys, Flash-Decoding
  (Chapter 19) with one split: the FLOPs of the explicit module's two products for that one
  query (counted as above), the bytes of :func:`~attnbook.gpu.io_cost.decoding_bytes`.

Each point is capped by the roof of the unit it runs on (:func:`unit_of`): the explicit
module's matrix products are cuBLAS calls, on the tensor cores in float16 on every GPU here;
the book's Triton kernels reach the tensor cores from sm80 on, but Triton compiles ``tl.dot``
for sm75 (the T4) to float32 FMA (the compile records of :mod:`attnbook.gpu.compile_check`
say ``fma`` for every sm75 launch), so on a T4 they are capped by its FMA peak.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import torch

from ..checks import check_whole_number
from .configs import forward_config
from .io_cost import (
    GPU,
    TrafficCounter,
    attainable_flops,
    decoding_bytes,
    flash_flops,
    flash_io,
    flop_count,
)

KERNELS = ("explicit", "fused", "decode")
LABELS = {"explicit": "explicit module (Ch. 8)", "fused": "fused tiled kernel (Ch. 17)",
          "decode": "Flash-Decoding, one query (Ch. 19)"}
MARKERS = {"explicit": "s", "fused": "^", "decode": "o"}  # shapes, so colour carries nothing
UNIT_NAMES = {"tensor": "tensor cores", "fma": "FP32 FMA units"}
TRITON_KERNELS = ("fused", "decode")  # the book's Triton kernels: tl.dot, lowered per arch


def unit_of(kernel: str, gpu: GPU, dtype: torch.dtype = torch.float16) -> str:
    """The arithmetic unit whose roof caps ``kernel`` on ``gpu``: ``"tensor"`` or ``"fma"``.

    The book's Triton kernels (``"fused"``, ``"decode"``) run ``tl.dot`` on FMA below sm80
    (T4) and on the tensor cores from sm80 on; the explicit module's products are cuBLAS's,
    on the tensor cores in float16 (bfloat16 from sm80) and on the CUDA cores in float32
    (PyTorch's default, without TF32). A GPU without ``arch`` counts as sm80 or newer.

    Raises:
        ValueError: a dtype whose roof is not kept (float64; float32 in Triton from sm80 on,
            which runs as three TF32 products, ``tf32x3``; bfloat16 on the T4, which has no
            bfloat16 tensor cores), or an unknown kernel.
        TypeError: ``gpu`` is not a :class:`~attnbook.gpu.io_cost.GPU`.
    """
    _check_gpu(gpu)
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    old = gpu.arch is not None and gpu.arch < 80
    if kernel in TRITON_KERNELS and old:
        return "fma"  # every sm75 launch of the compile records: instruction "fma"
    if dtype == torch.float16 or (dtype == torch.bfloat16 and not old):
        return "tensor"
    if dtype == torch.float32 and kernel == "explicit":
        return "fma"
    raise ValueError(f"no roof is kept for the {kernel} kernel in {dtype} on the {gpu.name}: "
                     "use torch.float16 (or torch.bfloat16 from sm80 on)")


@dataclass(frozen=True)
class KernelCount:
    """The FLOPs and HBM bytes of one kernel call, and where they put it on a roofline.

    ``block_m``, ``block_n``: the fused kernel's blocks (None for the others); ``arch``: the
    launch-table row they came from (None when the caller chose them), so that a count is
    judged only on a GPU that launches those blocks.
    """

    kernel: str
    T: int
    d: int
    g: int
    flops: int
    bytes: int
    block_m: int | None = None
    block_n: int | None = None
    arch: int | None = None
    dtype: torch.dtype = torch.float16

    def __post_init__(self) -> None:
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.kernel!r}")
        for name in ("T", "d", "g", "bytes"):
            check_whole_number(name, getattr(self, name), 1)
        check_whole_number("flops", self.flops, 0)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte of HBM traffic."""
        return self.flops / self.bytes

    def _judge(self, gpu: GPU) -> str:
        """The unit on ``gpu``, after checking that the count's blocks are ``gpu``'s."""
        _check_gpu(gpu)
        if self.arch is not None:
            mine = forward_config(self.arch, self.dtype, self.d)
            theirs = forward_config(gpu.arch, self.dtype, self.d)
            if (mine.block_m, mine.block_n) != (theirs.block_m, theirs.block_n):
                raise ValueError(
                    f"this count used the {self.block_m} x {self.block_n} blocks launched on "
                    f"sm{self.arch}; the {gpu.name} launches {theirs.block_m} x "
                    f"{theirs.block_n}: count it for that GPU, count_kernel(..., gpu=...)")
        return unit_of(self.kernel, gpu, self.dtype)

    def unit(self, gpu: GPU) -> str:
        """The unit whose roof caps this kernel on ``gpu`` (see :func:`unit_of`)."""
        return self._judge(gpu)

    def attainable(self, gpu: GPU) -> float:
        """The roofline's cap on this kernel's FLOP/s on ``gpu``, under its unit's roof."""
        return attainable_flops(self.intensity, gpu, self._judge(gpu))

    def bound(self, gpu: GPU) -> str:
        """``"memory-bound"`` below the ridge of its unit's roof on ``gpu``, else
        ``"compute-bound"``."""
        return "memory-bound" if self.intensity < gpu.ridge_of(self._judge(gpu)) \
            else "compute-bound"

    def describe(self, gpu: GPU) -> str:
        """One sentence: the counts, the blocks, the intensity, the unit, the cap and the bound."""
        unit = self._judge(gpu)
        group = f", g = {self.g}" if self.g > 1 else ""
        blocks = f", blocks {self.block_m} x {self.block_n}" if self.block_m else ""
        return (f"{LABELS[self.kernel]}, T = {self.T}, d = {self.d}{group}{blocks}: "
                f"{self.flops / 1e9:.3g} GFLOP for {self.bytes / 1e6:.3g} MB, "
                f"{self.intensity:.3g} FLOP/byte; on the {gpu.name}'s {UNIT_NAMES[unit]} at "
                f"most {self.attainable(gpu) / 1e12:.3g} of {gpu.peak(unit) / 1e12:.3g} "
                f"TFLOP/s: {self.bound(gpu)} (ridge {gpu.ridge_of(unit):.0f} FLOP/byte)")


def _check_gpu(gpu) -> None:
    """TypeError unless ``gpu`` is a :class:`~attnbook.gpu.io_cost.GPU` (a name is not one)."""
    if not isinstance(gpu, GPU):
        raise TypeError(f"gpu must be a GPU such as attnbook.gpu.io_cost.H100, got {gpu!r}")


def count_kernel(kernel: str, T: int, d: int, *, g: int = 1, block: int | None = None,
                 dtype: torch.dtype = torch.float16, gpu: GPU | None = None) -> KernelCount:
    """Count the FLOPs and HBM bytes of one kernel for one key/value head and its query heads.

    Args:
        kernel: ``"explicit"``, ``"fused"`` or ``"decode"`` (see the module's docstring).
        T: tokens (prompt length, or cached tokens when decoding); d: head width.
        g: query heads per key/value head (grouped-query attention; 1 without it).
        block: query and key block of the fused kernel, to choose them by hand; None takes
            the blocks the library launches on ``gpu`` (:func:`~attnbook.gpu.configs.
            forward_config` for its arch, dtype and ``d``), or, without a GPU, the
            interpreter's (64 x 64).
        dtype: the inputs' dtype; its size sets the bytes per element.
        gpu: the GPU whose launch table sets the fused kernel's blocks.

    Returns:
        A :class:`KernelCount`.

    Raises:
        ValueError: an unknown kernel, a size below 1, or a ``gpu`` without ``arch`` and no
            ``block``.
        TypeError: a size that is not an int, a dtype that is not a floating torch.dtype, or a
            ``gpu`` that is not a :class:`~attnbook.gpu.io_cost.GPU`.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    for name, size in (("T", T), ("d", d), ("g", g)):
        check_whole_number(name, size, 1)
    if block is not None:
        check_whole_number("block", block, 1)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float16 (the "
                        f"inputs' dtype, which sets the bytes per element), got {dtype!r}")
    if gpu is not None:
        _check_gpu(gpu)
    bytes_per = torch.empty((), dtype=dtype).element_size()
    if kernel == "fused":
        if block is not None:
            bm = bn = block
            arch = None
        elif gpu is not None and gpu.arch is None:
            raise ValueError(f"the {gpu.name} has no arch, so no launch table row: pass block=")
        else:
            arch = gpu.arch if gpu is not None else None
            cfg = forward_config(arch, dtype, d)
            bm, bn = cfg.block_m, cfg.block_n
        flops = g * flash_flops(T, d, bm, bn, causal=True)
        moved = g * bytes_per * flash_io(T, d, bm, bn, causal=True)
        return KernelCount(kernel, T, d, g, flops, moved, bm, bn, arch, dtype)
    from ..attention import Attention  # here: attnbook imports attnbook.gpu

    T_q = T if kernel == "explicit" else 1  # decoding: the newest query sees every key
    with torch.device("meta"):  # shapes only: a (T, T) matrix costs nothing here
        attn = Attention(d, context_length=T)
        q = torch.empty(1, g, T_q, d, dtype=dtype)  # (B, h, T_q, d_h), h = g
        k, v = (torch.empty(1, 1, T, d, dtype=dtype) for _ in range(2))  # (B, h_kv, T, d_h)
    flops = flop_count(attn.attend, q, k, v)
    if kernel == "decode":
        return KernelCount(kernel, T, d, g, flops,
                           decoding_bytes(T, d, g=g, bytes_per=bytes_per), dtype=dtype)
    with TrafficCounter() as traffic:
        attn.attend(q, k, v)
    return KernelCount(kernel, T, d, g, flops, traffic.total_bytes, dtype=dtype)


def draw_roofline(counts: list[KernelCount], gpu: GPU, highlight: str | None = None, ax=None):
    """Draw ``gpu``'s two roofs, their ridge points, and one point per count.

    The tensor-core roof is the line artist labelled ``"roof:tensor"``, the float32 FMA roof
    (where the GPU keeps one) ``"roof:fma"``, dashed. Every point is a separate line artist
    labelled ``"point:<kernel>"`` whose data are the intensity (FLOP/byte) and the attainable
    TFLOP/s under the roof of the unit it runs on (:func:`unit_of`), so a test can read back
    what was drawn. Points differ by marker shape and carry text labels, which name the FMA
    roof when a point sits under it; the highlighted one also says whether it is memory- or
    compute-bound.

    Args:
        counts: from :func:`count_kernel`, for ``gpu`` (its launch blocks).
        gpu: the GPU whose roofline is drawn.
        highlight: the kernel drawn large and labelled with its bound; None for none.
        ax: the matplotlib axes; None makes a figure.

    Returns:
        The axes.

    Raises:
        TypeError: ``counts`` is not a list of :class:`KernelCount`, or ``gpu`` not a
            :class:`~attnbook.gpu.io_cost.GPU`.
        ValueError: ``highlight`` is not None or one of the drawn counts' kernels, or a count
            was made with another GPU's blocks.
    """
    import matplotlib.pyplot as plt

    if isinstance(counts, KernelCount):
        raise TypeError("counts must be a list of KernelCount (from count_kernel), got one "
                        "KernelCount: wrap it in a list, [count]")
    if isinstance(counts, dict):
        raise TypeError("counts must be a list of KernelCount (from count_kernel), got a dict: "
                        "pass list(counts.values())")
    counts = list(counts)  # a generator would be used up by the check below
    if not all(isinstance(c, KernelCount) for c in counts):
        raise TypeError("counts must be a list of KernelCount (from count_kernel), got "
                        + ", ".join(type(c).__name__ for c in counts))
    _check_gpu(gpu)
    if highlight is not None and highlight not in {c.kernel for c in counts}:
        raise ValueError(f"highlight must be None or the kernel of a drawn count, one of "
                         f"{sorted({c.kernel for c in counts})}, got {highlight!r}")
    units = [c.unit(gpu) for c in counts]  # every check before anything is drawn
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
    xs = torch.logspace(-1, 4, 200).tolist()
    roofs = ["tensor"] + (["fma"] if gpu.fma_flops_per_s is not None else [])
    for unit in roofs:
        fma = unit == "fma"
        ax.loglog(xs, [attainable_flops(x, gpu, unit) / 1e12 for x in xs], color="black",
                  lw=1.2 if fma else 1.5, ls="--" if fma else "-", label=f"roof:{unit}")
        ax.axvline(gpu.ridge_of(unit), color="0.4", ls=":", lw=1)
    # the tensor ridge's label above the legend (lower right), the FMA ridge's left of its line
    ax.text(gpu.ridge * 1.15, 0.2, f"ridge\n{gpu.ridge:.0f} FLOP/byte", fontsize=8)
    if "fma" in roofs:
        ax.text(gpu.ridge_of("fma") / 1.15, 0.02, f"FMA ridge\n{gpu.ridge_of('fma'):.0f}",
                fontsize=8, ha="right")
    ax.text(0.12, gpu.flops_per_s / 1e12 * 1.4, "memory-bound  ←", fontsize=8)
    ax.text(gpu.ridge * 1.15, gpu.flops_per_s / 1e12 * 1.4, "→  compute-bound", fontsize=8)
    for c, unit in zip(counts, units):
        x, y = c.intensity, c.attainable(gpu) / 1e12
        big = c.kernel == highlight
        ax.plot([x], [y], MARKERS[c.kernel], ms=10 if big else 6,
                mfc="black" if big else "white", mec="black", label=f"point:{c.kernel}")
        text = f"{c.kernel}{' (FMA)' if unit == 'fma' else ''}: {x:.3g}"
        if big:
            text += f" FLOP/byte\n{c.bound(gpu)}, ≤ {y:.3g} TFLOP/s"
        right = x > 30  # labels of points near the ridge go to their left, inside the axes
        ax.annotate(text, (x, y), xytext=(-8 if right else 6, -14 if big else -10),
                    textcoords="offset points", ha="right" if right else "left",
                    fontsize=9 if big else 8, fontweight="bold" if big else "normal")
    handles = [line for line in ax.lines if line.get_label().startswith("roof:")]
    names = {"roof:tensor": "tensor cores (float16)", "roof:fma": "FP32 FMA units"}
    ax.legend(handles, [names[h.get_label()] for h in handles], fontsize=7, loc="lower right")
    ax.set_xlim(0.1, 1e4)
    ax.set_ylim(0.01, 4000)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)", fontsize=9)
    ax.set_ylabel("attainable TFLOP/s", fontsize=9)
    ax.tick_params(labelsize=8)
    fma = (f", FMA {gpu.fma_flops_per_s / 1e12:.3g}" if gpu.fma_flops_per_s is not None
           else "")
    ax.set_title(f"{gpu.name}: {gpu.hbm_bytes_per_s / 1e12:.2f} TB/s, tensor cores "
                 f"{gpu.flops_per_s / 1e12:.0f}{fma} TFLOP/s", fontsize=9)
    return ax


def png_bytes(fig, dpi: float, colors: int = 16) -> bytes:
    """``fig`` as a PNG with a palette of ``colors`` shades: a quarter of the bytes of
    matplotlib's RGBA, for a widget that stores many views of a black-and-white figure.

    Raises:
        TypeError: ``fig`` is not a matplotlib figure, or ``colors`` not an int.
        ValueError: ``colors`` above 256 (a PNG palette) or ``dpi`` not positive.
    """
    from PIL import Image

    if not hasattr(fig, "savefig"):
        raise TypeError(f"fig must be a matplotlib Figure (ax.figure for an axes), got "
                        f"{type(fig).__name__}")
    if check_whole_number("colors", colors, 1) > 256:
        raise ValueError(f"colors must be at most 256 (a PNG palette), got {colors}")
    if not isinstance(dpi, (int, float)) or isinstance(dpi, bool) or not dpi > 0:
        raise ValueError(f"dpi must be a positive number of dots per inch, got {dpi!r}")

    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi)
    raw.seek(0)
    small = io.BytesIO()
    Image.open(raw).convert("RGB").quantize(colors).save(small, format="png", optimize=True)
    return small.getvalue()
