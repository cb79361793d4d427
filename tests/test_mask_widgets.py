"""The lab helpers of chapter 21 count padding and packing right and draw without error."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnbook.lab.mask_widgets import (  # noqa: E402
    causal_entries,
    document_lengths,
    draw_block_mask,
    first_fit_rows,
    padded_work,
)


def test_padded_work_counts_slots_and_entries():
    work = padded_work([3, 1, 2, 2], batch=2)  # batches [3, 1] -> 2 x 3, [2, 2] -> 2 x 2
    assert (work.slots, work.real) == (10, 8)
    assert work.entries == 2 * 6 + 2 * 3 and work.needed == 6 + 1 + 3 + 3
    assert work.wasted_slots == pytest.approx(0.2)
    assert causal_entries(4) == 10 == int(torch.ones(4, 4).tril().sum())


def test_first_fit_keeps_documents_whole_and_rows_short():
    lengths = document_lengths(64, seed=1)
    rows = first_fit_rows(lengths, 2048)
    assert sorted(i for row in rows for i in row) == list(range(64))
    assert all(sum(lengths[i] for i in row) <= 2048 for row in rows)
    assert first_fit_rows([5, 4, 3, 2], 7) == [[0, 3], [1, 2]]
    with pytest.raises(ValueError, match="more than a row"):
        first_fit_rows([9], 8)


def test_lengths_depend_only_on_the_seed():
    torch.manual_seed(0)
    a = document_lengths(16, seed=3)
    torch.manual_seed(1)
    assert a == document_lengths(16, seed=3) and min(a) >= 16 and max(a) <= 2048


def test_draw_block_mask_runs_on_ragged_tiles():
    T = 10
    allowed = torch.arange(T)[:, None] >= torch.arange(T)[None, :]
    kinds = torch.tensor([[1, 0, 0], [2, 1, 0], [2, 2, 1]])
    fig, ax = plt.subplots()
    draw_block_mask(ax, allowed, kinds, 4, 4, title="causal")
    assert ax.get_title() == "causal"
    plt.close(fig)
