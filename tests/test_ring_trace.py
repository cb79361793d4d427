"""The ring's record: replaying it gives the ring's own output and gradients, and the views
drawn from it say what each rank held and did."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook import AttentionLayer  # noqa: E402
from attnbook.lab.ring_trace import (  # noqa: E402
    describe_step,
    draw_ring_step,
    replay_backward,
    replay_forward,
    step_work_figure,
    trace_ring,
)
from attnbook.ring import pick_kernel, simulate_ring, visible_scores  # noqa: E402


def _inputs(T, heads=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (2, heads, T, 3) if heads else (2, T, 3)
    return [torch.randn(shape, dtype=torch.float64, generator=g) for _ in range(4)]


def _explicit(q, k, v, dout, pad):
    attn = AttentionLayer(q.size(-1), q.size(-2)).double()
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = attn.attend(q, k, v, pad)[0]
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("P", [2, 3, 4])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_replaying_the_record_gives_the_rings_output_and_gradients(P, layout):
    T = 4 * P + 1  # not a multiple of 2P: masked keys at the end
    q, k, v, dout = _inputs(T, heads=2 if P == 3 else 0, seed=P)
    pad = torch.ones(2, T, dtype=torch.bool)
    pad[0, : T // 3] = False  # left padding: empty rows
    trace = trace_ring(q, k, v, dout, pad, world=P, layout=layout, block_size=2)
    want = _explicit(q, k, v, dout, pad)
    for got, ring, ref in zip((replay_forward(trace), *replay_backward(trace)),
                              (trace.out, trace.dq, trace.dk, trace.dv), want):
        assert torch.equal(got, ring)  # the record is the run, bit for bit
        torch.testing.assert_close(got, ref, atol=1e-10, rtol=0)  # and the run is attention


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_every_chunk_pair_is_computed_once_and_the_future_skipped(layout):
    P, T = 4, 32
    trace = trace_ring(*_inputs(T), world=P, layout=layout)
    for pass_ in ("forward", "backward"):
        seen = []
        for t in range(P):
            for r in range(P):
                assert trace.source(t, r) == (r - t) % P
                done = [(a, b) for a, b, _ in trace.pairs(pass_, t, r)]
                assert len(done) + len(trace.skipped(pass_, t, r)) == 4  # 2 x 2 chunk pairs
                assert all(b > a for a, b in trace.skipped(pass_, t, r))  # only the future
                seen += done
        assert sorted(seen) == [(a, b) for a in range(2 * P) for b in range(a + 1)]
    totals = [sum(row[r] for row in trace.work()) for r in range(P)]
    assert totals == visible_scores(T, P, layout)


def test_contiguous_ranks_idle_and_dk_dv_travel_home():
    P = 4
    trace = trace_ring(*_inputs(16), world=P, layout="contiguous")
    assert trace.pairs("forward", 1, 0) == []  # rank 0 holds rank 3's (future) keys: idle
    assert "rank 0 holds the keys and values of rank 3, is idle" in describe_step(trace, 1)
    for e in trace.sends(P - 1):
        assert e["to"] == e["src"]  # the last pass brings each shard's sums to its owner
    assert trace.carriers(2, 3) == [1, 2, 3]
    assert "(home)" in describe_step(trace, P - 1, "backward")
    assert "does not occur" in describe_step(trace, P)


def test_views_draw():
    import matplotlib.pyplot as plt

    trace = trace_ring(*_inputs(12), world=3, layout="zigzag")
    for step, pass_ in [(0, "forward"), (1, "backward"), (3, "forward")]:
        fig = draw_ring_step(trace, step, pass_)
        assert len(fig.axes) == 2
        plt.close(fig)
    fig = step_work_figure({"zigzag": trace})
    plt.close(fig)


def test_fused_and_tiled_steps_agree():
    q, k, v, _ = _inputs(13, heads=2)
    pad = torch.ones(2, 13, dtype=torch.bool)
    pad[1, :7] = False
    for layout in ("contiguous", "zigzag"):
        tiled = simulate_ring(q, k, v, pad, world=3, layout=layout, block_size=2)
        fused = simulate_ring(q, k, v, pad, world=3, layout=layout, kernel="fused")
        torch.testing.assert_close(fused, tiled, atol=1e-12, rtol=0)


def test_kernel_choice():
    cpu = torch.zeros(1, 2, 3)
    assert pick_kernel("auto", cpu) == "fused"
    assert pick_kernel("tiled", cpu) == "tiled"
    assert pick_kernel("auto", torch.zeros(1, 2, 3, device="meta")) == "tiled"
    with pytest.raises(ValueError, match="kernel must be one of"):
        pick_kernel("flash", cpu)
    with pytest.raises(ValueError, match="CPU"):
        pick_kernel("fused", torch.zeros(1, 2, 3, device="meta"))


def test_overlap_condition():
    from attnbook.ring import overlap_tokens

    # Liu et al. (2023), Table 2: A100 (312 TFLOP/s) over NVLink (300 GB/s): about 1K tokens.
    assert round(overlap_tokens(312e12, 300e9)) == 1040
    assert overlap_tokens(312e12, 300e9, causal=True) == 2 * overlap_tokens(312e12, 300e9)
    with pytest.raises(ValueError, match="positive"):
        overlap_tokens(0, 1e9)


def test_what_the_chapter_says_of_the_cpu_flash_kernel():
    """It returns the log-sum-exp, reports 0 (not -inf) for a query that sees no key, with a
    zero output; the public SDPA returns the output only."""
    import torch.nn.functional as F

    q, k, v = (torch.randn(1, 1, 4, 3, dtype=torch.float64) for _ in range(3))
    bias = torch.zeros(1, 1, 1, 4, dtype=torch.float64)
    bias[..., :2] = float("-inf")  # keys 0 and 1 masked: with causality, queries 0, 1 see none
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, True, attn_mask=bias)
    assert lse.shape == (1, 1, 4)
    assert (lse[0, 0, :2] == 0).all() and (out[0, 0, :2] == 0).all()
    s = (q @ k.transpose(-1, -2) / 3**0.5 + bias).masked_fill(
        torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(lse[0, 0, 2:], torch.logsumexp(s, -1)[0, 0, 2:])
    assert isinstance(F.scaled_dot_product_attention(q, k, v), torch.Tensor)


def _lab15_static_views():
    """Lab 15's stored static widgets: [(control labels, {index tuple: view as a grey image})].

    Read from the executed lab's saved widget state, as the site renders it: the VBox marked by
    ``attnbook.lab.static_widgets.STATIC_CLASS`` holds the controls and the root of the stacks, one
    level of stacks per control, each leaf an Output with the view's figure."""
    import base64
    import io
    import json
    from pathlib import Path

    import numpy as np
    from PIL import Image

    from attnbook.lab.static_widgets import STATIC_CLASS

    lab = Path(__file__).resolve().parents[1] / "notebooks" / "15_ring_attention.ipynb"
    nb = json.loads(lab.read_text(encoding="utf-8"))
    state = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]

    def kids(model_id):
        return [c.removeprefix("IPY_MODEL_") for c in state[model_id]["state"]["children"]]

    def image(output_id):
        [png] = [o["data"]["image/png"] for o in state[output_id]["state"]["outputs"]
                 if "image/png" in o.get("data", {})]
        grey = Image.open(io.BytesIO(base64.b64decode("".join(png).replace("\n", ""))))
        return np.asarray(grey.convert("L"), dtype=float)

    found = []
    for model in state.values():
        if STATIC_CLASS not in model["state"].get("_dom_classes", []):
            continue
        children = [c.removeprefix("IPY_MODEL_") for c in model["state"]["children"]]
        labels = [state[c]["state"]["_options_labels"] for c in children[:-1]]
        views = {}

        def walk(stack_id, chosen, views=views):
            for i, kid in enumerate(kids(stack_id)):
                if state[kid]["model_name"] == "StackModel":
                    walk(kid, (*chosen, i))
                else:
                    views[(*chosen, i)] = image(kid)

        walk(children[-1], ())
        found.append((labels, views))
    return found


def test_every_control_of_lab15s_widget_changes_the_view():
    """From every view, moving any one control to any other value changes what is drawn, by more
    than a number in a title: at least 1% of the pixels. (A step slider that ran past a small
    ring's last step once showed the same finished ring for both layouts.)"""
    import numpy as np

    widgets_found = _lab15_static_views()
    assert widgets_found, "Lab 15 stores no static widget: run it (scripts/run_notebooks.py)"
    for labels, views in widgets_found:
        assert len(views) == np.prod([len(opts) for opts in labels])
        for chosen, view in views.items():
            for k, options in enumerate(labels):
                for i in range(len(options)):
                    if i == chosen[k]:
                        continue
                    other = views[(*chosen[:k], i, *chosen[k + 1:])]
                    changed = (1.0 if other.shape != view.shape
                               else float((np.abs(other - view) > 30).mean()))
                    assert changed > 0.01, (
                        f"moving {options[chosen[k]]!r} to {options[i]!r} (others "
                        f"{[labels[j][c] for j, c in enumerate(chosen) if j != k]}) changes "
                        f"{changed:.2%} of the pixels")
