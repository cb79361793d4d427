"""Widgets whose controls move on the static site, with no kernel: an ``interact`` that precomputes.

:func:`static_interact` calls the view function once for every combination of control values
(continuous sliders are discretised to a small grid), stores each view in an ``Output`` widget,
and stacks the views in ``Stack`` widgets: one level of stacks per control. Each control's
``index`` is linked in the browser (``jslink``) to the ``selected_index`` of every stack of its
level, so moving a control switches views in JavaScript alone. The saved widget state carries
everything, so the same widget works on the book's pages (the html-manager renders it offline),
in Jupyter and in Colab.

With two controls the structure is::

    VBox(control_0, control_1, Stack_0)
    Stack_0.children[i] = Stack_1[i]           # selected_index <- control_0.index
    Stack_1[i].children[j] = Output(view(i, j)) # selected_index <- control_1.index (every i)

A lab says what each view shows with ``alt`` (a template such as ``"Weights after {step}
steps"``, or a function of the control values): the figures of every view are stored with that
text in their output metadata (``{"image/png": {"alt": ...}}``), which the site's script reads from
the saved state and sets as each figure's alternative text. (Not as the Output's ``tooltip``:
the HTML manager cannot draw an Output that has one.) Without ``alt`` the site names a figure by
its controls' labels and values ("query = 2: sat, divide by = √d"). Controls without a
description are labelled with their argument's name, so that every slider and drop-down has a
visible label and an accessible name.

Where ipywidgets has no ``Stack`` (before 8.0: the lab's setup cell installs attnbook with
``--no-deps`` in Colab, so Colab's own ipywidgets is used), or when ``ATTNBOOK_STATIC_WIDGETS=0``,
the function falls back to a live ``ipywidgets.interactive`` with the same discrete controls.
``ATTNBOOK_STATIC_WIDGETS=skip`` (set by the grading script) draws nothing, to save time.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Sequence

import ipywidgets as widgets

STATIC_CLASS = "attnbook-static-interact"  # the VBox; the browser test and the site's JS use it
VIEWS_CLASS = "attnbook-static-views"  # every Stack of views
MAX_VIEWS = 120  # more views make the page heavy: discretise more coarsely

_SELECTIONS = (widgets.Dropdown, widgets.SelectionSlider, widgets.ToggleButtons,
               widgets.RadioButtons, widgets.Select)


def grid(start: float, stop: float, n: int, log: bool = False, digits: int = 3) -> list[float]:
    """``n`` values from ``start`` to ``stop`` (both included), evenly or log-evenly spaced."""
    if n < 2:
        return [start]
    if log:
        a, b = math.log(start), math.log(stop)
        values = [math.exp(a + (b - a) * i / (n - 1)) for i in range(n)]
    else:
        values = [start + (stop - start) * i / (n - 1) for i in range(n)]
    return [round(v, digits) for v in values]


def _label(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _pairs(options) -> list[tuple[str, object]]:
    """Options as (label, value) pairs, whatever form they were given in."""
    pairs = []
    for option in options:
        if isinstance(option, tuple) and len(option) == 2 and isinstance(option[0], str):
            pairs.append(option)
        else:
            pairs.append((_label(option), option))
    return pairs


def _values(selection) -> tuple:
    """The values a selection widget's index picks from (its labels may differ)."""
    if hasattr(selection, "_options_values"):
        return tuple(selection._options_values)
    return tuple(v for _, v in _pairs(selection.options))


def _nearest(pairs, value) -> int:
    values = [v for _, v in pairs]
    if value in values:
        return values.index(value)
    try:
        return min(range(len(values)), key=lambda i: abs(values[i] - value))
    except TypeError:
        return 0


def as_selection(control, points: int = 7) -> widgets.Widget:
    """A control whose ``index`` picks a view: selection widgets as they are, others converted.

    Args:
        control: an ipywidgets control, or a list of values / (label, value) pairs (a dropdown),
            or a range of numbers (a selection slider).
        points: how many grid points a continuous slider becomes (its value is added if missing).

    Returns:
        A selection widget (Dropdown, SelectionSlider, ToggleButtons, ...) with an ``index``.
    """
    if isinstance(control, _SELECTIONS):
        return control
    style = {"description_width": "initial"}
    if isinstance(control, (list, tuple, range)):
        pairs = _pairs(control)
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for _, v in pairs)
        kind = widgets.SelectionSlider if numeric and len(pairs) > 3 else widgets.Dropdown
        return kind(options=pairs, index=0)
    description = getattr(control, "description", "")
    if isinstance(control, (widgets.Checkbox, widgets.ToggleButton)):
        return widgets.ToggleButtons(options=[("off", False), ("on", True)],
                                     index=int(bool(control.value)), description=description,
                                     style=style)
    if isinstance(control, widgets.IntSlider):
        values = list(range(control.min, control.max + 1, control.step))
        if len(values) > points * 3:
            values = sorted({round(v) for v in grid(control.min, control.max, points)}
                            | {control.value})
    elif isinstance(control, widgets.FloatLogSlider):
        lo, hi = control.base ** control.min, control.base ** control.max
        values = sorted(set(grid(lo, hi, points, log=True)) | {round(control.value, 3)})
    elif isinstance(control, widgets.FloatSlider):
        values = sorted(set(grid(control.min, control.max, points)) | {round(control.value, 3)})
    else:
        raise TypeError(f"static_interact cannot precompute a {type(control).__name__}: "
                        "give a list of values or a selection widget")
    pairs = _pairs(values)
    return widgets.SelectionSlider(options=pairs, index=_nearest(pairs, control.value),
                                   description=description, style=style,
                                   continuous_update=True)


def alt_text(alt, kwargs: dict) -> str:
    """What one view shows, in words: ``alt`` formatted with (or called on) the control values;
    empty without ``alt`` (the site then names the figure by its controls)."""
    if callable(alt):
        return str(alt(**kwargs))
    if isinstance(alt, str):
        return alt.format(**kwargs)
    return ""


def _render(fn: Callable, kwargs: dict, dpi: float | None, alt: str = "") -> widgets.Output:
    """One view: whatever ``fn(**kwargs)`` prints or shows, captured in an Output widget; the
    figures it leaves open are shown with ``alt`` in their metadata."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    out = widgets.Output()
    context = plt.rc_context({"figure.dpi": dpi}) if dpi else _nullcontext()
    metadata = {"image/png": {"alt": alt}} if alt else None
    with out, context:
        fn(**kwargs)
        for number in plt.get_fignums():  # figures the function drew but did not show
            figure = plt.figure(number)
            display(figure, metadata=metadata)
            plt.close(figure)
    return out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _mode() -> str:
    value = os.environ.get("ATTNBOOK_STATIC_WIDGETS", "1").strip().lower()
    if value == "skip":
        return "skip"
    if value in ("0", "false", "no", "live") or not hasattr(widgets, "Stack"):
        return "live"
    return "static"


def static_interact(fn: Callable, /, *, points: int = 7, dpi: float | None = None,
                    display: bool = True, alt: str | Callable | None = None,
                    **controls) -> widgets.Widget | None:
    """Like ``ipywidgets.interact(fn, **controls)``, but every view is computed now.

    Args:
        fn: draws one view (prints, ``plt.show()``, or leaves a figure open) for keyword values.
        points: grid points for each continuous slider.
        dpi: the figures' resolution in the stored views (smaller pages); None keeps the lab's.
        display: show the widget (as ``interact`` does); False only returns it.
        alt: what each view shows, for its figures' alternative text: a template such as
            ``"Weights after {step} steps"`` or a function of the control values (applies to
            the figures ``fn`` leaves open, not to those it shows itself). Without it the site
            describes a figure by its controls' labels and values.
        **controls: one per argument of ``fn``: an ipywidgets control or a list of values.

    Returns:
        The widget: a VBox of the controls and the stack of views, with its jslinks as
        ``.links`` (or the live fallback, or None when skipped).

    Raises:
        ValueError: when the controls make more than ``MAX_VIEWS`` views.
    """
    from IPython.display import display as show

    names = list(controls)
    selections = [as_selection(controls[n], points) for n in names]
    for name, selection in zip(names, selections):
        if not selection.description:  # every control gets a visible label and a name
            selection.description = name
    sizes = [len(s.options) for s in selections]
    total = math.prod(sizes)
    if total > MAX_VIEWS:
        raise ValueError(f"{total} views (sizes {dict(zip(names, sizes))}) is more than "
                         f"{MAX_VIEWS}: use fewer values per control")
    mode = _mode()
    if mode == "skip":
        return None
    if mode == "live":
        box = widgets.interactive(fn, **dict(zip(names, selections)))
        if int(widgets.__version__.split(".")[0]) < 8:
            # ipywidgets 7 (Colab's) draws nothing until a control moves; 8 draws at once.
            box.update()
        if display:
            show(box)
        return box

    values = [list(_values(s)) for s in selections]
    levels: list[list] = [[] for _ in names]

    def build(level: int, chosen: tuple) -> widgets.Widget:
        if level == len(names):
            kwargs = {n: values[i][chosen[i]] for i, n in enumerate(names)}
            return _render(fn, kwargs, dpi, alt_text(alt, kwargs))
        stack = widgets.Stack([build(level + 1, (*chosen, i)) for i in range(sizes[level])],
                              selected_index=selections[level].index)
        stack.add_class(VIEWS_CLASS)
        levels[level].append(stack)
        return stack

    root = build(0, ())
    links = [widgets.jslink((selection, "index"), (stack, "selected_index"))
             for selection, stacks in zip(selections, levels) for stack in stacks]
    box = widgets.VBox([*selections, root])
    box.add_class(STATIC_CLASS)
    box.links = links  # kept with the box (the saved state holds them anyway)
    if display:
        show(box)
    return box


def view_count(**controls) -> int:
    """How many views :func:`static_interact` would store for these controls."""
    return math.prod(len(as_selection(c).options) for c in controls.values())


def combinations(sizes: Sequence[int]):
    """Every index tuple of a stack tree with these sizes, in storage order."""
    return itertools.product(*(range(n) for n in sizes))
