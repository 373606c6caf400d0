from __future__ import annotations

import pytest
import torch

from osmosis_ai.errors import TrainingError
from osmosis_trainer.grpo import require_nonempty, shift_mask


def test_shift_aligns_the_mask_with_next_token_logits() -> None:
    loss_mask = torch.tensor([[0, 0, 1, 1, 0, 1]])
    assert shift_mask(loss_mask).tolist() == [[0, 1, 1, 0, 1]]


def test_all_zero_mask_is_an_error() -> None:
    require_nonempty(torch.tensor([[0, 1]]), "step 1")
    with pytest.raises(TrainingError, match="step 3: the loss mask selects no token"):
        require_nonempty(torch.zeros(2, 4), "step 3")
