"""The exercise checkers accept right answers and name known mistakes."""

from __future__ import annotations

import torch

from attnbook.exercises import check_tensor


def test_check_tensor_verdicts():
    expected = torch.tensor([1.0, 2.0])
    assert check_tensor(expected.clone(), expected).ok
    assert "still empty" in check_tensor(..., expected).message
    wrong = check_tensor(torch.tensor([2.0, 4.0]), expected, {"doubled": expected * 2})
    assert not wrong.ok and "doubled" in wrong.message
    assert "shape (3,)" in check_tensor(torch.zeros(3), expected).message
    assert "NaN" in check_tensor(torch.tensor([float("nan"), 1.0]), expected).message
    assert "differs by up to 0.5" in check_tensor(torch.tensor([1.5, 2.0]), expected).message
    assert "should be a tensor" in check_tensor("abc", expected).message


def test_check_number_is_exact_and_names_mistakes():
    from attnbook.exercises import check_number

    assert check_number(4096, 4096).ok
    assert not check_number(4097, 4096).ok
    fb = check_number(2048, 4096, {"the keys only": 2048})
    assert not fb.ok and "the keys only" in fb.message


def test_check_number_is_exact_for_counts_beyond_float32():
    """Counts of bytes and FLOPs pass 2**24 quickly: the comparison is made in float64, and a
    Python float answer is not rounded to float32 on the way."""
    from attnbook.exercises import check_number

    assert check_number(381381001, 381381001).ok
    assert check_number(381381001.0, 381381001).ok
    assert not check_number(381381000, 381381001).ok
    assert check_number(2**40 + 1, 2**40 + 1).ok  # (rtol 1e-9: off by one passes up there)


def test_the_practice_second_input_goes_where_the_labs_input_is():
    """On a Colab GPU the lab's input is on CUDA: the practice check moves its second input
    to the device of the lab's input to the check (tensors in tuples and lists included), so
    a function that builds its own tensors on the lab's device is judged on its values, as
    the CPU grader judges it. (Not run on a GPU here: meta stands in for the other device.)"""
    import torch

    from attnbook.exercises import _on, lab_device

    x = torch.ones(2)
    assert lab_device(3, "a", x, torch.zeros(1, device="meta")) == torch.device("cpu")
    assert lab_device(3, [None, (torch.zeros(1, device="meta"),)]).type == "meta"
    assert lab_device(3, None, [1, 2]) is None
    moved = _on((x, [x, 4], "s"), torch.device("meta"))
    assert moved[0].device.type == "meta" and moved[1][0].device.type == "meta"
    assert isinstance(moved[1], list) and moved[1][1] == 4 and moved[2] == "s"


def test_an_answer_computed_without_the_function_is_not_called_correct():
    """A notebook that deletes the exercise's def and types the answer in gets no "Correct":
    the grader calls the function, finds none, and scores 0."""
    typed = {"__name__": "__main__"}
    exec("import torch\n"  # noqa: S102 (the test's own code)
         "from attnbook.exercises.causal_mask import check_cached_mask\n"
         "answer = torch.ones(3, 8, dtype=torch.bool).triu(6)\n"
         "result = check_cached_mask(answer, n_new=3, n_keys=8)\n", typed)
    assert not typed["result"].ok
    assert "cached_causal_mask is not defined here" in typed["result"].message
    from attnbook.exercises.causal_mask import check_cached_mask

    assert check_cached_mask(torch.ones(3, 8, dtype=torch.bool).triu(6), 3, 8).ok  # a module
