"""SDPA's decision table: every measured row pinned, in chapter 11 and in its appendix.

Chapter 11 (``book/11_fused.md``, ``tbl-fused-kernels``) shows the rows its text needs, S1, S3,
S6 and S7; the appendix (``book/sdpa_dispatch.md``, ``tbl-sdpa-dispatch``) holds the others
under the same row names. The test reads both tables as one: a row sits in exactly one of them,
and the two together hold every row that has a check. Each row S* (SDPA) and M*
(``nn.MultiheadAttention``) has one check below that makes the row's call on the CPU and
returns what it observed: the kernel that ran, named by the operators a ``TorchDispatchMode``
logs (``flash``, ``math``, ``explicit`` steps without SDPA, MHA's native ``fast path``), or the
error it raised. The row's "Runs" cell must name exactly that outcome, so a PyTorch that changes
a row, or an edit of the table that no longer matches PyTorch, fails here. Rows D quote the
documentation and are not measured; a new S or M row without a check fails too.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

BOOK = Path(__file__).resolve().parents[1] / "book"
PAGE = BOOK / "11_fused.md"
APPENDIX = BOOK / "sdpa_dispatch.md"
CHAPTER_ROWS = {"S1", "S3", "S6", "S7"}  # the rows chapter 11's text needs; the rest: appendix
FLASH = "_scaled_dot_product_flash_attention_for_cpu"
NATIVE_MHA = "_native_multi_head_attention"
COLUMNS = ["Row", "Call", "Input", "Mask", "`is_causal`", "`need_weights`", "Runs"]

# What a "Runs" cell may say, and the outcome each phrase stands for.
OUTCOMES = {"flash kernel": "flash", "math kernel": "math", "explicit steps": "explicit",
            "fast path": "fast path", "error": "error"}


def decision_table(text: str, name: str = "tbl-fused-kernels") -> dict[str, dict[str, str]]:
    """The rows of the table named ``name`` in ``text``, by their Row cell."""
    start = text.index(f":name: {name}")
    lines = text[start:].split("```", 1)[0].splitlines()
    rows = [line for line in lines if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header == COLUMNS, header
    table = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        assert cells[0] not in table, f"row {cells[0]} twice"
        table[cells[0]] = dict(zip(COLUMNS, cells))
    return table


CHAPTER_TABLE = decision_table(PAGE.read_text(encoding="utf-8"))
APPENDIX_TABLE = decision_table(APPENDIX.read_text(encoding="utf-8"), "tbl-sdpa-dispatch")
TABLE = {**CHAPTER_TABLE, **APPENDIX_TABLE}


def claimed(runs: str) -> str:
    """The one outcome a "Runs" cell names, with the error's message for an error."""
    found = [outcome for phrase, outcome in OUTCOMES.items() if runs.startswith(phrase)]
    assert len(found) == 1, f"a Runs cell must start with one of {list(OUTCOMES)}: {runs!r}"
    if found[0] == "error":
        return "error: " + re.search(r"`([^`]+)`", runs).group(1)
    return found[0]


class Ops(TorchDispatchMode):
    """Every operator a call runs, with its arguments."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func.__name__.split(".")[0], args, kwargs or {}))
        return func(*args, **(kwargs or {}))

    @property
    def names(self) -> set[str]:
        return {name for name, _, _ in self.calls}

    def flash_calls(self) -> list[tuple[bool, torch.Tensor | None]]:
        """(is_causal, attn_mask) of every forward call of the CPU flash kernel."""
        return [(bool(args[4]) if len(args) > 4 else False, kwargs.get("attn_mask"))
                for name, args, kwargs in self.calls if name == FLASH]


def kernel(ops: Ops) -> str:
    """The outcome the logged operators show."""
    if NATIVE_MHA in ops.names:
        return "fast path"
    if FLASH in ops.names:
        return "flash"
    if "_safe_softmax" in ops.names:  # SDPA's math kernel (its softmax of masked rows is 0)
        return "math"
    if "_softmax" in ops.names:  # MHA's own explicit steps: a plain softmax, no SDPA
        return "explicit"
    return "nothing"


def qkv(*shape, dtype=torch.float32, grad=False, heads_kv=None):
    g = torch.Generator().manual_seed(0)
    kv_shape = shape if heads_kv is None else (shape[0], heads_kv, *shape[2:])
    shapes = (shape, kv_shape, kv_shape)
    return [torch.randn(*s, generator=g, dtype=dtype).requires_grad_(grad) for s in shapes]


def sdpa(q, k, v, backward=False, backend=None, **kwargs) -> Ops:
    """Log one SDPA call (and its backward), inside ``sdpa_kernel(backend)`` if given."""
    with Ops() as ops:
        if backend is None:
            y = F.scaled_dot_product_attention(q, k, v, **kwargs)
        else:
            with sdpa_kernel(backend):
                y = F.scaled_dot_product_attention(q, k, v, **kwargs)
        if backward:
            y.sum().backward()
    return ops


def error(call: Callable[[], object]) -> str:
    with pytest.raises(RuntimeError) as info:
        call()
    return f"error: {info.value}"


def one(outcomes: list[str]) -> str:
    """The outcome all the cases of a row share (a row states one outcome for all of them)."""
    assert len(set(outcomes)) == 1, outcomes
    return outcomes[0]


T = 6
CAUSAL = torch.ones(T, T, dtype=torch.bool).tril()  # SDPA's convention: True = may attend
BLOCKED = ~CAUSAL  # MHA's convention: True = blocked


def row_s1():
    out = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for causal in (False, True):
            ops = sdpa(*qkv(2, 1, T, 8, dtype=dtype, grad=True), backward=True, is_causal=causal)
            assert f"{FLASH}_backward" in ops.names
            out.append(kernel(ops))
    return one(out)


def row_s2():
    key = torch.tensor([True, True, False, True, True, True])
    masks = [CAUSAL, CAUSAL[None, None].expand(2, 1, T, T), key.expand(2, 1, 1, T),
             torch.zeros(T, T).masked_fill(~CAUSAL, float("-inf"))]
    out = []
    for mask in masks:
        ops = sdpa(*qkv(2, 1, T, 8), attn_mask=mask)
        ((_, given),) = ops.flash_calls()
        assert given.dtype == torch.float32 and given.shape[-1] == T  # the float copy
        out.append(kernel(ops))
    return one(out)


def row_s3():
    q, k, v = qkv(2, 1, T, 8)
    key = torch.tensor([True, True, True, False, True, True]).expand(T, T)
    out = []
    for mask in (key, torch.zeros(T, T).masked_fill(~key, float("-inf"))):
        out.append(kernel(sdpa(q, k, v, attn_mask=mask, is_causal=True)))
        both = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
        merged = F.scaled_dot_product_attention(q, k, v, attn_mask=CAUSAL & key)
        torch.testing.assert_close(both, merged)  # blocked if either mask blocks it
        assert not torch.allclose(both, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return one(out)


def row_s4():
    q, k, v = qkv(2, 4, T, 8, heads_kv=2)
    ops = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    ((_, args, _),) = [c for c in ops.calls if c[0] == FLASH]
    assert args[1].shape[1] == 2 and args[2].shape[1] == 2  # the kernel gets 2 key heads
    assert not {"repeat_interleave", "repeat", "index_select"} & ops.names
    return kernel(ops)


def row_s5():
    bias = torch.zeros(T, T).masked_fill(~CAUSAL, float("-inf")).requires_grad_()
    return one([kernel(sdpa(*qkv(2, 1, T, 8), dropout_p=0.1)),
                kernel(sdpa(*qkv(2, 1, T, 8), attn_mask=bias))])


def row_s6():
    out = [kernel(sdpa(*qkv(2, T, 8), attn_mask=CAUSAL))]
    for shape in ((2, T, 8), (T, 8), (2, 1, 1, T, 8)):
        for causal in (False, True):
            out.append(kernel(sdpa(*qkv(*shape, grad=True), backward=True, is_causal=causal)))
    ops = sdpa(*qkv(2, T, 8, grad=True), backward=True, is_causal=True)
    assert "_softmax_backward_data" in ops.names  # the backward of the explicit softmax
    return one(out)


def row_s7():
    mask = torch.ones(T, T, dtype=torch.bool)
    meta = [torch.empty(2, 1, T, 8, device="meta") for _ in range(3)]
    return one([
        error(lambda: sdpa(*qkv(2, T, 8), attn_mask=mask, is_causal=True)),
        error(lambda: sdpa(*qkv(2, 1, T, 8), backend=SDPBackend.MATH, attn_mask=mask,
                           is_causal=True)),
        error(lambda: sdpa(*meta, attn_mask=mask.to("meta"), is_causal=True)),
    ])


def row_s8():
    out = []
    for causal in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out.append(error(lambda c=causal: sdpa(*qkv(2, T, 8),
                                                   backend=SDPBackend.FLASH_ATTENTION,
                                                   is_causal=c)))
        assert any("to be 4 dimensional" in str(w.message) for w in caught)
    return one(out)


def row_s9():
    return one([error(lambda b=b, c=c: sdpa(*qkv(2, 1, T, 8), backend=b, is_causal=c))
                for b in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION)
                for c in (False, True)])


def mha(heads=2, bias=True, train=True, d=8):
    torch.manual_seed(0)
    module = nn.MultiheadAttention(d, heads, bias=bias, batch_first=True)
    return module.train(train), torch.randn(2, T, d)


def mha_ops(module, x, no_grad=False, **kwargs) -> Ops:
    """Log one self-attention call; ``no_grad`` turns autograd off (``torch.no_grad``: under
    ``inference_mode`` SDPA reaches the log as one operator, hiding the kernel it runs)."""
    with Ops() as ops, torch.set_grad_enabled(not no_grad):
        module(x, x, x, **kwargs)
    return ops


def row_m1():
    out = []
    for train in (True, False):  # eval mode with autograd on is not the fast path either
        module, x = mha(train=train)
        for causal in (False, True):
            ops = mha_ops(module, x, attn_mask=BLOCKED, is_causal=causal)
            out.append(kernel(ops))
        _, weights = module(x, x, x, attn_mask=BLOCKED)
        assert weights.shape == (2, T, T)  # averaged over the heads
    return one(out)


def row_m2():
    module, x = mha()
    ops = mha_ops(module, x, attn_mask=BLOCKED, need_weights=False)
    ((causal, mask),) = ops.flash_calls()
    assert not causal and mask.dtype == torch.float32 and mask.shape[-2:] == (T, T)
    assert "masked_fill_" in ops.names  # a new float (T, T) tensor, on every call
    return kernel(ops)


def row_m3():
    module, x = mha()
    ops = mha_ops(module, x, attn_mask=BLOCKED, is_causal=True, need_weights=False)
    ((causal, mask),) = ops.flash_calls()
    assert causal and mask is None
    nothing = torch.zeros(T, T, dtype=torch.bool)  # a wrong hint: this mask blocks nothing
    y_wrong = module(x, x, x, attn_mask=nothing, is_causal=True, need_weights=False)[0]
    y_causal = module(x, x, x, attn_mask=BLOCKED, need_weights=False)[0]
    torch.testing.assert_close(y_wrong, y_causal)  # trusted, not checked
    return kernel(ops)


def row_m4():
    module, x = mha()
    padding = torch.zeros(2, T, dtype=torch.bool)
    padding[0, 0] = True  # MHA's convention: True = padding
    ops = mha_ops(module, x, attn_mask=BLOCKED, key_padding_mask=padding, is_causal=True,
                  need_weights=False)
    ((causal, mask),) = ops.flash_calls()
    assert not causal and mask.dtype == torch.float32 and mask.shape == (2, 2, T, T)
    return kernel(ops)


def row_m5():
    out = []
    for train in (True, False):
        module, x = mha(train=train)
        for weights in (False, True):
            out.append(error(lambda m=module, w=weights, x=x: mha_ops(
                m, x, is_causal=True, need_weights=w)))
    return one(out)


def row_m6():
    module, x = mha(heads=2, bias=True, train=False)
    return one([kernel(mha_ops(module, x, no_grad=True, need_weights=w)) for w in (False, True)])


def row_m7():
    out = []
    for heads, bias in ((1, True), (2, False)):
        module, x = mha(heads=heads, bias=bias, train=False)
        ops = mha_ops(module, x, no_grad=True, need_weights=False)
        assert NATIVE_MHA not in ops.names
        out.append(kernel(ops))
    return one(out)


def row_m8():
    module, x = mha(heads=2, bias=True, train=False)
    out = []
    for weights in (False, True):
        out.append(kernel(mha_ops(module, x, no_grad=True, is_causal=True, need_weights=weights)))
        with torch.no_grad():
            hinted = module(x, x, x, is_causal=True, need_weights=weights)[0]
            unmasked = module(x, x, x, need_weights=weights)[0]
            causal = module.train()(x, x, x, attn_mask=BLOCKED, need_weights=weights)[0]
        module.eval()
        torch.testing.assert_close(hinted, unmasked)
        assert not torch.allclose(hinted, causal, atol=1e-3)
    return one(out)


CHECKS = {name.removeprefix("row_").upper(): f for name, f in list(globals().items())
          if name.startswith("row_")}


def test_the_chapter_keeps_its_rows_and_the_appendix_the_rest():
    assert set(CHAPTER_TABLE) == CHAPTER_ROWS
    assert not set(CHAPTER_TABLE) & set(APPENDIX_TABLE), "a row in both tables"
    assert len(TABLE) == len(CHAPTER_TABLE) + len(APPENDIX_TABLE)
    # the chapter's text and the appendix point at each other
    assert "{doc}`sdpa_dispatch`" in PAGE.read_text(encoding="utf-8")
    assert "{numref}`tbl-fused-kernels`" in APPENDIX.read_text(encoding="utf-8")


def test_every_measured_row_has_a_check_and_every_check_a_row():
    measured = {row for row in TABLE if not row.startswith("D")}
    assert measured == set(CHECKS), (measured ^ set(CHECKS))
    assert all(re.fullmatch(r"[SMD]\d+", row) for row in TABLE)
    assert all(TABLE[row]["Call"].split(", ")[1].startswith("CPU") for row in measured)
    assert any(row.startswith("D") for row in TABLE)


@pytest.mark.parametrize("row", sorted(CHECKS))
def test_row_holds_on_this_pytorch(row):
    cells = TABLE[row]
    assert cells["Call"].split(", ")[0] == ("SDPA" if row.startswith("S") else "MHA")
    said = claimed(cells["Runs"])
    observed = CHECKS[row]()
    if said.startswith("error"):
        assert observed.startswith("error") and said.removeprefix("error: ") in observed, (
            f"row {row} says {said!r}, PyTorch {torch.__version__} gives {observed!r}")
    else:
        assert observed == said, (
            f"row {row} says {said!r}, PyTorch {torch.__version__} runs {observed!r}")


def test_a_wrong_cell_is_caught():
    assert claimed("math kernel, forward") == "math"
    assert claimed("error `No viable backend` here") == "error: No viable backend"
    with pytest.raises(AssertionError):
        claimed("the kernel of the day")
    text = PAGE.read_text(encoding="utf-8")
    s1 = re.search(r"^\| S1 \|.*$", text, re.M).group(0)
    bad = text.replace(s1, s1.replace("| flash kernel", "| math kernel"))
    assert claimed(decision_table(bad)["S1"]["Runs"]) == "math" != row_s1()
