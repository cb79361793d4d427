"""Which PyTorch names the library and the labs use, and whether an older torch release has them.

Colab's runtimes run every lab with torch 2.11 (googlecolab/backend-info, pip-freeze.gpu.txt and
pip-freeze.txt), while this project pins and tests 2.13. A name added after 2.11 would pass every
test here and fail in Colab. torch 2.11 cannot run on this machine (its Linux wheel on PyPI is a
CUDA build of several GB), but its Python layer can be read: the macOS wheel (about 80 MB) holds
the same ``.py`` files, the type stubs of its C functions (``torch/_C/*.pyi``) and a header per
ATen operator (``torch/include/ATen/ops/<op>.h``). This module reads them without importing them.

``used_names()`` lists every dotted ``torch.*`` name in ``src/attnbook`` and in the code cells of
``notebooks/*.ipynb`` (aliases such as ``import torch.nn.functional as F`` resolved), with the
keyword arguments each call passes. ``TorchSource(wheel).missing(used)`` returns what the release
lacks: a name it does not define, or a keyword no overload of the function accepts.

Run ``python scripts/torch_api.py`` for the report (it downloads the wheel with pip).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLAB_TORCH = "2.11.0"  # googlecolab/backend-info, commit a724079 (CPU and GPU runtimes)


# ---------------------------------------------------------------------------------------------
# What we use
# ---------------------------------------------------------------------------------------------

@dataclass
class Use:
    """One dotted torch name: where it is used and the keywords its calls pass."""

    name: str
    where: set[str] = field(default_factory=set)
    keywords: set[str] = field(default_factory=set)


def _notebook_code(path: Path) -> str:
    """A lab's code cells as one module; shell and magic lines become ``pass``."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        for line in "".join(cell["source"]).splitlines():
            body = line.lstrip()
            out.append(line[: len(line) - len(body)] + "pass" if body[:1] in "%!" and body
                       else line)
    return "\n".join(out)


def sources(root: Path = ROOT) -> list[tuple[str, str]]:
    """(label, Python source) of every library module and every lab."""
    out = [(str(p.relative_to(root)), p.read_text(encoding="utf-8"))
           for p in sorted((root / "src" / "attnbook").rglob("*.py"))]
    out += [(str(p.relative_to(root)), _notebook_code(p))
            for p in sorted((root / "notebooks").glob("*.ipynb"))]
    return out


def _dotted(node: ast.AST, alias: dict[str, str]) -> str | None:
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in alias:
        return ".".join([alias[node.id], *reversed(chain)])
    return None


def names_in(text: str, label: str, uses: dict[str, Use] | None = None) -> dict[str, Use]:
    """The torch names one source uses (added to ``uses``)."""
    uses = {} if uses is None else uses
    tree = ast.parse(text)
    alias: dict[str, str] = {}

    def use(name: str) -> Use:
        return uses.setdefault(name, Use(name))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    alias[a.asname or "torch"] = a.name if a.asname else "torch"
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and node.module.split(".")[0] == "torch"):
            for a in node.names:
                if a.name == "*":
                    continue
                full = f"{node.module}.{a.name}"
                use(full).where.add(label)
                alias[a.asname or a.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = _dotted(node, alias)
            if name:
                use(name).where.add(label)
        elif isinstance(node, ast.Call):
            name = _dotted(node.func, alias) if isinstance(node.func, ast.Attribute) else (
                alias.get(node.func.id) if isinstance(node.func, ast.Name) else None)
            if name:
                u = use(name)
                u.where.add(label)
                u.keywords.update(k.arg for k in node.keywords if k.arg)
    return uses


def used_names(root: Path = ROOT) -> dict[str, Use]:
    """Every dotted torch name the library and the labs use."""
    uses: dict[str, Use] = {}
    for label, text in sources(root):
        names_in(text, label, uses)
    return uses


# ---------------------------------------------------------------------------------------------
# What a release has
# ---------------------------------------------------------------------------------------------

class TorchSource:
    """The Python layer of one torch wheel, read from the zip (nothing imported)."""

    def __init__(self, wheel: Path):
        self.zip = zipfile.ZipFile(wheel)
        members = self.zip.namelist()
        self.files = {m for m in members if m.endswith((".py", ".pyi"))}
        self.ops = {Path(m).stem for m in members
                    if m.startswith("torch/include/ATen/ops/") and m.endswith(".h")}
        self._trees: dict[str, list[ast.Module]] = {}
        self._defs: dict[str, dict[str, list[ast.AST]]] = {}

    # -- modules ----------------------------------------------------------------------------
    def module_files(self, module: str) -> list[str]:
        base = module.replace(".", "/")
        return [f for f in (f"{base}.py", f"{base}.pyi", f"{base}/__init__.py",
                            f"{base}/__init__.pyi") if f in self.files]

    def is_module(self, module: str) -> bool:
        return bool(self.module_files(module))

    def _parse(self, module: str) -> list[ast.Module]:
        if module not in self._trees:
            self._trees[module] = [ast.parse(self.zip.read(f).decode("utf-8"))
                                   for f in self.module_files(module)]
        return self._trees[module]

    def defs(self, module: str, _seen: frozenset = frozenset()) -> dict[str, list[ast.AST]]:
        """Top-level names of a module (inside ifs and trys too; star imports followed).

        Each maps to its definitions: FunctionDef/ClassDef nodes, or ("import", module, name)
        for a re-export, or None for an assignment.
        """
        if module in self._defs:
            return self._defs[module]
        out: dict[str, list] = {}

        def add(name, what):
            out.setdefault(name, []).append(what)

        package = module if any(f.endswith("__init__.py") or f.endswith("__init__.pyi")
                                for f in self.module_files(module)) else module.rpartition(".")[0]

        def walk(body):
            for st in body:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    add(st.name, st)
                elif isinstance(st, ast.Assign):
                    for t in st.targets:
                        for n in ast.walk(t):
                            if isinstance(n, ast.Name):
                                add(n.id, None)
                    if (len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                            and st.targets[0].id == "__all__"
                            and isinstance(st.value, (ast.List, ast.Tuple))):
                        for e in st.value.elts:
                            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                                add(e.value, None)
                elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    add(st.target.id, None)
                elif isinstance(st, ast.Import):
                    for a in st.names:
                        add(a.asname or a.name.split(".")[0], ("module", a.name, None))
                elif isinstance(st, ast.ImportFrom):
                    src = st.module or ""
                    if st.level:
                        parts = package.split(".")
                        parts = parts[: len(parts) - (st.level - 1)]
                        src = ".".join(parts + ([st.module] if st.module else []))
                    for a in st.names:
                        if a.name == "*":
                            if src not in _seen and self.is_module(src):
                                for k, v in self.defs(src, _seen | {module}).items():
                                    if not k.startswith("_") or src.endswith("_VariableFunctions"):
                                        out.setdefault(k, []).extend(v)
                        else:
                            add(a.asname or a.name, ("import", src, a.name))
                elif isinstance(st, (ast.If, ast.Try, ast.With)):
                    walk(st.body)
                    walk(getattr(st, "orelse", []))
                    for h in getattr(st, "handlers", []):
                        walk(h.body)
                    walk(getattr(st, "finalbody", []))

        for tree in self._parse(module):
            walk(tree.body)
        self._defs[module] = out
        return out

    # -- names ------------------------------------------------------------------------------
    def resolve(self, name: str) -> tuple[str, list] | None:
        """(module, definitions) of a dotted name, following re-exports; None if undefined.

        Returns ("<module>", []) when the name is itself a module, ("<op>", []) for an ATen
        operator that exists, ("<attr>", []) for an attribute of something defined that can
        only be checked by its text.
        """
        parts = name.split(".")
        if parts[:2] == ["torch", "ops"]:
            if len(parts) <= 3:
                return ("<module>", [])
            return ("<op>", []) if parts[3] in self.ops else None
        for i in range(len(parts), 0, -1):
            module = ".".join(parts[:i])
            if self.is_module(module):
                break
        else:
            return None
        rest = parts[i:]
        if not rest:
            return ("<module>", [])
        return self._lookup(module, rest, set())

    def _lookup(self, module: str, rest: list[str], seen: set) -> tuple[str, list] | None:
        if (module, tuple(rest)) in seen:
            return None
        seen.add((module, tuple(rest)))
        if self.is_module(f"{module}.{rest[0]}"):
            sub = f"{module}.{rest[0]}"
            return ("<module>", []) if len(rest) == 1 else self.resolve(".".join([sub, *rest[1:]]))
        found = self.defs(module).get(rest[0])
        if not found:
            return None
        nodes = []
        for d in found:
            if isinstance(d, tuple):
                kind, src, attr = d
                if kind == "module":
                    target = ".".join([src, *rest[1:]]) if len(rest) > 1 else src
                    r = self.resolve(target) if target.startswith("torch") else ("<external>", [])
                else:
                    target_mod = f"{src}.{attr}"
                    if self.is_module(target_mod):
                        r = (self.resolve(".".join([target_mod, *rest[1:]]))
                             if len(rest) > 1 else ("<module>", []))
                    elif src.split(".")[0] == "torch":
                        r = self._lookup(src, [attr, *rest[1:]], seen)
                    else:
                        r = ("<external>", [])
                if r is not None:
                    return r
            else:
                nodes.append(d)
        if len(rest) == 1:
            return (module, nodes)
        # An attribute of a class: its body must define it; of anything else: its text.
        classes = [n for n in nodes if isinstance(n, ast.ClassDef)]
        for c in classes:
            for st in c.body:
                names = ({st.name} if isinstance(st, (ast.FunctionDef, ast.ClassDef)) else
                         {n.id for t in getattr(st, "targets", [getattr(st, "target", None)])
                          if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)})
                if rest[1] in names:
                    return (module, [st] if isinstance(st, ast.FunctionDef) else [])
        text = "\n".join(self.zip.read(f).decode("utf-8") for f in self.module_files(module))
        return ("<attr>", []) if rest[-1] in text and not classes else None

    def accepts(self, defs: list, keyword: str) -> bool | None:
        """Whether some overload takes ``keyword`` (None: no signature to check)."""
        sigs = []
        for d in defs:
            if isinstance(d, ast.ClassDef):
                d = next((st for st in d.body if isinstance(st, ast.FunctionDef)
                          and st.name == "__init__"), None)
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)):
                sigs.append(d.args)
        if not sigs:
            return None
        for a in sigs:
            if a.kwarg is not None:
                return True
            if keyword in {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}:
                return True
        return False

    def missing(self, uses: dict[str, Use]) -> list[str]:
        """What this release lacks, one line per name or keyword, with where it is used."""
        problems = []
        for name in sorted(uses):
            u = uses[name]
            where = ", ".join(sorted(u.where)[:3]) + (" ..." if len(u.where) > 3 else "")
            r = self.resolve(name)
            if r is None:
                problems.append(f"{name} (used in {where})")
                continue
            for kw in sorted(u.keywords):
                if self.accepts(r[1], kw) is False:
                    problems.append(f"{name}(..., {kw}=) (used in {where})")
        return problems


def download(version: str = COLAB_TORCH, dest: Path | None = None) -> Path:
    """The macOS arm64 wheel of ``torch==version`` (pip's cache makes a second call quick)."""
    dest = dest or ROOT / "_build" / "torch-wheels"
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob(f"torch-{version}-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps",
           "--only-binary=:all:", "--platform", "macosx_11_0_arm64", "--python-version", "3.11",
           "-q", "-d", str(dest)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest.glob(f"torch-{version}-*.whl"))
    if done.returncode or not found:
        raise RuntimeError(f"pip could not download torch=={version} for macOS (to read its "
                           f"Python files): {done.stderr.strip()[-400:]}")
    return found[0]


def main() -> int:
    uses = used_names()
    source = TorchSource(download())
    problems = source.missing(uses)
    print(f"{len(uses)} torch names used by src/attnbook and the labs; "
          f"torch {COLAB_TORCH} lacks {len(problems)}:")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
