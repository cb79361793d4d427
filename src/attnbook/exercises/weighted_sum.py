"""Checks for the lab "The weighted sum" (step 6)."""

from __future__ import annotations

import torch

from ..softmax import stable_softmax
from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def check_outputs(answer, weights: torch.Tensor, vt: torch.Tensor, kt: torch.Tensor,
                  scores: torch.Tensor | None = None) -> Feedback:
    """Exercise: every output at once with one token per column: the values given as
    ``vt = V^T`` (column j is v_j), the outputs wanted as ``Y^T = V^T A^T`` (column i is y_i).

    Shape:
        weights: (T, T), vt: (d, T), kt: (d, T), scores: (T, T); answer: (d, T)
    """
    A, Vt, Kt = (t.detach().double().cpu() for t in (weights, vt, kt))
    expected = Vt @ A.T  # (d, T) @ (T, T) -> (d, T): column i mixes the values by row i of A
    d, T = Vt.shape
    mistakes = {
        "Vᵀ A, which mixes the values by column i of A (who attends to token i), as Aᵀ V does "
        "in the row layout: output i is weighted by row i of A, so multiply by Aᵀ": Vt @ A,
        "a mix of the keys, Kᵀ Aᵀ, instead of the values": Kt @ A.T,
        "the outputs in the row layout, A V of shape (T, d): return one column per token, "
        "(d, T), as the values came": expected.T,
    }
    if scores is not None:
        S = scores.detach().double().cpu()
        mistakes["the raw scores instead of the weights, Vᵀ Sᵀ: apply the softmax first"] = (
            Vt @ S.T)
        mistakes["the weights of the scores without the causal mask, Vᵀ softmax(S)ᵀ: every "
                 "token sees the future; use the weights given"] = Vt @ stable_softmax(S).T
    if T == d:  # these only have the right shape when T == d
        mistakes["A Vᵀ: multiplying from the left mixes the features of one token, not the "
                 "tokens"] = A @ Vt
        mistakes["an elementwise product instead of a matrix product"] = Vt * A.T
    return check_tensor(answer, expected, mistakes, name="Yᵀ")


def check_hull_bound(answer, v: torch.Tensor) -> Feedback:
    """Exercise: for each query i under the causal mask, the least upper bound of the first
    coordinate that its output y_i can approach, whatever the scores (the hull of v_0, ..., v_i
    bounds it).

    Shape:
        v: (T, d); answer: (T,)
    """
    x = v.detach().double().cpu()[:, 0]  # (T,) first coordinate of each value
    expected = x.cummax(dim=0).values  # (T,)
    T = x.numel()
    # torch.cummax returns (values, indices); as one tensor (the grader's capture) it is (2, T).
    pair = getattr(answer, "values", None) if isinstance(answer, tuple) else None
    try:
        whole = torch.as_tensor(answer).detach().cpu().double() if pair is None else None
    except (TypeError, ValueError, RuntimeError):
        whole = None
    if pair is not None and not callable(pair) or (
            whole is not None and whole.shape == (2, T)
            and torch.allclose(whole[0], expected, atol=1e-4)
            and torch.equal(whole[1], x.cummax(dim=0).indices.double())):
        return Feedback(False, "Not yet: you returned torch.cummax's whole result, the pair "
                               "(values, indices); the bound is its .values.")
    mistakes = {
        "the largest value over all tokens: under the causal mask query i sees only "
        "v_0, ..., v_i": x.max().expand(T),
        "each token's own value: query i can also put its weight on earlier tokens": x,
        "a running sum: the weights sum to one, so an output is an average, not a sum":
            x.cumsum(dim=0),
        "a running mean: that is the output for uniform weights, not the largest reachable":
            x.cumsum(dim=0) / torch.arange(1, T + 1, dtype=x.dtype),
        "the smallest reachable value (the running minimum), not the largest":
            x.cummin(dim=0).values,
    }
    return check_tensor(answer, expected, mistakes, name="the bound")


def check_permuted_outputs(answer, y_perm: torch.Tensor, perm: torch.Tensor) -> Feedback:
    """Exercise: undo a shuffle: the outputs of unmasked attention on the tokens x, from its
    outputs ``y_perm`` on the shuffled tokens x[perm] alone.

    Shape:
        y_perm: (T, d) the outputs for x[perm]; perm: (T,); answer: (T, d)
    """
    Yp = y_perm.detach().double().cpu()
    perm = perm.detach().cpu()
    inverse = torch.argsort(perm)
    expected = Yp[inverse]  # (T, d): y_perm[i] = y[perm[i]], so y[perm[i]] = y_perm[i]
    mistakes = {
        "y_perm unchanged: attention without a mask is permutation equivariant, not invariant; "
        "the outputs moved with their tokens, so they must move back": Yp,
        "y_perm[perm], the shuffle applied a second time: row i of y_perm is y[perm[i]], so y "
        "is y_perm with row i put back at place perm[i] (y[perm] = y_perm), which is "
        "y_perm[argsort(perm)]": Yp[perm],
    }
    if Yp.shape[1] == perm.numel():  # only then is permuting the features possible
        mistakes["the features put back, y_perm[:, argsort(perm)], instead of the tokens "
                 "(rows)"] = Yp[:, inverse]
    return check_tensor(answer, expected, mistakes, name="Y for the tokens in their order")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _outputs_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for T, d in ((5, 3), (3, 6), (4, 4)):  # T != d shows transposes; T == d the elementwise slip
        q, k, v = (torch.randn(T, d, generator=g, dtype=torch.float64) for _ in range(3))
        scores = q @ k.T / d ** 0.5  # (T, T) unmasked
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        w = stable_softmax(scores.masked_fill(future, float("-inf")))  # (T, T) causal weights
        vt, kt = v.T.contiguous(), k.T.contiguous()  # (d, T): one token per column
        cases.append(HiddenCase((w.clone(), vt.clone()), (w, vt, kt, scores),
                                f"T = {T}, d = {d}"))
    return cases


def _hull_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for T in (1, 6, 9):
        V = 2 * torch.randn(T, 2, generator=g, dtype=torch.float64)
        cases.append(HiddenCase((V.clone(),), (V,), f"{T} values"))
    return cases


def _permuted_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for T, d in ((6, 3), (4, 4)):
        y = torch.randn(T, d, generator=g, dtype=torch.float64)
        perm = torch.randperm(T, generator=g)
        # Not its own inverse (the identity included): then perm and argsort(perm) differ.
        while T > 2 and torch.equal(perm[perm], torch.arange(T)):
            perm = torch.randperm(T, generator=g)
        cases.append(HiddenCase((y.clone(), perm.clone()), (y, perm), f"T = {T}, d = {d}"))
    return cases


GRADED = {
    "check_outputs": FunctionExercise("outputs_by_column", check_outputs, _outputs_cases,
                                      forbidden=("weighted_sum", "weighted_sum_v1", "einsum")),
    "check_hull_bound": FunctionExercise("hull_bound", check_hull_bound, _hull_cases),
    "check_permuted_outputs": FunctionExercise("unshuffled_outputs", check_permuted_outputs,
                                               _permuted_cases,
                                               forbidden=("attention_no_mask", "attn")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
