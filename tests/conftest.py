"""Shared fixtures: seeded inputs and a helper that copies weights between modules."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def random_padding(B: int, T: int, side: str = "right", generator=None) -> torch.Tensor:
    """A (B, T) bool mask, True = real, with at least one real token per sequence."""
    lengths = torch.randint(1, T + 1, (B,), generator=generator)
    pos = torch.arange(T)
    if side == "right":
        return pos[None, :] < lengths[:, None]
    return pos[None, :] >= (T - lengths)[:, None]
