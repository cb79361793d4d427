"""Code the grader sends into the learner's kernel after each exercise (not imported there).

The grader reads this file's source, runs it in the kernel (silently, so the learner's history
and ``_`` stay as they were), calls ``_attnbook_capture(params)`` and deletes its names again.
It only *collects*: the answer, the check's other inputs, the learner's function called on the
hidden inputs, the names that function uses, and whether the checkers in the kernel are still the
library's. Every verdict is made afterwards, in the grader's process, by the pristine checkers,
so code in the notebook that replaces a checker changes what is reported, never the score.
"""


def _attnbook_capture(params):
    import inspect
    import signal
    import sys
    import types

    import torch

    ns = globals()  # this function is defined in the notebook's namespace

    def safe(value):
        """A value torch.save can store and torch.load(weights_only=True) can read back."""
        if value is Ellipsis:
            return {"kind": "ellipsis"}
        if isinstance(value, torch.Tensor):
            return {"kind": "tensor", "value": value.detach().cpu().clone()}
        if (isinstance(value, tuple) and isinstance(getattr(value, "values", None), torch.Tensor)
                and isinstance(getattr(value, "indices", None), torch.Tensor)
                and value.values.shape == value.indices.shape):  # torch.max/cummax's pair
            return {"kind": "tensor", "value": torch.stack(
                [value.values.detach().cpu().double(), value.indices.detach().cpu().double()])}
        if isinstance(value, (bool, int, float, str)) or value is None:
            return {"kind": "plain", "value": value}
        try:
            return {"kind": "tensor", "value": torch.as_tensor(value).detach().cpu().clone()}
        except Exception:
            pass
        if isinstance(value, (tuple, list)) and len(value) <= 64:
            # Several tensors (a pair of outputs): kept as they are, so the grader's check gets
            # what the notebook's check got, and says the same of it.
            return {"kind": "sequence", "type": type(value).__name__,
                    "items": [safe(item) for item in value]}
        return {"kind": "other", "repr": f"{type(value).__name__}: {repr(value)[:200]}"}

    def names_used(function, depth=0, seen=None):
        """Every global and attribute name the function's code refers to, helpers included."""
        seen = set() if seen is None else seen
        if depth > 4 or id(function) in seen or not hasattr(function, "__code__"):
            return set()
        seen.add(id(function))
        found, codes = set(), [function.__code__]
        while codes:
            code = codes.pop()
            found.update(code.co_names)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        held = [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()]
        for cell in function.__closure__ or ():
            try:
                held.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        # Follow the notebook's own helper functions; a name imported under another one
        # (``import apply_rope as ar``), or held as a default, counts under its own name too.
        for value in [ns.get(name) for name in list(found)] + held:
            own = getattr(value, "__name__", None) if callable(value) else None
            if isinstance(own, str):
                found.add(own)
            if isinstance(value, types.FunctionType) and value.__module__ == "__main__":
                found |= names_used(value, depth + 1, seen)
        return found

    out = {"answer": safe(ns.get(params["variable"], None)) if params["variable"] in ns
           else {"kind": "missing"}, "args": [], "kwargs": {}, "tamper": []}
    for expr in params["args"]:
        try:
            out["args"].append(safe(eval(expr, ns)))
        except Exception as err:
            out["args"].append({"kind": "error", "repr": f"{type(err).__name__}: {err}"})
    for key, expr in params["kwargs"].items():
        try:
            out["kwargs"][key] = safe(eval(expr, ns))
        except Exception as err:
            out["kwargs"][key] = {"kind": "error", "repr": f"{type(err).__name__}: {err}"}

    # Is every checker and library function still one whose code comes from the library's file?
    # (A function the notebook wrote, or code swapped into one, comes from the notebook. A file
    # changed on disk is the grader's business: it fingerprints the package before and after.)
    for qualname, path in params["pristine"].items():
        module_name, name = qualname.rsplit(".", 1)
        module = sys.modules.get(module_name)
        if module is None:
            continue  # never imported: nothing to tamper with
        if getattr(module, "__file__", None) != path:
            out["tamper"].append(f"the module {module_name} was replaced")
            continue
        function = getattr(module, name, None)
        code = getattr(inspect.unwrap(function), "__code__", None) if callable(function) else None
        # A wrapper's own code (a practice check, torch.no_grad) may not come from the notebook.
        own = getattr(getattr(function, "__code__", None), "co_filename", "")
        if code is None or code.co_filename != path or (  # unwrap: past decorators (no_grad)
                "ipykernel" in own or own.startswith("<")):
            out["tamper"].append(f"{qualname} was redefined")
    # Functions the notebook swapped into torch, numpy or builtins (torch.allclose = lambda ...,
    # torch.Tensor.__eq__ = ...): their code was written in the notebook (module __main__).
    import builtins

    guarded = [("builtins", builtins), ("torch", torch), ("torch.Tensor", torch.Tensor),
               ("torch.nn.functional", torch.nn.functional)]
    if "numpy" in sys.modules:
        guarded.append(("numpy", sys.modules["numpy"]))
    for where, owner in guarded:
        for attr, value in list(vars(owner).items()):
            if getattr(value, "__module__", None) == "__main__" and callable(value):
                out["tamper"].append(f"{where}.{attr} was replaced by the notebook's own code")
    for name, qualname in params["imported"].items():  # the names the lab imported
        module_name, attr = qualname.rsplit(".", 1)
        module = sys.modules.get(module_name)
        if name in ns and module is not None and ns[name] is not getattr(module, attr, None):
            out["tamper"].append(f"the name {name} in the notebook is not {qualname}")

    function_name = params.get("function")
    if function_name:
        fn = ns.get(function_name)
        out["function"] = {"defined": callable(fn), "results": [], "names": [], "source": ""}
        if callable(fn):
            out["function"]["names"] = sorted(names_used(fn))
            try:
                out["function"]["source"] = inspect.getsource(fn)
            except (OSError, TypeError):
                pass
            cases = torch.load(params["inputs"], weights_only=True)

            def alarm(signum, frame):
                raise TimeoutError(f"ran longer than {params['case_seconds']:g} s")

            previous = signal.signal(signal.SIGALRM, alarm)
            try:
                for call in cases:
                    signal.setitimer(signal.ITIMER_REAL, params["case_seconds"])
                    try:
                        result = safe(fn(*call))
                    except BaseException as err:  # noqa: BLE001 (KeyboardInterrupt too)
                        result = {"kind": "error", "repr": f"{type(err).__name__}: {err}"}
                    finally:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                    out["function"]["results"].append(result)
            finally:
                signal.signal(signal.SIGALRM, previous)
    torch.save(out, params["output"])
