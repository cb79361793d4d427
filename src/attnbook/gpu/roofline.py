"""Where a kernel lands on a roofline: its FLOPs and bytes, counted by the library, then drawn.

Each point is one key/value head and its ``g`` query heads (``g = 1`` without grouped-query
attention), batch 1, causal, float16 by default:

- ``"explicit"``: the explicit module (Chapter 8), :meth:`attnbook.Attention.attend` run on
  ``meta`` tensors (shapes only, no arithmetic), its FLOPs counted by PyTorch's
  FlopCounterMode and its bytes by :class:`~attnbook.gpu.io_cost.TrafficCounter`;
- ``"fused"``: the tiled forward kernel of Chapter 17 on a whole prompt,
  :func:`~attnbook.gpu.io_cost.flash_flops` and :func:`~attnbook.gpu.io_cost.flash_io`
  (each query head's programs read their keys and values themselves);
- ``"decode"``: one new query per head against ``T`` cached keys, Flash-Decoding
  (Chapter 19) with one split: the FLOPs of the explicit module's two products for that one
  query (counted as above), the bytes of :func:`~attnbook.gpu.io_cost.decoding_bytes`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import torch

from ..checks import check_whole_number
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


@dataclass(frozen=True)
class KernelCount:
    """The FLOPs and HBM bytes of one kernel call, and where they put it on a roofline."""

    kernel: str
    T: int
    d: int
    g: int
    flops: int
    bytes: int

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

    def attainable(self, gpu: GPU) -> float:
        """The roofline's cap on this kernel's FLOP/s on ``gpu``."""
        _check_gpu(gpu)
        return attainable_flops(self.intensity, gpu)

    def bound(self, gpu: GPU) -> str:
        """``"memory-bound"`` below the ridge point of ``gpu``, else ``"compute-bound"``."""
        _check_gpu(gpu)
        return "memory-bound" if self.intensity < gpu.ridge else "compute-bound"

    def describe(self, gpu: GPU) -> str:
        """One sentence: the counts, the intensity, the cap and the bound on ``gpu``."""
        _check_gpu(gpu)
        group = f", g = {self.g}" if self.g > 1 else ""
        return (f"{LABELS[self.kernel]}, T = {self.T}, d = {self.d}{group}: "
                f"{self.flops / 1e9:.3g} GFLOP for {self.bytes / 1e6:.3g} MB, "
                f"{self.intensity:.3g} FLOP/byte; on the {gpu.name} at most "
                f"{self.attainable(gpu) / 1e12:.3g} of {gpu.flops_per_s / 1e12:.0f} TFLOP/s: "
                f"{self.bound(gpu)} (ridge {gpu.ridge:.0f} FLOP/byte)")


def _check_gpu(gpu) -> None:
    """TypeError unless ``gpu`` is a :class:`~attnbook.gpu.io_cost.GPU` (a name is not one)."""
    if not isinstance(gpu, GPU):
        raise TypeError(f"gpu must be a GPU such as attnbook.gpu.io_cost.H100, got {gpu!r}")


def count_kernel(kernel: str, T: int, d: int, *, g: int = 1, block: int = 128,
                 dtype: torch.dtype = torch.float16) -> KernelCount:
    """Count the FLOPs and HBM bytes of one kernel for one key/value head and its query heads.

    Args:
        kernel: ``"explicit"``, ``"fused"`` or ``"decode"`` (see the module's docstring).
        T: tokens (prompt length, or cached tokens when decoding); d: head width.
        g: query heads per key/value head (grouped-query attention; 1 without it).
        block: query and key block of the fused kernel.
        dtype: the inputs' dtype; its size sets the bytes per element.

    Returns:
        A :class:`KernelCount`.

    Raises:
        ValueError: an unknown kernel or a size below 1.
        TypeError: a size that is not an int, or a dtype that is not a floating torch.dtype.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    for name, size in (("T", T), ("d", d), ("g", g), ("block", block)):
        check_whole_number(name, size, 1)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float16 (the "
                        f"inputs' dtype, which sets the bytes per element), got {dtype!r}")
    bytes_per = torch.empty((), dtype=dtype).element_size()
    if kernel == "fused":
        flops = g * flash_flops(T, d, block, block, causal=True)
        moved = g * bytes_per * flash_io(T, d, block, block, causal=True)
        return KernelCount(kernel, T, d, g, flops, moved)
    from ..attention import Attention  # here: attnbook imports attnbook.gpu

    T_q = T if kernel == "explicit" else 1  # decoding: the newest query sees every key
    with torch.device("meta"):  # shapes only: a (T, T) matrix costs nothing here
        attn = Attention(d, context_length=T)
        q = torch.empty(1, g, T_q, d, dtype=dtype)  # (B, h, T_q, d_h), h = g
        k, v = (torch.empty(1, 1, T, d, dtype=dtype) for _ in range(2))  # (B, h_kv, T, d_h)
    flops = flop_count(attn.attend, q, k, v)
    if kernel == "decode":
        return KernelCount(kernel, T, d, g, flops, decoding_bytes(T, d, g=g, bytes_per=bytes_per))
    with TrafficCounter() as traffic:
        attn.attend(q, k, v)
    return KernelCount(kernel, T, d, g, flops, traffic.total_bytes)


def draw_roofline(counts: list[KernelCount], gpu: GPU, highlight: str | None = None, ax=None):
    """Draw ``gpu``'s roofline, its ridge point, and one point per count.

    Every point is a separate line artist labelled ``"point:<kernel>"`` whose data are the
    intensity (FLOP/byte) and the attainable TFLOP/s, so a test can read back what was drawn.
    Points differ by marker shape and carry text labels; the highlighted one also says
    whether it is memory- or compute-bound.

    Args:
        counts: from :func:`count_kernel`.
        gpu: the GPU whose roofline is drawn.
        highlight: the kernel drawn large and labelled with its bound; None for none.
        ax: the matplotlib axes; None makes a figure.

    Returns:
        The axes.

    Raises:
        TypeError: ``counts`` is not a list of :class:`KernelCount`, or ``gpu`` not a
            :class:`~attnbook.gpu.io_cost.GPU`.
        ValueError: ``highlight`` is not None or one of the drawn counts' kernels.
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
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
    xs = torch.logspace(-1, 4, 200).tolist()
    ax.loglog(xs, [attainable_flops(x, gpu) / 1e12 for x in xs], color="black", lw=1.5,
              label="roofline")
    ax.axvline(gpu.ridge, color="0.4", ls=":", lw=1)
    ax.text(gpu.ridge * 1.15, 0.02, f"ridge\n{gpu.ridge:.0f} FLOP/byte", fontsize=8)
    ax.text(0.12, gpu.flops_per_s / 1e12 * 1.4, "memory-bound  ←", fontsize=8)
    ax.text(gpu.ridge * 1.15, gpu.flops_per_s / 1e12 * 1.4, "→  compute-bound", fontsize=8)
    for c in counts:
        x, y = c.intensity, c.attainable(gpu) / 1e12
        big = c.kernel == highlight
        ax.plot([x], [y], MARKERS[c.kernel], ms=10 if big else 6,
                mfc="black" if big else "white", mec="black", label=f"point:{c.kernel}")
        text = f"{c.kernel}: {x:.3g}"
        if big:
            text += f" FLOP/byte\n{c.bound(gpu)}, ≤ {y:.3g} TFLOP/s"
        right = x > 30  # labels of points near the ridge go to their left, inside the axes
        ax.annotate(text, (x, y), xytext=(-8 if right else 6, -14 if big else -10),
                    textcoords="offset points", ha="right" if right else "left",
                    fontsize=9 if big else 8, fontweight="bold" if big else "normal")
    ax.set_xlim(0.1, 1e4)
    ax.set_ylim(0.01, 4000)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)", fontsize=9)
    ax.set_ylabel("attainable TFLOP/s", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.set_title(f"{gpu.name}: {gpu.hbm_bytes_per_s / 1e12:.2f} TB/s, "
                 f"{gpu.flops_per_s / 1e12:.0f} TFLOP/s float16", fontsize=9)
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
