from __future__ import annotations

import math

import pytest
import torch

from osmosis_trainer.grpo import group_advantages


def test_group_scaling_matches_hand_values() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([7, 7, 7, 7, 3, 3])
    res = group_advantages(rewards, groups, scale="group")
    std = math.sqrt(1.0 / 3.0)  # unbiased std of [1, 0, 1, 0]
    expected = [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 2 + [0.0, 0.0]
    assert res.advantages.tolist() == pytest.approx(expected, rel=1e-6)
    assert res.n_groups == 2
    assert res.n_zero_variance_groups == 1
    assert res.zero_variance.tolist() == [False] * 4 + [True, True]


def test_batch_scaling_uses_batch_std() -> None:
    rewards = torch.tensor([1.0, 0.0, 2.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1])
    res = group_advantages(rewards, groups, scale="batch")
    batch_std = math.sqrt(2.75 / 3.0)
    assert res.advantages.tolist() == pytest.approx(
        [0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4), 0.0, 0.0], rel=1e-6
    )


def test_none_scaling_only_centers() -> None:
    rewards = torch.tensor([3.0, 1.0, 2.0, 0.5, 0.5, 2.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    res = group_advantages(rewards, groups, scale="none")
    assert res.advantages.tolist() == pytest.approx([1.0, -1.0, 0.0, -0.5, -0.5, 1.0])
    assert res.n_zero_variance_groups == 0


def test_singleton_group_has_no_signal() -> None:
    res = group_advantages(torch.tensor([0.3, 1.0, 0.0]), torch.tensor([5, 9, 9]), scale="group")
    assert res.advantages[0].item() == 0.0
    assert res.zero_variance.tolist() == [True, False, False]
    assert res.n_zero_variance_groups == 1


def test_rejects_bad_shapes_and_modes() -> None:
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.long), scale="group")
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.zeros(2), torch.zeros(2, dtype=torch.long), scale="std")  # type: ignore[arg-type]
