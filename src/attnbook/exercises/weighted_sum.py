"""Checks for the lab "The weighted sum" (step 6)."""

from __future__ import annotations

import torch

from ..softmax import stable_softmax
from . import Feedback, FunctionExercise, HiddenCase, check_tensor, practise


def _shape(answer) -> tuple[int, ...] | None:
    try:
        return tuple(torch.as_tensor(answer).shape)
    except (TypeError, ValueError, RuntimeError):
        return None


def check_outputs(answer, weights: torch.Tensor, v: torch.Tensor, k: torch.Tensor,
                  scores: torch.Tensor | None = None) -> Feedback:
    """Exercise: every output at once, Y = A V.

    Shape:
        weights: (T, T), v: (T, d), k: (T, d), scores: (T, T); answer: (T, d)
    """
    A, V, K = (t.detach().double().cpu() for t in (weights, v, k))
    expected = A @ V  # (T, T) @ (T, d) -> (T, d)
    T, d = V.shape
    mistakes = {
        "the weights transposed, Aᵀ V: column i of A says who attends to token i, "
        "row i says whom token i attends to": A.T @ V,
        "a mix of the keys, A K, instead of the values A V": A @ K,
        "the output transposed, (A V)ᵀ = Vᵀ Aᵀ: one row per feature instead of one per token":
            expected.T,
    }
    if scores is not None:
        S = scores.detach().double().cpu()
        mistakes["the raw scores times the values, S V: apply the softmax first"] = S @ V
        mistakes["the weights of the scores without the causal mask, softmax(S) V: every "
                 "token sees the future; use the weights given"] = stable_softmax(S) @ V
    if T == d:  # these only have the right shape when T == d
        mistakes["V A instead of A V: the weights must multiply from the left"] = V @ A
        mistakes["an elementwise product A * V instead of the matrix product A @ V"] = A * V
    feedback = check_tensor(answer, expected, mistakes, name="Y")
    shape = _shape(answer)
    if not feedback.ok and T != d and shape == (d, T):
        return Feedback(False, f"Not yet: Y has shape {shape}, the transpose of A V's {(T, d)}: "
                               "did you write V.T @ A.T or transpose the result?")
    return feedback


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


def check_permuted_outputs(answer, y: torch.Tensor, perm: torch.Tensor) -> Feedback:
    """Exercise: outputs of unmasked attention on the permuted tokens x[perm], from y alone.

    Shape:
        y: (T, d) the outputs for x; perm: (T,); answer: (T, d)
    """
    Y = y.detach().double().cpu()
    perm = perm.detach().cpu()
    inverse = torch.argsort(perm)
    expected = Y[perm]  # (T, d): the outputs permute exactly as the tokens do
    mistakes = {
        "y unchanged: attention without a mask is permutation equivariant, not invariant; "
        "the outputs move with their tokens": Y,
        "the inverse permutation, y[argsort(perm)]: row i of the new input is x[perm[i]], "
        "so row i of the new output is y[perm[i]]": Y[inverse],
    }
    if Y.shape[1] == perm.numel():  # only then is permuting the features possible
        mistakes["the features permuted, y[:, perm], instead of the tokens (rows)"] = Y[:, perm]
    return check_tensor(answer, expected, mistakes, name="Y for the shuffled tokens")


# The exercises as functions, for grading on inputs the learner never saw (scripts/grading).


def _outputs_cases(g: torch.Generator) -> list[HiddenCase]:
    cases = []
    for T, d in ((5, 3), (3, 6), (4, 4)):  # T != d shows transposes; T == d the elementwise slip
        q, k, v = (torch.randn(T, d, generator=g, dtype=torch.float64) for _ in range(3))
        scores = q @ k.T / d ** 0.5  # (T, T) unmasked
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        w = stable_softmax(scores.masked_fill(future, float("-inf")))  # (T, T) causal weights
        cases.append(HiddenCase((w.clone(), v.clone()), (w, v, k, scores), f"T = {T}, d = {d}"))
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
        while T > 1 and torch.equal(perm, torch.arange(T)):  # the identity shows nothing
            perm = torch.randperm(T, generator=g)
        cases.append(HiddenCase((y.clone(), perm.clone()), (y, perm), f"T = {T}, d = {d}"))
    return cases


GRADED = {
    "check_outputs": FunctionExercise("outputs", check_outputs, _outputs_cases,
                                      forbidden=("weighted_sum", "weighted_sum_v1", "einsum")),
    "check_hull_bound": FunctionExercise("hull_bound", check_hull_bound, _hull_cases),
    "check_permuted_outputs": FunctionExercise("permuted_outputs", check_permuted_outputs,
                                               _permuted_cases,
                                               forbidden=("attention_no_mask", "attn")),
}
"""Check name -> the exercise as a function, graded on hidden inputs."""


practise(GRADED, globals())
