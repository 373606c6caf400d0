from __future__ import annotations

import pytest
import torch

from osmosis_ai.errors import TrainingError
from osmosis_trainer.grpo import (
    combine_masks,
    drop_truncated,
    require_nonempty,
    shift_mask,
    truncate_at_eos,
)


def test_shift_and_combine() -> None:
    loss_mask = torch.tensor([[0, 0, 1, 1, 0, 1]])
    assert shift_mask(loss_mask).tolist() == [[0, 1, 1, 0, 1]]
    tool = torch.tensor([[1, 1, 1, 0, 1, 1]])
    assert combine_masks(loss_mask, tool).int().tolist() == [[0, 0, 1, 0, 0, 1]]
    with pytest.raises(ValueError, match="shapes"):
        combine_masks(loss_mask, torch.ones(1, 2))


def test_truncate_at_eos_keeps_the_eos_token() -> None:
    ids = torch.tensor([[5, 6, 2, 7, 2], [5, 6, 7, 8, 9]])
    mask = torch.tensor([[0, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    out = truncate_at_eos(ids, mask, eos_ids=[2])
    assert out.int().tolist() == [[0, 1, 1, 0, 0], [0, 1, 1, 1, 1]]


def test_drop_truncated_rows() -> None:
    mask = torch.ones(2, 3)
    out = drop_truncated(mask, torch.tensor([False, True]))
    assert out.int().tolist() == [[1, 1, 1], [0, 0, 0]]


def test_all_zero_mask_is_an_error() -> None:
    require_nonempty(torch.tensor([[0, 1]]), "step 1")
    with pytest.raises(TrainingError, match="step 3: the loss mask selects no token"):
        require_nonempty(torch.zeros(2, 4), "step 3")
