"""attnbook.lab.static_widgets: stored views in nested Stacks, switched by jslinked controls."""

from __future__ import annotations

import json
from pathlib import Path

import ipywidgets as widgets
import nbformat
import pytest

from attnbook.lab import static_widgets as sw

ROOT = Path(__file__).resolve().parents[1]
# Labs 11 to 14 still use a live ipywidgets.interact (their conversion is pending).
PENDING: set[str] = set()


def _stacks(widget, depth=0, found=None):
    found = {} if found is None else found
    if isinstance(widget, widgets.Stack):
        found.setdefault(depth, []).append(widget)
        for child in widget.children:
            _stacks(child, depth + 1, found)
    return found


def test_controls_become_selections():
    slider = sw.as_selection(widgets.FloatSlider(value=0.5, min=-2, max=2), points=5)
    assert isinstance(slider, widgets.SelectionSlider)
    assert 0.5 in slider.options or 0.5 in [v for _, v in slider.options]
    assert slider.value == 0.5
    log = sw.as_selection(widgets.FloatLogSlider(value=1.0, base=10, min=-2, max=2), points=5)
    assert [v for _, v in log.options] == [0.01, 0.1, 1.0, 10.0, 100.0]
    box = sw.as_selection(widgets.Checkbox(value=True, description="mask"))
    assert isinstance(box, widgets.ToggleButtons) and box.value is True
    assert box.description == "mask"
    ints = sw.as_selection(widgets.IntSlider(value=3, min=1, max=8))
    assert [v for _, v in ints.options] == list(range(1, 9)) and ints.value == 3
    drop = widgets.Dropdown(options=["a", "b"])
    assert sw.as_selection(drop) is drop
    assert isinstance(sw.as_selection([1, 2, 3, 4, 5]), widgets.SelectionSlider)
    with pytest.raises(TypeError):
        sw.as_selection(widgets.Text())


def test_nested_stacks_and_links(monkeypatch):
    monkeypatch.setenv("ATTNBOOK_STATIC_WIDGETS", "1")
    calls = []
    box = sw.static_interact(lambda a, b, c: calls.append((a, b, c)), display=False,
                             a=["x", "y"], b=widgets.Dropdown(options=[1, 2, 3], value=2),
                             c=widgets.Checkbox(value=False))
    assert len(calls) == 2 * 3 * 2 and len(set(calls)) == 12
    assert sw.STATIC_CLASS in box._dom_classes
    controls, root = box.children[:-1], box.children[-1]
    levels = _stacks(root)
    assert [len(levels[d]) for d in sorted(levels)] == [1, 2, 6]
    assert all(len(s.children) == n for d, n in zip(sorted(levels), (2, 3, 2))
               for s in levels[d])
    # Every stack of a level follows its control, in the browser (jslink) and at the start.
    links = box.links
    assert len(links) == 1 + 2 + 6
    for control, depth in zip(controls, sorted(levels)):
        for stack in levels[depth]:
            assert stack.selected_index == control.index
            assert any(link.source == (control, "index")
                       and link.target == (stack, "selected_index") for link in links)
    # The leaf reached by the controls' indices is the view drawn for their values.
    leaf = root.children[0].children[1].children[0]
    assert isinstance(leaf, widgets.Output)


def test_views_say_what_they_show_and_controls_are_labelled(monkeypatch):
    """``alt`` gives each view's text (stored with its figures: see the notebook test below);
    no view carries a tooltip, which the HTML manager cannot draw on an Output. Every control
    has a visible label."""
    monkeypatch.setenv("ATTNBOOK_STATIC_WIDGETS", "1")

    def show_step(step, mask):
        pass

    box = sw.static_interact(show_step, display=False, alt="Weights after {step} steps",
                             step=[1, 30], mask=widgets.Checkbox(value=True))
    assert [c.description for c in box.children[:-1]] == ["step", "mask"]
    leaves = [box.children[-1].children[i].children[j] for i in range(2) for j in range(2)]
    assert all(isinstance(v, widgets.Output) and not v.tooltip for v in leaves)
    named = sw.static_interact(show_step, display=False, mask=[True],
                               step=widgets.Dropdown(options=[1, 30], description="steps"))
    assert [c.description for c in named.children[:-1]] == ["mask", "steps"]
    assert sw.alt_text("Weights after {step} steps", {"step": 30}) == "Weights after 30 steps"
    assert sw.alt_text(lambda step: f"{step}!", {"step": 1}) == "1!"
    assert sw.alt_text(None, {"step": 1}) == ""


def test_too_many_views_and_modes(monkeypatch):
    with pytest.raises(ValueError, match="views"):
        sw.static_interact(lambda a, b: None, display=False, a=list(range(20)),
                           b=list(range(20)))
    monkeypatch.setenv("ATTNBOOK_STATIC_WIDGETS", "skip")
    assert sw.static_interact(lambda a: None, display=False, a=[1, 2]) is None
    monkeypatch.setenv("ATTNBOOK_STATIC_WIDGETS", "0")
    live = sw.static_interact(lambda a: None, display=False, a=[1, 2])
    assert isinstance(live, widgets.interactive)
    # ipywidgets before 8.0 has no Stack: live controls on the same values.
    monkeypatch.setenv("ATTNBOOK_STATIC_WIDGETS", "1")
    monkeypatch.delattr(widgets, "Stack")
    live = sw.static_interact(lambda a: None, display=False, a=[1, 2])
    assert isinstance(live, widgets.interactive)
    assert [v for _, v in live.children[0].options] == [1, 2]


def test_views_are_stored_in_the_notebook(tmp_path):
    """Executed like a lab: each Output child holds its own figure and text in the widget state."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "import ipywidgets as widgets\n"
        "import matplotlib.pyplot as plt\n"
        "from attnbook.lab.static_widgets import static_interact\n"
        "def view(n, on):\n"
        "    print(f'n={n} on={on}')\n"
        "    plt.figure(figsize=(2, 1))\n"
        "    plt.plot(range(n + 1))\n"
        "    plt.title(str(on))\n"
        "static_interact(view, dpi=40, alt='A line to {n}, titled {on}',\n"
        "                n=widgets.IntSlider(1, 1, 3),\n"
        "                on=widgets.Checkbox(value=True))\n")]
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True).execute()
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    outputs = [m["state"]["outputs"] for m in state.values() if m["model_name"] == "OutputModel"]
    texts = sorted(o[0]["text"].strip() for o in outputs)
    assert texts == [f"n={n} on={on}" for n in (1, 2, 3) for on in (False, True)]
    pngs = {o[1]["data"]["image/png"] for o in outputs}
    assert len(pngs) == 6  # every view its own figure (shown by the helper, not plt.show)
    assert sum(m["model_name"] == "LinkModel" for m in state.values()) == 1 + 3
    alts = sorted(o[1]["metadata"]["image/png"]["alt"] for o in outputs)
    assert alts == [f"A line to {n}, titled {on}" for n in (1, 2, 3) for on in (False, True)]
    assert not any(m["state"].get("tooltip") for m in state.values())
    assert not nb.cells[0].outputs[0]["data"].get("image/png")  # no stray figure in the cell


def test_labs_use_static_widgets():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        prose = "\n".join("".join(c["source"]) for c in nb["cells"]
                          if c["cell_type"] == "markdown")
        if path.stem in PENDING:
            continue
        assert "widgets.interact(" not in code, f"{path.name}: use static_interact"
        assert "live kernel" not in prose, f"{path.name}: the widget moves without a kernel"
        if "static_interact(" in code:
            state = nb["metadata"].get("widgets", {}).get(
                "application/vnd.jupyter.widget-state+json", {}).get("state", {})
            assert any(sw.STATIC_CLASS in m["state"].get("_dom_classes", [])
                       for m in state.values()), f"{path.name}: run the lab to store its views"


# A change a reader can see: at least this share of a view's figure changes by more than an
# eighth of the colour range. A title or a label alone changes about 0.2 %; Lab 3's old view of
# one weight bar changed 0.2 % from d = 256 to 512 without scaling (both one-hot on key 6).
VISIBLE_SHARE, VISIBLE_LEVEL = 0.005, 32
CHANGES_CHECKED = ["03_scaling"]  # labs whose every control is held to a visible change


@pytest.mark.parametrize("lab", CHANGES_CHECKED)
def test_every_control_changes_what_the_view_draws(lab):
    """For every setting of the other controls, each value of a control draws another figure."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    nb = json.loads((ROOT / "notebooks" / f"{lab}.ipynb").read_text(encoding="utf-8"))
    state = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]

    def ref(model: str) -> str:
        return model.removeprefix("IPY_MODEL_")

    boxes = [m for m in state.values() if sw.STATIC_CLASS in m["state"].get("_dom_classes", [])]
    assert boxes, f"{lab}: no static widget stored"

    def leaves(model_id, chosen=()):
        model = state[model_id]
        if model["model_name"] != "StackModel":
            yield chosen, model["state"]["outputs"]
            return
        for i, child in enumerate(model["state"]["children"]):
            yield from leaves(ref(child), (*chosen, i))

    def figure(outputs):
        (png,) = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB"), int)

    for box in boxes:
        *controls, root = [ref(c) for c in box["state"]["children"]]
        views = {chosen: figure(outputs) for chosen, outputs in leaves(root)}
        sizes = [len(state[c]["state"]["_options_labels"]) for c in controls]
        assert len(views) == np.prod(sizes)
        for k, control in enumerate(controls):
            name = state[control]["state"]["description"]
            for chosen in views:
                for other in range(chosen[k] + 1, sizes[k]):
                    moved = (*chosen[:k], other, *chosen[k + 1:])
                    a, b = views[chosen], views[moved]
                    share = 1.0 if a.shape != b.shape else float(
                        (np.abs(a - b).max(axis=-1) > VISIBLE_LEVEL).mean())
                    assert share >= VISIBLE_SHARE, (
                        f"{lab}: moving {name!r} from {chosen} to {moved} changes "
                        f"{100 * share:.2f} % of the figure: nothing a reader would see")
