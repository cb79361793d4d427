"""Write the adversarial submissions folder: what real students hand in, and what cheats do.

Usage: python tests/submissions/make_submissions.py OUT    (then: make grade SUBMISSIONS=OUT)

Every notebook is made from the current student edition (or the book's lab) by a small edit, so
the folder never drifts from the labs. tests/test_grading.py grades it end to end and checks
each student's score and flags; CASES below says what each one is and what an instructor
should see.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from grading.editions import RELEASES  # noqa: E402
from grading.handouts import edition_id, student_edition  # noqa: E402
from grading.labs import find_exercises  # noqa: E402

LABS = ["04_causal_mask", "06_softmax", "07_weighted_sum"]

# Right answers in a student's own words (not the book's solutions, which get flagged).
RIGHT = {
    "cached_causal_mask": "    i = torch.arange(n_keys - n_new, n_keys)\n"
                          "    return torch.arange(n_keys)[None, :] > i[:, None]",
    "window_scores": "    T = s.shape[-1]\n"
                     "    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing='ij')\n"
                     "    return s.masked_fill(((j > i) | (j <= i - w)).to(s.device), "
                     "-float('inf'))",
    "changed_outputs": "    return [i >= j for i in range(T)]",
    "softmax_columns": "    z = St - St.max(dim=0, keepdim=True).values\n"
                       "    return z.exp() / z.exp().sum(0, keepdim=True)",
    "jacobian_from_p": "    return torch.diag(p) - p[:, None] * p[None, :]",
    "tempered_softmax": "    scaled = s / tau\n    return stable_softmax(scaled)",
}
# The common mistakes of issue 31 and answers that break a method limit or are typed in.
MORE = {
    "pia/06_softmax.ipynb": {
        "softmax_columns": "    z = St - St.max()\n"
                           "    return z.exp() / z.exp().sum(0, keepdim=True)",
        "jacobian_from_p": "    s = p.log()\n"
                           "    return torch.autograd.functional.jacobian(stable_softmax, s)",
        "tempered_softmax": "    return temperature_softmax(s, tau)"},
    "quinn/06_softmax.ipynb": {
        "softmax_columns": "    z = St - St.amax(dim=-1, keepdim=True)\n"
                           "    return z.exp() / z.exp().sum(0, keepdim=True)",
        "jacobian_from_p": "    return softmax_jacobian(p)",
        "tempered_softmax": "    z = s / tau\n    z = z - z.max()\n"
                            "    return z.exp() / z.exp().sum()"},
    "rosa/04_causal_mask.ipynb": {
        "cached_causal_mask": "    import attnbook\n"
                              "    return attnbook.causal_mask(n_keys)[n_keys - n_new:]",
        "window_scores": "    gap = torch.arange(s.size(-1))[:, None] - torch.arange(s.size(-1))\n"
                         "    blocked = (gap < 0) | (gap >= w)\n"
                         "    return torch.softmax(s.masked_fill(blocked, float('-inf')), dim=-1)",
        "changed_outputs": "    return [i >= j for i in range(T)]"},
    "sam/07_weighted_sum.ipynb": {
        "outputs_by_column": "    return vt @ w.T",
        "hull_bound": "    return torch.cummax(V[:, 0], dim=0)",
        "unshuffled_outputs": "    return y_perm[torch.argsort(perm)]"},
    "tom/07_weighted_sum.ipynb": {
        "outputs_by_column": "    return torch.einsum('ij,dj->di', w, vt)",
        "hull_bound": "    return torch.tensor([0.5, 0.5, 1.5, 1.5, 2.5], dtype=V.dtype)",
        "unshuffled_outputs": "    return y_perm[torch.argsort(perm)]"},
}

# Typical mistakes, each of which a check names.
MISTAKES = {
    "cached_causal_mask": "    return torch.ones(n_new, n_keys, dtype=torch.bool).triu(1)",
    "window_scores": "    gap = torch.arange(s.size(-1))[:, None] - torch.arange(s.size(-1))\n"
                     "    return s.masked_fill((gap < 0) | (gap >= w), 0.0)",
    "changed_outputs": "    return torch.arange(T) <= j",
    "softmax_columns": "    return St.exp() / St.exp().sum(0, keepdim=True)",
    "hull_bound": "    return V[:, 0].max().expand(V.size(0))",
    "unshuffled_outputs": "    return y_perm[perm]",
}

CASES = {
    "ada/04_causal_mask.ipynb": "right answers in her own words: 3 / 3",
    "ada/06_softmax.ipynb": "right answers: 3 / 3 (ada hands in no lab 07: missing, 0)",
    "ben/06_softmax.ipynb": "replaces the checkers in the setup cell, answers zeros, 0, 'no "
                            "idea': 0 / 3, tamper",
    "cleo/07_weighted_sum.ipynb": "overwrites the given weights (w = eye) and returns vt; the "
                                  "other two are typical mistakes: 0 / 3, diagnoses named",
    "dan/Copy of 06_softmax.ipynb": "Colab's copy name, a kernel named attn-course, exercise 1 "
                                    "hard-coded from printed numbers, exercise 3 raises: 1 / 3, "
                                    "hard-coded, the error named",
    "eve/06_softmax.ipynb": "the book's own lab (solutions collapsed but present), her own "
                            "answers wrong: 0 / 3, solutions-present",
    "frankli_1234_56789_06_softmax.ipynb": "Canvas flat download, first hand-in (wrong)",
    "frankli_1234_56790_06_softmax-1.ipynb": "Canvas resubmission, the book's solutions pasted: "
                                             "graded, 3 / 3, duplicate, published-solution",
    "gus/06_softmax.ipynb": "an endless loop in the last exercise: 2 / 3, the loop's "
                            "exercise alone loses its point",
    "gus/notes.ipynb": "an unrelated notebook: not graded, flagged",
    "hana/06_softmax.ipynb": "right answers, never executed, one check call deleted: 3 / 3 (the "
                             "function is found by its name), never-run (information)",
    "hana/07_weighted_sum.ipynb": "not JSON at all: not graded, flagged; lab 07 missing",
    "ivan/06_softmax.ipynb": "saved output says Correct after running cells out of order: "
                             "0 for that exercise, told why; out-of-order",
    "lena/06_softmax.ipynb": "patches torch in the setup cell (torch.allclose, torch.equal, "
                             "torch.Tensor.__eq__ always true) and answers wrong: 0 / 3, tamper "
                             "with the lines quoted",
    "mia/06_softmax.ipynb": "an older edition (the lab before its exercises became "
                            "functions), answered right; its release is frozen: 3 / 3 with "
                            "that edition's checks, flag edition (information)",
    "nora/04_causal_mask.ipynb": "an older edition answered right, no release holds it: "
                                 "old-edition, the editions named and what to do, no "
                                 "'renamed or deleted?'",
    "pablo/07_weighted_sum.ipynb": "the edition of lab 07 handed out before its exercises "
                                   "changed (stamped with its edition and an older commit of "
                                   "this checkout), answered right: old-edition, the unchanged "
                                   "hull bound graded 2 / 4, the two changed exercises 'not in "
                                   "the edition handed in'",
    "ruth/04_causal_mask.ipynb": "this term's edition of lab 04 (stamped by make classroom "
                                 "before the checks' practice wrapper changed; release "
                                 "2026-autumn-b holds it), answered right: 3 / 3 with that "
                                 "release's checks, flag edition (information)",
    "uma/Copy of 04_causal_mask.ipynb": "the edition of lab 04 a class got at commit a949cb8 "
                                        "(before release 2026-autumn-b; stamped with the lab "
                                        "alone), Colab's copy name, opened in a local Jupyter "
                                        "(python3, 'Python 3 (ipykernel)'), answered right, "
                                        "changed_outputs as a list (the edition's hint): "
                                        "old-edition with what to do (no release holds it), "
                                        "the kept changed_outputs graded: 1 / 3",
    "wes/04_causal_mask.ipynb": "the same edition gamed: a typed-in list for changed_outputs: "
                                "old-edition, 0 / 3, hard-coded named",
    "vic/07_weighted_sum.ipynb": "lab 07's edition at a949cb8 (stamped with the lab alone, no "
                                 "release holds it), answered right: old-edition (not taken "
                                 "for the current edition by its one kept name, hull_bound), "
                                 "the hull bound graded 2 / 4",
    "olga/06_softmax.ipynb": "a newer edition than the grader's (stamped with an edition and "
                             "a commit this checkout lacks), answered right: 3 / 3 by the "
                             "current checks, newer-edition",
    "pia/06_softmax.ipynb": "the global maximum instead of each column's, the Jacobian by "
                            "autograd, temperature_softmax: 0 / 3; the mistake named, the "
                            "method limits applied (the notebook said 'Right values, but')",
    "quinn/06_softmax.ipynb": "the row draft half changed (each row's max, each column's "
                              "sum), softmax_jacobian, a right tempered softmax: 1 / 3, the "
                              "axes named, method",
    "rosa/04_causal_mask.ipynb": "attnbook.causal_mask for the KV-cache mask, the weights "
                                 "returned instead of the windowed scores, a right third: "
                                 "1 / 3, method, both named",
    "sam/07_weighted_sum.ipynb": "torch.cummax without .values in the bound: 2 / 4, named",
    "tom/07_weighted_sum.ipynb": "einsum (ruled out) and a typed-in list for the bound: 1 / 4, "
                                 "method and hard-coded, in the notebook as in the grade",
    "kai/07_weighted_sum.ipynb": "turns interrupts off in an endless loop in the last exercise: "
                                 "3 / 4 (the first two count), that kernel stopped and said so",
    "Julia Kim_123456_assignsubmission_file_/04_causal_mask.ipynb": "Moodle folder, three "
                                                                    "typical mistakes (the "
                                                                    "top-left corner for the "
                                                                    "KV-cache mask, the window "
                                                                    "filled with 0, the "
                                                                    "outputs before j): 0 / 3",
}


def _answer(nb, function: str, body: str):
    """Replace the ``return ...`` line of ``function``'s exercise cell by ``body``."""
    for cell in nb.cells:
        if cell.cell_type == "code" and f"def {function}(" in cell.source and "return ..." in \
                cell.source:
            cell.source = re.sub(r"^    return \.\.\..*$", lambda _: body, cell.source,
                                 count=1, flags=re.M)
            return nb
    raise LookupError(f"no exercise cell defines {function}")


def _fill(nb, answers: dict[str, str]):
    nb = copy.deepcopy(nb)
    for function, body in answers.items():
        _answer(nb, function, body)
    return nb


def _saved_run(nb, said: dict[str, str] | None = None, order: list[int] | None = None):
    """Pretend the notebook was run: execution counts (in ``order`` if given) and outputs."""
    nb = copy.deepcopy(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for n, cell in zip(order or range(1, len(code) + 1), code):
        cell.execution_count = n
    for cell in code:
        for function, text in (said or {}).items():
            if f"def {function}(" in cell.source or f"answer = {function}(" in cell.source:
                if "check_" in cell.source:
                    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return nb


def _never_run(nb):
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.execution_count, cell.outputs = None, []
    return nb


# The commit whose labs 04 and 06 were the term's first editions: exercises were values then.
OLD_EDITION = "9a2cd56^"
OLD_RIGHT = {
    "06_softmax": {
        "check_softmax(answer, S1)": "answer = (S1 - S1.amax(-1, keepdim=True)).exp()\n"
                                     "answer = answer / answer.sum(-1, keepdim=True)",
        "check_jacobian(answer, s2)": "answer = torch.diag(p2) - p2[:, None] * p2[None, :]",
        "check_temperature(answer, s, tau)": "answer = stable_softmax(s / tau)"},
    "04_causal_mask": {
        "check_causal_mask(answer, T=5)": "answer = torch.ones(5, 5).triu(1).bool()",
        "check_masked_scores(answer, s)": "answer = s.masked_fill(torch.ones_like(s).triu(1)"
                                          ".bool(), float('-inf'))",
        "check_changed_outputs(answer, T=6, j=2)": "answer = [i >= 2 for i in range(6)]"},
}


def old_lab(lab: str, ref: str = OLD_EDITION):
    """The book's lab as it was at ``ref``, or None where the history is not there."""
    import subprocess

    done = subprocess.run(["git", "show", f"{ref}:notebooks/{lab}.ipynb"], cwd=ROOT,
                          capture_output=True, text=True)
    return nbformat.reads(done.stdout, as_version=4) if done.returncode == 0 else None


def old_edition(lab: str):
    """That lab's student edition as handed out then (unstamped), answered right."""
    nb = old_lab(lab)
    if nb is None:
        return None
    nb = student_edition(nb, find_exercises(nb))
    for cell in nb.cells:
        for call, answer in OLD_RIGHT[lab].items():
            if cell.cell_type == "code" and call in cell.source:
                cell.source = re.sub(r"^answer = \.\.\..*$", lambda _, a=answer: a, cell.source,
                                     count=1, flags=re.M)
    return nb


# The commit before labs 04, 06 and 07 asked for variations of their worked cells (issue 31):
# the term that started with its editions hands in exercises that have changed since.
STAMPED_EDITION = "2c23266^"
STAMPED_RIGHT = {"outputs": "    return w @ v",
                 "hull_bound": "    return V[:, 0].cummax(dim=0).values",
                 "permuted_outputs": "    return y[perm]"}


def stamped_old_edition(lab: str = "07_weighted_sum"):
    """``lab``'s student edition as made at STAMPED_EDITION, stamped as classroom.py stamped it
    then (its edition id, that commit), answered right; None without the history."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)

    shown = git("show", f"{STAMPED_EDITION}:notebooks/{lab}.ipynb")
    commit = git("rev-parse", f"{STAMPED_EDITION}^{{commit}}").stdout.strip()
    if shown.returncode != 0 or not commit:
        return None
    lab_nb = nbformat.reads(shown.stdout, as_version=4)
    exercises = find_exercises(lab_nb)
    nb = _fill(student_edition(lab_nb, exercises), STAMPED_RIGHT)
    nb.metadata["attnbook"] = {"lab": lab, "edition": "student",
                               "exercises": edition_id(lab_nb, exercises),
                               "version": "0.1.0", "commit": commit, "release": ""}
    return nb


# The commit whose student editions a class of this term got before release 2026-autumn-b
# (issue 37 §5): lab 04's exercises were functions already (my_causal_mask, masked_scores,
# changed_outputs, its hint "e.g. a list [True, False, ...]"), stamped with the lab alone. One
# name, changed_outputs, is an exercise of the current lab too, so the grader took such a
# hand-in for the current edition with two exercises deleted (1 / 3, no flag).
A949 = "a949cb8"
A949_RIGHT = {
    "04_causal_mask": {
        "my_causal_mask": "    i = torch.arange(T)\n    return i[None, :] > i[:, None]",
        "masked_scores": "    i = torch.arange(s.shape[-1], device=s.device)\n"
                         "    return s.masked_fill(i[None, :] > i[:, None], float('-inf'))",
        "changed_outputs": "    return [i >= j for i in range(T)]"},  # a list, as hinted
    "07_weighted_sum": STAMPED_RIGHT,
}
LOCAL_KERNEL = {  # what a local Jupyter (ipykernel) writes; Colab's "colab" block absent
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                   "language": "python"},
    "language_info": {"name": "python", "version": "3.12.3", "mimetype": "text/x-python",
                      "codemirror_mode": {"name": "ipython", "version": 3},
                      "pygments_lexer": "ipython3", "nbconvert_exporter": "python",
                      "file_extension": ".py"}}


def a949_edition(lab: str, answers: dict[str, str] | None = None):
    """``lab``'s student edition as made at A949 (stamped as classroom.py stamped it then: the
    lab alone), opened in a local Jupyter and answered (right by default); None without it."""
    nb = old_lab(lab, A949)
    if nb is None:
        return None
    nb = _fill(student_edition(nb, find_exercises(nb)),
               A949_RIGHT[lab] if answers is None else answers)
    nb.metadata["attnbook"] = {"lab": lab, "edition": "student"}
    nb.metadata.pop("colab", None)
    nb.metadata.update(copy.deepcopy(LOCAL_KERNEL))
    return nb


# This term's editions, frozen in the repository (scripts/grading/releases) when every lab's
# exercises became functions graded on hidden inputs.
TERM_RELEASE = "2026-autumn-b"


def term_edition(lab: str = "04_causal_mask", answers: dict[str, str] | None = None):
    """``lab``'s student edition from the repository's release TERM_RELEASE, stamped as
    ``make classroom`` stamped it then (edition id, commit), answered right; None without it."""
    import tarfile

    folder = RELEASES / TERM_RELEASE
    if not (folder / "release.json").exists():
        return None
    meta = json.loads((folder / "release.json").read_text(encoding="utf-8"))
    with tarfile.open(folder / "release.tar.gz") as tar:
        text = tar.extractfile(f"student/{lab}.ipynb").read().decode("utf-8")
    nb = _fill(nbformat.reads(text, as_version=4), answers or {
        k: RIGHT[k] for k in ("cached_causal_mask", "window_scores", "changed_outputs")})
    nb.metadata["attnbook"] = {"lab": lab, "edition": "student",
                               "exercises": meta["labs"][lab]["exercises"],
                               "version": meta["library"]["version"],
                               "commit": meta["library"]["commit"], "release": ""}
    return nb


def build(out: Path) -> dict[str, str]:
    """Write the submissions into ``out`` (which must not exist). Returns CASES."""
    editions, labs = {}, {}
    for lab in LABS:
        labs[lab] = nbformat.read(ROOT / "notebooks" / f"{lab}.ipynb", as_version=4)
        editions[lab] = student_edition(labs[lab], find_exercises(labs[lab]), lab)
    s04, s06, s07 = (editions[lab] for lab in LABS)
    files = {}
    files["ada/04_causal_mask.ipynb"] = _fill(s04, {k: RIGHT[k] for k in (
        "cached_causal_mask", "window_scores", "changed_outputs")})
    files["ada/06_softmax.ipynb"] = _fill(s06, {k: RIGHT[k] for k in (
        "softmax_columns", "jacobian_from_p", "tempered_softmax")})

    ben = _fill(s06, {"softmax_columns": "    return torch.zeros_like(St)",
                      "jacobian_from_p": "    return 0",
                      "tempered_softmax": "    return 'no idea'"})
    setup = next(c for c in ben.cells if c.cell_type == "code")
    setup.source += ("\n\nimport attnbook.exercises.softmax as _sm\n"
                     "from attnbook.exercises import Feedback\n"
                     "for _name in ('check_softmax', 'check_jacobian', 'check_temperature'):\n"
                     "    setattr(_sm, _name, lambda *a, **k: Feedback(True, 'Correct: matches.'))")
    files["ben/06_softmax.ipynb"] = ben

    cleo = _fill(s07, {"outputs_by_column": "    return vt",
                       "hull_bound": MISTAKES["hull_bound"],
                       "unshuffled_outputs": MISTAKES["unshuffled_outputs"]})
    cell = next(c for c in cleo.cells if "answer = outputs_by_column(w, vt)" in c.source)
    cell.source = cell.source.replace("answer = outputs_by_column(w, vt)",
                                      "w = torch.eye(5, dtype=torch.float64)\n"
                                      "answer = outputs_by_column(w, vt)")
    files["cleo/07_weighted_sum.ipynb"] = cleo

    # Dan copied the numbers another student's run printed (the lab's St1, 4 decimals).
    import torch

    St1 = torch.tensor([[2.0, 1000.0, -2.0], [1.0, 998.0, 3.0], [0.5, 990.0, 1.0],
                        [-1.0, 0.0, 0.5], [0.3, 995.0, -0.2]])
    rows = ",\n".join("        [" + ", ".join(f"{x:.4f}" for x in row) + "]"
                      for row in torch.softmax(St1, dim=0).tolist())
    printed = f"    return torch.tensor([\n{rows}])"
    dan = _fill(s06, {"softmax_columns": printed, "jacobian_from_p": RIGHT["jacobian_from_p"],
                      "tempered_softmax": "    raise NotImplementedError('no time left')"})
    dan.metadata["kernelspec"] = {"name": "attn-course", "display_name": "Attention course",
                                  "language": "python"}
    del dan.metadata["attnbook"]  # Colab keeps metadata, but the name must be enough
    files["dan/Copy of 06_softmax.ipynb"] = dan

    files["eve/06_softmax.ipynb"] = _fill(labs["06_softmax"], {
        "softmax_columns": MISTAKES["softmax_columns"],
        "jacobian_from_p": "    return torch.diag(p)",
        "tempered_softmax": "    return stable_softmax(s * tau)"})

    files["frankli_1234_56789_06_softmax.ipynb"] = _fill(s06, {
        "softmax_columns": MISTAKES["softmax_columns"]})
    solutions = {}
    for ex in find_exercises(labs["06_softmax"]):
        source = labs["06_softmax"].cells[ex.solutions[0]].source
        body = source[source.index(f"def {ex.function}("):].split("\n\n")[0]
        solutions[ex.function] = body.split("\n", 1)[1].split('"""\n', 2)[-1]
    files["frankli_1234_56790_06_softmax-1.ipynb"] = _fill(s06, solutions)

    gus = _fill(s06, {"softmax_columns": RIGHT["softmax_columns"],
                      "jacobian_from_p": RIGHT["jacobian_from_p"],
                      "tempered_softmax": "    while True:\n        pass"})
    files["gus/06_softmax.ipynb"] = gus
    notes = nbformat.v4.new_notebook()
    notes.cells = [nbformat.v4.new_markdown_cell("# My notes"),
                   nbformat.v4.new_code_cell("print('hello')")]
    files["gus/notes.ipynb"] = notes

    hana = _never_run(_fill(s06, {k: RIGHT[k] for k in (
        "softmax_columns", "jacobian_from_p", "tempered_softmax")}))
    for cell in hana.cells:  # she deleted the check under her Jacobian
        cell.source = cell.source.replace("check_jacobian(answer, s2)", "")
    files["hana/06_softmax.ipynb"] = hana

    # Ivan defined softmax_columns in a cell below the exercise and ran it before the check.
    ivan = _fill(s06, {"jacobian_from_p": RIGHT["jacobian_from_p"],
                       "tempered_softmax": RIGHT["tempered_softmax"]})
    i = next(k for k, c in enumerate(ivan.cells) if "answer = softmax_columns(St1)" in c.source)
    ivan.cells.insert(i + 1, nbformat.v4.new_code_cell(
        "def softmax_columns(St):\n" + RIGHT["softmax_columns"]))
    n = sum(c.cell_type == "code" for c in ivan.cells)
    k = sum(c.cell_type == "code" for c in ivan.cells[: i + 1])  # the exercise is code cell k
    order = list(range(1, n + 1))
    order[k - 1], order[k] = order[k], order[k - 1]  # the definition ran first
    files["ivan/06_softmax.ipynb"] = _saved_run(
        ivan, {"softmax_columns": "Correct: the softmax matches.\n"}, order)

    lena = _fill(s06, {"softmax_columns": "    return torch.zeros_like(St)",
                       "jacobian_from_p": "    return torch.diag(p)",
                       "tempered_softmax": "    return s"})
    setup = next(c for c in lena.cells if c.cell_type == "code")
    setup.source += ("\n\nimport torch\ntorch.allclose = lambda *a, **k: True\n"
                     "torch.equal = lambda *a, **k: True\n"
                     "torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self).bool()")
    files["lena/06_softmax.ipynb"] = lena

    for rel, answers in MORE.items():
        files[rel] = _fill(editions[rel.split("/")[1].removesuffix(".ipynb")], answers)
    for who, lab in (("mia", "06_softmax"), ("nora", "04_causal_mask")):
        old = old_edition(lab)
        if old is not None:  # a shallow clone lacks the history: the case is left out
            files[f"{who}/{lab}.ipynb"] = old
    pablo = stamped_old_edition()
    if pablo is not None:
        files["pablo/07_weighted_sum.ipynb"] = pablo
    uma = a949_edition("04_causal_mask")
    if uma is not None:
        files["uma/Copy of 04_causal_mask.ipynb"] = uma
        files["wes/04_causal_mask.ipynb"] = a949_edition("04_causal_mask", {
            "my_causal_mask": "    return torch.ones(T, T, dtype=torch.bool).triu(1)",
            "masked_scores": A949_RIGHT["04_causal_mask"]["masked_scores"],
            "changed_outputs": "    return [False, False, True, True, True, True]"})
        files["vic/07_weighted_sum.ipynb"] = a949_edition("07_weighted_sum")
    ruth = term_edition()
    if ruth is not None:
        files["ruth/04_causal_mask.ipynb"] = ruth
    olga = _fill(s06, {k: RIGHT[k] for k in ("softmax_columns", "jacobian_from_p",
                                             "tempered_softmax")})
    olga.metadata["attnbook"].update(exercises="0123456789ab", commit="f" * 40, version="9.9")
    files["olga/06_softmax.ipynb"] = olga

    # Kai turns interrupts off to outlast the time limit in his last exercise.
    files["kai/07_weighted_sum.ipynb"] = _fill(s07, {
        "outputs_by_column": "    return vt @ w.T",
        "hull_bound": "    return V[:, 0].cummax(dim=0)[0]",
        "unshuffled_outputs": "    import signal\n"
                              "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                              "    while True:\n        pass"})

    files["Julia Kim_123456_assignsubmission_file_/04_causal_mask.ipynb"] = _fill(s04, {
        k: MISTAKES[k] for k in ("cached_causal_mask", "window_scores", "changed_outputs")})

    out.mkdir(parents=True)
    for rel, nb in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
    (out / "hana" / "07_weighted_sum.ipynb").write_text("{not json", encoding="utf-8")
    # The Canvas resubmission is the later one (an LMS download may also set equal times).
    first = (out / "frankli_1234_56789_06_softmax.ipynb").stat().st_mtime
    os.utime(out / "frankli_1234_56790_06_softmax-1.ipynb", (first + 60, first + 60))
    cases = {k: v for k, v in CASES.items() if k in files or not k.endswith(".ipynb")
             or k.startswith(("hana/07",))}
    (out / "CASES.json").write_text(json.dumps(cases, indent=1) + "\n", encoding="utf-8")
    return cases


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tests/submissions/make_submissions.py OUT")
    build(Path(sys.argv[1]))
    print(f"wrote {len(CASES)} submissions to {sys.argv[1]}")
