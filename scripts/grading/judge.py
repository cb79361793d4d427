"""Verdicts in the grader's own process: pristine checkers, hidden inputs, flags.

Nothing here runs the learner's code. It reads what the kernel captured (tensors through
``torch.load(weights_only=True)``) and the notebook's source, and decides.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import types
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
import torch

from .execute import Capture, Run
from .labs import OTTER_KEY, Exercise, is_solution, retag

POINTS = Path(__file__).resolve().parent / "points.toml"


@dataclass
class Flag:
    """Something the instructor should know about a notebook, with a short code for the CSV."""

    code: str  # e.g. "solutions-present", "tamper", "out-of-order"
    text: str  # one sentence for the feedback file
    review: bool = True  # False: for information only (e.g. a renamed kernel, handled)


@dataclass
class Verdict:
    """One exercise's score and feedback."""

    name: str
    points: float
    possible: float
    message: str
    flags: list[str] = field(default_factory=list)
    said: str = ""  # the last line the exercise cell printed when graded (its practice check)


def config(path: Path = POINTS) -> dict:
    """points.toml, read once per run."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def exercise_config(cfg: dict, lab: str, name: str) -> dict:
    """The points, time limit and partial-credit rule of one exercise."""
    return {**cfg["defaults"], **cfg.get("labs", {}).get(lab, {}).get(name, {})}


def pristine_functions() -> dict[str, str]:
    """Every function of the attnbook package: qualname -> the file its code comes from
    (past decorators such as ``torch.no_grad``).

    Called before any notebook runs, which also imports every checker into the grader.
    """
    import pkgutil

    import attnbook
    import attnbook.exercises

    found = {}
    for info in pkgutil.walk_packages(attnbook.__path__, "attnbook."):
        if info.name in ("attnbook.gpu.kernels", "attnbook.gpu.compile_check"):
            continue  # the kernels need Triton, which the grader's process need not import
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for name, fn in vars(module).items():
            if isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = inspect.unwrap(fn).__code__.co_filename
    return found


def spec_of(ex: Exercise):
    """The exercise as a function (attnbook.exercises.<module>.GRADED), or None."""
    if not ex.function:
        return None
    spec = getattr(importlib.import_module(ex.module), "GRADED", {}).get(ex.check)
    return spec if spec is not None and spec.function == ex.function else None


def case_seed(seed: int, lab: str, name: str) -> int:
    """A seed per exercise from the run's seed: the cases differ between exercises and runs."""
    return zlib.crc32(f"{seed}:{lab}:{name}".encode())


def split_call(call: str) -> tuple[list[str], dict[str, str]]:
    """The check call's arguments after the answer, as source: ``(args, kwargs)``."""
    node = ast.parse(call, mode="eval").body
    args = [ast.get_source_segment(call, a) for a in node.args[1:]]
    return args, {k.arg: ast.get_source_segment(call, k.value) for k in node.keywords}


def strip_solutions(nb) -> tuple[object, int]:
    """The notebook without solution cells (the book's lab opened from the site has them)."""
    nb = copy.deepcopy(nb)
    before = len(nb.cells)
    nb.cells = [c for c in nb.cells if not is_solution(c)]
    return nb, before - len(nb.cells)


def graded_cells(nb, exercises) -> dict[str, int]:
    """exercise name -> index of the cell where it is complete (retagged as Otter does)."""
    retag(nb, exercises)
    return {t: i for i, c in enumerate(nb.cells)
            for t in c.metadata.get(OTTER_KEY, {}).get("tests", [])}


def plan(nb, lab: str, exercises, cfg: dict, seed: int) -> tuple[list[Capture], dict]:
    """What to capture while ``nb`` runs, and the hidden inputs of each exercise.

    Args:
        nb: the notebook as it will run (solution cells removed).
        lab: the lab's name.
        exercises: the lab's exercises, from the book's lab.
        cfg: points.toml.
        seed: the run's seed; each exercise's cases use a seed derived from it.

    Returns:
        (one Capture per exercise found, {exercise: its HiddenCase list}).
    """
    from attnbook.exercises import hidden_cases

    cells = graded_cells(nb, exercises)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    captures, cases = [], {}
    for ex in exercises:
        spec = spec_of(ex)
        # A function is found by its name wherever it was defined: if its exercise cell is gone,
        # grade it at the end. A value is not (the labs reuse the name answer).
        at_end = ex.name not in cells and spec is not None and bool(code)
        if ex.name not in cells and not at_end:
            continue
        args, kwargs = split_call(ex.call)
        hidden = hidden_cases(spec, case_seed(seed, lab, ex.name)) if spec else []
        cases[ex.name] = hidden
        conf = exercise_config(cfg, lab, ex.name)
        captures.append(Capture(ex.name, code[-1] if at_end else cells[ex.name], ex.variable,
                                args, kwargs, float(conf["seconds"]), float(conf["case_seconds"]),
                                spec.function if spec else None, [c.call for c in hidden],
                                at_end=at_end))
    return captures, cases


def _value(item):
    """A captured value back as Python/torch; the kind for what could not be captured."""
    kind = item.get("kind")
    if kind == "tensor":
        return item["value"]
    if kind == "plain":
        return item["value"]
    if kind == "ellipsis":
        return Ellipsis
    if kind == "sequence":
        items = [_value(i) for i in item["items"]]
        return tuple(items) if item.get("type") == "tuple" else items
    return item.get("repr", kind)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def _parse(source: str):
    """A cell's AST, with IPython's ! and % lines blanked; None if it is not Python."""
    lines = [line[: len(line) - len(line.lstrip())] + "pass"
             if line.lstrip().startswith(("!", "%")) else line for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _root(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


# Modules whose attributes a notebook may read but never assign: the library and what its checks
# and the labs compute with. ``torch.allclose = lambda *a, **k: True`` or
# ``torch.Tensor.__eq__ = ...`` in a kernel changes what every comparison there says.
GUARDED = ("attnbook", "torch", "numpy", "builtins", "math", "sys", "importlib", "inspect",
           "signal", "types")
# Settings a lab may change (TF32 off): they choose a precision, they do not replace code.
SETTINGS = ("torch.backends.",)


def _guarded(full: str) -> bool:
    return full.split(".")[0] in GUARDED


def tampering_lines(nb) -> list[str]:
    """Lines of the notebook that replace a checker or change an imported module or class.

    Found in the source, so they are reported with their cell even when they had no effect:
    assignments (``=``, ``+=``, ``del``) to ``check_*`` names or attributes, or to any
    attribute of an imported module or class of attnbook, torch, numpy, builtins (and a few
    standard modules the grader's capture uses) -- ``torch.allclose = ...``,
    ``torch.Tensor.__eq__ = ...``, ``from torch import Tensor; Tensor.__eq__ = ...``,
    ``__builtins__.print = ...`` --; ``def check_*``; ``setattr``, ``delattr``,
    ``sys.modules[...] =`` and ``importlib.reload``.
    """
    aliases, hits = {"__builtins__"}, []
    trees = [_parse(c.source) if c.cell_type == "code" else None for c in nb.cells]
    for tree in trees:  # every cell's imports first: a cell may use an alias imported below it
        for node in ast.walk(tree) if tree is not None else []:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if _guarded(a.name):
                        aliases.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and _guarded(node.module):
                for a in node.names:  # a module (torch.nn) or a class (torch.Tensor), not check_*
                    if not a.name.startswith("check_") and a.name != "*":
                        aliases.add(a.asname or a.name)
    for i, (cell, tree) in enumerate(zip(nb.cells, trees)):
        if tree is None:
            continue
        for node in ast.walk(tree):
            bad = False
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                           else [node.target])
                for target in targets:
                    if ast.unparse(target).startswith(SETTINGS):
                        continue
                    for t in ast.walk(target):
                        if isinstance(t, ast.Name) and t.id.startswith("check_"):
                            bad = True
                        elif isinstance(t, ast.Attribute) and (
                                t.attr.startswith("check_") or _root(t) in aliases):
                            bad = True
                        elif (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute)
                              and t.value.attr in ("modules", "__dict__")):
                            bad = True
            elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and getattr(
                    node, "name", "").startswith("check_"):
                bad = True
            elif isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
                    node.func, "id", "")
                bad = name in ("setattr", "delattr", "reload", "__setattr__", "__delattr__")
            if bad:
                line = cell.source.splitlines()[node.lineno - 1].strip()
                hits.append(f"cell {i}: `{line[:80]}`")
    return list(dict.fromkeys(hits))


def source_flags(nb) -> list[Flag]:
    """What the notebook's own source and saved state say: tampering, order, kernel.

    Args:
        nb: the notebook as handed in.

    Returns:
        Flags "tamper", "never-run" or "out-of-order", and "kernel", as they apply.
    """
    flags = []
    hits = tampering_lines(nb)
    if hits:
        more = f" and {len(hits) - 4} more" if len(hits) > 4 else ""
        flags.append(Flag("tamper", "The notebook redefines a checker or changes a module or "
                          f"class it imports ({'; '.join(hits[:4])}{more}). Grading used the "
                          "grader's own copy of every check, in its own process, so this "
                          "changed no score; please look at it."))
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code"]
    run = [n for n in counts if n is not None]
    if not run:
        flags.append(Flag("never-run", "The notebook was handed in without being run; the "
                          "grader ran it.", review=False))
    elif run != sorted(run) or len(set(run)) != len(run):
        k = next(i for i in range(1, len(run)) if run[i] <= run[i - 1])
        shown = ", ".join(f"[{n}]" for n in run[max(0, k - 2): k + 2])
        flags.append(Flag("out-of-order", "The saved notebook was run out of order (execution "
                          f"counts, top to bottom: … {shown} …); it was graded as run top to "
                          "bottom in a fresh kernel."))
    kernel = nb.metadata.get("kernelspec", {}).get("name", "python3")
    if kernel != "python3":
        flags.append(Flag("kernel", f"The notebook asks for the kernel {kernel!r}; it was run "
                          "with python3.", review=False))
    return flags


def saved_correct(nb, exercises) -> set[str]:
    """Exercises whose saved output (the learner's own run, solution cells aside) says Correct."""
    nb, _ = strip_solutions(nb)
    cells = graded_cells(nb, exercises)
    said = set()
    for name, i in cells.items():
        text = "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                       for o in nb.cells[i].get("outputs", []))
        if "Correct" in text:
            said.add(name)
    return said


def _normalise(source: str) -> str | None:
    """A function's code without comments, docstring or layout, to compare two versions."""
    try:
        tree = ast.parse(inspect.cleandoc(source) if source.startswith(" ") else source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.body and isinstance(
                node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


def published_solutions(lab_nb, exercises) -> dict[str, str]:
    """exercise -> the normalised function of its solution cell in the book's lab."""
    out = {}
    for ex in exercises:
        if not ex.function:
            continue
        for i in ex.solutions:
            tree = ast.parse(lab_nb.cells[i].source)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == ex.function:
                    out[ex.name] = _normalise(ast.get_source_segment(lab_nb.cells[i].source, node))
    return out


def judge(lab: str, exercises, run: Run, cases: dict, cfg: dict, reference: Run | None,
          said_correct: set[str], solutions: dict[str, str]) -> tuple[list[Verdict], list[Flag]]:
    """Score every exercise of one notebook with the pristine checkers.

    Args:
        lab: the lab's name.
        exercises: the lab's exercises (from the book's lab).
        run: what running the learner's notebook captured.
        cases: exercise -> its hidden cases (for exercises phrased as functions).
        cfg: points.toml.
        reference: the untouched student edition's run (the given inputs), for exercises
            that are not functions; None when every exercise is one.
        said_correct: exercises whose saved output said Correct.
        solutions: exercise -> the published solution's function, normalised.

    Returns:
        One verdict per exercise, and the flags the captures raised.
    """
    verdicts, flags, tamper = [], [], []
    for ex in exercises:
        conf = exercise_config(cfg, lab, ex.name)
        possible = float(conf["points"])
        captured, event = run.captured.get(ex.name), run.events.get(ex.name)
        said = (run.said.get(ex.name) or "").strip().splitlines()
        v = Verdict(ex.name, 0.0, possible, "", said=said[-1][:200] if said else "")
        if captured is None:
            note = run.note[:1].lower() + run.note[1:]
            v.message = (f"Not graded: {event}." if event else f"Not graded: {note}"
                         if run.note else "Not graded: the exercise cell was not found "
                         "(deleted or renamed?).")
            verdicts.append(v)
            continue
        tamper += [t for t in captured.get("tamper", []) if t not in tamper]
        module = importlib.import_module(ex.module)
        check = getattr(module, ex.check)  # the grader's copy, loaded before any notebook ran
        spec = spec_of(ex)
        if spec is not None:
            _judge_function(v, ex, spec, captured, cases.get(ex.name, []), conf, solutions)
        else:
            _judge_value(v, ex, check, captured, reference)
        if event:  # the cell timed out: nothing else to say about it
            v.points = 0.0
            v.message = f"Not graded: {event}."
        if ex.name in run.at_end:
            v.message += (" (Its exercise cell was not found, deleted or changed: the function "
                          "was graded as the notebook defines it at its end.)")
        if ex.name in run.raised and v.points < v.possible:
            v.message += f" (Your exercise cell raised {run.raised[ex.name]}.)"
        if ex.name in said_correct and v.points < v.possible:
            v.message += (" Your saved notebook shows “Correct” here, but run top to bottom in a "
                          "fresh kernel it is not: were the cells run out of order? Restart and "
                          "run all before you hand in.")
        verdicts.append(v)
    if tamper:
        flags.append(Flag("tamper", "While the notebook ran, " + "; ".join(tamper[:4]) +
                          ". Grading used the grader's own copy of every check, so this changed "
                          "no score; please look at it."))
    return verdicts, flags


def _judge_function(v: Verdict, ex, spec, captured: dict, cases, conf: dict,
                    solutions: dict[str, str]) -> None:
    fn = captured.get("function") or {}
    if not fn.get("defined"):
        v.message = (f"Not yet: the function {ex.function} is not defined when the exercise "
                     "cell has run (renamed or deleted?).")
        return
    used = sorted(set(fn.get("names", [])) & set(spec.forbidden))
    if used:
        v.message = (f"Not graded: {ex.function} uses {', '.join(used)}, which the exercise "
                     "rules out; write it from the operations the exercise names.")
        v.flags.append("method")
        return
    missing = [n for n in getattr(spec, "required", ()) if n not in fn.get("names", [])]
    if missing:
        v.message = (f"Not graded: {ex.function} does not use {', '.join(missing)}, which the "
                     "exercise asks for; compute the answer the way the exercise says.")
        v.flags.append("method")
        return
    results = fn.get("results", [])
    if results and all(r.get("kind") == "ellipsis" for r in results):
        v.message = f"Not answered: {ex.function} still returns `...`."
        return
    passed, first_wrong = 0, None
    for case, result in zip(cases, results):
        generic = False  # no known mistake or error explains it
        if result.get("kind") == "error":
            feedback = f"it raised {result['repr'].rstrip('.')}."
        else:
            fb = spec.check(_value(result), *case.check_args)
            if fb.ok:
                passed += 1
                continue
            feedback, generic = fb.message, getattr(fb, "generic", True)
        first_wrong = first_wrong or (case.label, feedback, generic)
    n = len(cases)
    if passed == n:
        v.points = v.possible
        v.message = f"Correct on all {n} hidden inputs."
    else:
        share = passed / n if conf.get("partial", False) else 0.0
        v.points = round(v.possible * share, 2)
        v.message = (f"Right on {passed} of {n} hidden inputs. On {first_wrong[0]}: "
                     f"{first_wrong[1]}")
        visible = captured.get("answer", {})
        # Hard-coded? Only asked when no named mistake explains the misses (issue 48).
        if passed == 0 and first_wrong[2] and visible.get("kind") in ("tensor", "plain"):
            args = [_value(a) for a in captured.get("args", [])]
            kwargs = {k: _value(a) for k, a in captured.get("kwargs", {}).items()}
            try:
                on_lab = spec.check(_value(visible), *args, **kwargs).ok
            except Exception:
                on_lab = False
            if on_lab:
                v.message += (" (It is right on the lab's own input only, as the notebook left "
                              "it: is the answer hard-coded, or were the given inputs changed?)")
                v.flags.append("hard-coded")
    source = fn.get("source", "")
    if source and solutions.get(ex.name) and _normalise(source) == solutions[ex.name]:
        v.flags.append("published-solution")
        v.message += " (The function is the book's published solution, verbatim.)"


def _judge_value(v: Verdict, ex, check, captured: dict, reference: Run | None) -> None:
    answer = _value(captured.get("answer", {"kind": "missing"}))
    if captured.get("answer", {}).get("kind") == "missing":
        v.message = (f"Not yet: {ex.variable} is not defined when the exercise cell has run.")
        return
    mine = [_value(a) for a in captured.get("args", [])]
    mine_kw = {k: _value(a) for k, a in captured.get("kwargs", {}).items()}
    ref = (reference.captured.get(ex.name) if reference is not None else None) or None
    args, kwargs = mine, mine_kw
    if ref is not None:
        given = [_value(a) for a in ref.get("args", [])]
        given_kw = {k: _value(a) for k, a in ref.get("kwargs", {}).items()}
        names = split_call(ex.call)
        changed = [names[0][i] for i, (a, b) in enumerate(zip(mine, given)) if not _same(a, b)]
        changed += [k for k in given_kw if not _same(mine_kw.get(k), given_kw[k])]
        args, kwargs = given, given_kw  # judge against what was handed out
        if changed:
            v.flags.append("inputs-changed")
            v.message = (f"The given input{'s' if len(changed) > 1 else ''} "
                         f"{', '.join(changed)} differ{'' if len(changed) > 1 else 's'} from the "
                         "handed-out one (overwritten, or an extra cell used the random "
                         "generator); the answer was checked against the handed-out inputs. ")
    try:
        fb = check(answer, *args, **kwargs)
    except Exception as err:  # the check itself could not run on this answer
        v.message += f"Not yet: the check could not use the answer ({type(err).__name__}: {err})."
        return
    v.points = v.possible if fb.ok else 0.0
    v.message += fb.message
