"""Automatic checks for the labs' exercises.

Each chapter has a module here (``attnbook.exercises.<chapter>``) whose ``check_*`` functions
compare a learner's answer with the right one and, when the answer matches a known wrong
variant, name the mistake it looks like.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch


@dataclass
class Feedback:
    """The verdict on one answer: ``ok`` and a message for the learner.

    ``generic`` is True when a wrong answer matched no known mistake (the message only says
    how it differs): then, and only then, may a wrong answer on a second input be something
    typed in or fixed to the lab's input.
    """

    ok: bool
    message: str
    generic: bool = False

    def __repr__(self) -> str:
        return self.message

    def __bool__(self) -> bool:
        return self.ok


def same_values(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    """True when ``a`` and ``b`` have one shape and ``allclose`` values (compared in float64)."""
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol)


def check_tensor(answer, expected: torch.Tensor, mistakes: Mapping[str, torch.Tensor] | None = None,
                 name: str = "answer", atol: float = 1e-4, rtol: float = 1e-4) -> Feedback:
    """Compare ``answer`` with ``expected``; if wrong, say which known mistake it matches.

    Args:
        answer: the learner's tensor (anything ``torch.as_tensor`` accepts).
        expected: the right answer.
        mistakes: a description of each typical mistake -> the tensor that mistake produces.
        name: what the answer is, for the messages.
        atol, rtol: tolerances for ``torch.allclose``.

    Returns:
        Feedback whose message starts with "Correct" or "Not yet".
    """
    if answer is None or answer is Ellipsis:
        return Feedback(False, f"Not yet: {name} is still empty. Replace the ... with your code.")
    try:
        given = answer
        answer = torch.as_tensor(given).detach().cpu()
        if not isinstance(given, torch.Tensor) and answer.is_floating_point():
            answer = torch.as_tensor(given, dtype=torch.float64)  # Python floats are float64
    except (TypeError, ValueError, RuntimeError) as err:
        kind = type(answer).__name__
        return Feedback(False, f"Not yet: {name} should be a tensor, got {kind} ({err})")
    expected = expected.detach().cpu()
    if same_values(answer, expected, atol, rtol):
        return Feedback(True, f"Correct: {name} matches.")
    matched = [mistake for mistake, wrong in (mistakes or {}).items()
               if same_values(answer, wrong.detach().cpu(), atol, rtol)]
    if len(matched) == 1:
        return Feedback(False, f"Not yet: {name} looks like {matched[0]}.")
    if matched:  # on this input several mistakes give the same answer: name each
        return Feedback(False, f"Not yet: {name} looks like {matched[0]}. (On this input the "
                               "same answer also comes from " + "; and from ".join(matched[1:])
                               + ".)")
    if answer.shape != expected.shape:
        return Feedback(False, f"Not yet: {name} has shape {tuple(answer.shape)}, "
                               f"expected {tuple(expected.shape)}.", generic=True)
    low = _low_precision(given, expected)
    if low and same_values(answer, expected, atol=64 * torch.finfo(low).eps
                           * max(1.0, expected.double().abs().max().item()),
                           rtol=64 * torch.finfo(low).eps):
        err = (answer.double() - expected.double()).abs().max().item()
        kind = str(low).removeprefix("torch.")
        return Feedback(False, f"Not yet: {name} is right only to {kind}'s precision (off by "
                               f"up to {err:.2g}): it was computed in {kind}. Keep the "
                               f"inputs' float64 (no .float() or float32 tensors of your own).")
    if torch.isnan(answer).any() and not torch.isnan(expected).any():
        return Feedback(False, f"Not yet: {name} contains NaN.", generic=True)
    if expected.dtype == torch.bool:  # a mask: how many entries differ, and where
        return Feedback(False, _bool_difference(answer, expected, name), generic=True)
    # Compare where the infinities are before the values: a right answer may hold -inf too.
    for sign, inf in (("-inf", float("-inf")), ("inf", float("inf"))):
        extra = ((answer == inf) & (expected != inf)).sum().item()
        lacking = ((answer != inf) & (expected == inf)).sum().item()
        entries = lambda n: "entry" if n == 1 else "entries"  # noqa: E731
        if extra and lacking:
            return Feedback(False, f"Not yet: {name} has {sign} in {extra} {entries(extra)} "
                                   f"where the right answer does not, and lacks it in {lacking} "
                                   f"{entries(lacking)} where it should have it.", generic=True)
        if extra:
            return Feedback(False, f"Not yet: {name} has {sign} in {extra} {entries(extra)} "
                                   f"where the right answer does not (an overflow, or too "
                                   f"much masked?).", generic=True)
        if lacking:
            return Feedback(False, f"Not yet: {name} lacks {sign} in {lacking} "
                                   f"{entries(lacking)} where the right answer has it "
                                   f"(something left unmasked, or masked with a finite "
                                   f"number?).", generic=True)
    finite = torch.isfinite(expected)
    if not finite.all():  # the infinities agree: compare the finite entries
        answer, expected = answer[finite], expected[finite]
    err = (answer.double() - expected.double()).nan_to_num(nan=float("inf")).abs().max().item()
    return Feedback(False, f"Not yet: {name} has the right shape but differs by up to {err:.3g}.",
                    generic=True)


def _low_precision(given, expected: torch.Tensor) -> torch.dtype | None:
    """The dtype of a float ``given`` tensor less precise than float64 ``expected``, else None."""
    if isinstance(given, torch.Tensor) and expected.dtype == torch.float64 \
            and given.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return given.dtype
    return None


def _bool_difference(answer: torch.Tensor, expected: torch.Tensor, name: str) -> str:
    """How a True/False answer differs from the right one: how many entries, and the first few
    of each kind by index (a difference "by up to 1" says nothing about a mask)."""
    given = answer.bool() if answer.dtype == torch.bool or not answer.is_floating_point() \
        else answer != 0
    wrong = given != expected
    n, total = int(wrong.sum()), expected.numel()

    def where(kind: torch.Tensor) -> str:
        idx = [tuple(i) if len(i) > 1 else i[0] for i in kind.nonzero().tolist()]
        shown = ", ".join(str(i) for i in idx[:4])
        return shown + (", ..." if len(idx) > 4 else "")

    extra, missing = wrong & given, wrong & ~given
    parts = []
    if extra.any():
        parts.append(f"True where the right answer is False at {where(extra)}")
    if missing.any():
        parts.append(f"False where the right answer is True at {where(missing)}")
    return (f"Not yet: {name} has the right shape but differs in {n} of {total} entries: "
            + "; ".join(parts) + ".")


def check_number(answer, right: float, mistakes: Mapping[str, float] | None = None,
                 name: str = "answer", rtol: float = 1e-9) -> Feedback:
    """:func:`check_tensor` for a single number, such as a count of bytes or FLOPs.

    Args:
        answer: the learner's number.
        right: the right number.
        mistakes: a description of each typical mistake -> the number it produces.
        name: what the answer is, for the messages.
        rtol: relative tolerance (exact counts by default).
    """
    # float64: a count above 2**24 (bytes, FLOPs) is exact there, not in float32.
    as_tensor = lambda v: torch.tensor(float(v), dtype=torch.float64)  # noqa: E731
    return check_tensor(answer, as_tensor(right),
                        {k: as_tensor(v) for k, v in (mistakes or {}).items()},
                        name=name, atol=0.0, rtol=rtol)


@dataclass(frozen=True)
class HiddenCase:
    """One input the grader calls a learner's function with: ``fn(*call)``, then
    ``check(answer, *check_args)``."""

    call: tuple
    check_args: tuple
    label: str  # how the feedback names the case, e.g. "T = 7"


@dataclass(frozen=True)
class FunctionExercise:
    """An exercise phrased as a function, so that a grader can test it on inputs the learner never
    saw (scripts/grading calls it in the learner's kernel and judges the result in its own
    process with the pristine ``check``).

    Args:
        function: the name the learner defines in the exercise cell, e.g. ``"masked_scores"``.
        check: the lab's checker, ``check(answer, *case.check_args) -> Feedback``.
        cases: ``cases(generator) -> [HiddenCase, ...]``; the grader seeds the generator with a
            number the notebook does not contain, and works in float64 unless a case says
            otherwise (float32 where the exercise is about float32).
        forbidden: names the function may not use, the prompt's method limits (e.g. ``softmax``);
            matched against the names its code refers to, helpers it calls included, and the
            own names of what those refer to (a function imported under another name). A name
            with a leading underscore (a library's private helper) is caught, not listed.
        required: names the function must use, where the exercise asks for a way of computing
            the answer that its value alone cannot show (a mask_mod given to
            ``allowed_matrix``).
    """

    function: str
    check: Callable[..., Feedback]
    cases: Callable[[torch.Generator], list[HiddenCase]]
    forbidden: tuple[str, ...] = field(default=())
    required: tuple[str, ...] = field(default=())


def hidden_cases(spec: FunctionExercise, seed: int) -> list[HiddenCase]:
    """The hidden cases of ``spec`` for ``seed`` (the same seed gives the same cases).

    Args:
        spec: the exercise.
        seed: any integer; a grader draws it at grading time.

    Returns:
        The cases, with every tensor on the CPU.
    """
    generator = torch.Generator().manual_seed(seed)
    return spec.cases(generator)


# The registry of diagnoses: read from the checkers' own source, so it never goes stale.


def _text(node) -> str | None:
    """A string literal, f-string (placeholders shown as ⟨expr⟩) or sum of them, as text."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else f"⟨{ast.unparse(v.value)}⟩"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return None if left is None or right is None else left + right
    return None


def _diagnoses_of(function) -> list[str]:
    """The mistakes one ``check_*`` function names: its ``mistakes`` keys and its own verdicts."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    found: list[tuple[int, int, str]] = []  # (line, column, text): in source order

    def add(node):
        text = _text(node)
        if text and not text.startswith(("Correct", "Not yet: ⟨")):
            found.append((node.lineno, node.col_offset, text.removeprefix("Not yet: ").strip()))

    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):  # a dict literal of mistakes
            for key in node.keys:
                if key is not None and _text(key):
                    add(key)
        elif isinstance(node, ast.Assign):  # mistakes["..."] = ...
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _text(target.slice):
                    add(target.slice)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "Feedback" and len(node.args) == 2
              and isinstance(node.args[0], ast.Constant) and node.args[0].value is False):
            add(node.args[1])  # a verdict the check gives itself
    texts: list[str] = []
    for _, _, text in sorted(found):
        if text not in texts:
            texts.append(text)
    return texts


def diagnoses(module: str | None = None) -> dict[str, dict[str, list[str]]]:
    """Every checker's recognised mistakes, read from its source.

    Args:
        module: one chapter module (e.g. ``"scaling"``); None for all of them.

    Returns:
        {module: {check name: [description of each mistake it recognises]}}; ⟨expr⟩ marks
        a part of a message that the check fills in (a width, a length).
    """
    import importlib
    import inspect
    import pkgutil

    names = [module] if module else sorted(m.name for m in pkgutil.iter_modules(__path__))
    registry = {}
    for name in names:
        mod = importlib.import_module(f"{__name__}.{name}")
        checks = {n: f for n, f in inspect.getmembers(mod, inspect.isfunction)
                  if n.startswith("check_") and f.__module__ == mod.__name__}
        registry[name] = {n: _diagnoses_of(f) for n, f in sorted(
            checks.items(), key=lambda item: inspect.getsourcelines(item[1])[1])}
    return registry


# Practice checks that agree with the grade: the same method limits and a second input.

PRACTICE_SEED = 20240601  # the second inputs of the practice checks (the grader draws its own)


def names_used(function, namespace: Mapping, depth: int = 0, seen: set | None = None) -> set:
    """Every global and attribute name ``function``'s code refers to, the notebook's own helper
    functions included (the rule scripts/grading applies to a hand-in, here in the notebook)."""
    import types

    seen = set() if seen is None else seen
    if depth > 4 or id(function) in seen or not hasattr(function, "__code__"):
        return set()
    seen.add(id(function))
    found, codes = set(), [function.__code__]
    while codes:
        code = codes.pop()
        found.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    home = namespace.get("__name__", "__main__")
    # The objects it holds as defaults or closes over count as names too.
    held = [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values(),
            *(c.cell_contents for c in (function.__closure__ or ())
              if _filled(c))]
    for name in list(found):
        helper = namespace.get(name)
        if isinstance(helper, types.FunctionType) and helper.__module__ == home:
            found |= names_used(helper, namespace, depth + 1, seen)
    # A name imported under another one (``from attnbook.positions import apply_rope as ar``)
    # counts under its own name as well.
    for value in [namespace.get(name) for name in list(found)] + held:
        own = getattr(value, "__name__", None) if callable(value) else None
        if isinstance(own, str):
            found.add(own)
        if isinstance(value, types.FunctionType) and value.__module__ == home:
            found |= names_used(value, namespace, depth + 1, seen)
    return found


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # an empty closure cell
        return False
    return True


def _on(value, device):
    """``value`` with every tensor in it moved to ``device`` (tuples and lists followed)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_on(v, device) for v in value)
    return value


def lab_device(*values) -> torch.device | None:
    """Where the lab's input lives: the device of the first tensor among ``values`` (tuples and
    lists followed), or None."""
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, (tuple, list)):
            found = lab_device(*value)
            if found is not None:
                return found
    return None


def practice_verdict(spec: FunctionExercise, feedback: Feedback, namespace: Mapping,
                     device: torch.device | None = None) -> Feedback:
    """The check's verdict in the notebook, held to the grade's rules.

    A right answer is "Correct" only if the learner's function (``spec.function`` in
    ``namespace``, the notebook) uses nothing the exercise rules out and is also right on a
    second input (the exercise's cases for :data:`PRACTICE_SEED`); otherwise the verdict is
    "Right values, but ...", which scores 0 when graded, as the grader would judge it.

    Args:
        spec: the exercise.
        feedback: the check's verdict on the lab's own input.
        namespace: the globals of the cell that called the check.
        device: where the lab's input to the check lives (CUDA on a Colab GPU); the second
            input goes there too, so a function that builds its own tensors on the lab's
            ``device`` is judged on its values, as the grader (on a CPU) judges it.

    Returns:
        ``feedback``, or a verdict that is not ok and says why.
    """
    fn = namespace.get(spec.function)
    if not feedback.ok:
        return feedback  # a wrong answer says why already
    if not callable(fn):
        if namespace.get("__name__") != "__main__":
            return feedback  # called from a module (a test), not from a notebook's cell
        # The answer was computed without the function (its def deleted or renamed): the
        # grader calls the function, finds none and scores 0, so "Correct" would be a lie.
        return Feedback(False, f"Right values, but the function {spec.function} is not defined "
                               "here: graded, the exercise calls it on other inputs, so without "
                               f"it the exercise scores 0. Keep `def {spec.function}(...)` and "
                               "compute the answer by calling it.")
    names = names_used(fn, namespace)
    used = sorted(names & set(spec.forbidden))
    if used:
        return Feedback(False, f"Right values, but {spec.function} uses {', '.join(used)}, "
                               "which the exercise rules out: graded, it scores 0. Write it "
                               "from the operations the exercise names.")
    missing = [n for n in spec.required if n not in names]
    if missing:
        return Feedback(False, f"Right values, but {spec.function} does not use "
                               f"{', '.join(missing)}, which the exercise asks for: graded, it "
                               "scores 0. Compute the answer the way the exercise says.")
    for case in hidden_cases(spec, PRACTICE_SEED):
        call = case.call if device is None or device.type == "cpu" else _on(case.call, device)
        try:
            result = fn(*call)
        except Exception as err:  # noqa: BLE001 (the learner's code may raise anything)
            second = Feedback(False, f"it raised {type(err).__name__}: {err}.")
        else:
            second = spec.check(result, *case.check_args)
        if not second.ok:
            # "Typed in?" only when no known mistake or error explains the miss.
            guess = (" Is something typed in or fixed to the lab's input?"
                     if second.generic else "")
            return Feedback(False, f"Right values on the lab's input, but not on a second "
                                   f"input ({case.label}): "
                                   f"{second.message.removeprefix('Not yet: ')}{guess} Graded, "
                                   f"{spec.function} is called on inputs like this one.")
    return feedback


def practise(graded: Mapping[str, FunctionExercise], namespace: dict) -> None:
    """Make each ``check_*`` in ``namespace`` (an exercise module's globals) that ``graded``
    phrases as a function apply the grade's rules when a notebook calls it
    (:func:`practice_verdict`). ``graded[name].check`` stays the plain check the grader uses.
    """
    for name, spec in graded.items():
        plain = namespace[name]

        def check(answer, *args, _spec=spec, _plain=plain, **kwargs):
            feedback = _plain(answer, *args, **kwargs)
            caller = sys._getframe(1).f_globals  # the notebook cell's namespace
            device = lab_device(*args, *kwargs.values())  # the lab's input, not the answer
            return practice_verdict(_spec, feedback, caller, device)

        namespace[name] = functools.wraps(plain)(check)
