from __future__ import annotations

import pytest

from osmosis_ai.config import AlgorithmConfig
from osmosis_trainer.checkpoints import DataPosition
from osmosis_trainer.loop import GradedSample, SequenceData
from osmosis_trainer.loop._batch import (
    TrainSequence,
    collate,
    plan_micro_batches,
)
from osmosis_trainer.loop._data import DataCursor, plan_steps
from osmosis_trainer.loop._rollouts import build_train_batch


def test_plan_micro_batches_respects_the_budget() -> None:
    lengths = [10, 30, 20, 25, 5, 100]
    plan = plan_micro_batches(lengths, token_budget=60)
    assert sorted(i for mb in plan for i in mb) == list(range(6))
    assert plan[0] == [5]  # longer than the budget: alone
    for mb in plan[1:]:
        assert max(lengths[i] for i in mb) * len(mb) <= 60
    assert plan_micro_batches(lengths, 10_000) == [[5, 1, 3, 2, 0, 4]]
    with pytest.raises(ValueError):
        plan_micro_batches(lengths, 0)


def test_collate_right_pads_and_shifts() -> None:
    a = TrainSequence([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.25], advantage=1.0, weight=0.5)
    b = TrainSequence([4, 5], [0, 1], [0.0, -1.0], advantage=-1.0)
    mb = collate([a, b], pad_id=9)
    assert mb.input_ids.tolist() == [[1, 2, 3], [4, 5, 9]]
    assert mb.mask.tolist() == [[True, True], [True, False]]
    assert mb.sampler_logp.tolist() == [[-0.5, -0.25], [-1.0, 0.0]]
    assert mb.advantages.tolist() == [1.0, -1.0]
    assert mb.weights.tolist() == [0.5, 1.0]
    assert mb.n_tokens == 3
    with pytest.raises(ValueError, match="same length"):
        TrainSequence([1, 2], [0], [0.0, 0.0])


def _sample(group: int, rid: str, reward: float, n_seqs: int = 1) -> GradedSample:
    seq = SequenceData([1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0])
    return GradedSample(group, rid, "main", reward, [seq] * n_seqs, completion_tokens=2)


def test_build_train_batch_weights_rollouts_equally_and_skips_flat_groups() -> None:
    samples = [
        _sample(0, "a", 1.0, n_seqs=2),
        _sample(0, "b", 0.0),
        _sample(1, "c", 0.5),
        _sample(1, "d", 0.5),
    ]
    batch = build_train_batch(samples, AlgorithmConfig(scale_rewards="none"))
    assert batch.n_groups == 2 and batch.n_zero_variance_groups == 1
    assert [(s.rollout_id, s.advantage, s.weight) for s in batch.sequences] == [
        ("a", 0.5, 0.5), ("a", 0.5, 0.5), ("b", -0.5, 1.0)
    ]
    kept = build_train_batch(
        samples, AlgorithmConfig(scale_rewards="none", skip_zero_variance_groups=False)
    )
    assert len(kept.sequences) == 5
    assert [s.advantage for s in kept.sequences[-2:]] == [0.0, 0.0]


def test_build_train_batch_masks_truncated() -> None:
    samples = [_sample(0, "a", 1.0), _sample(0, "b", 0.0), _sample(0, "c", 0.0)]
    samples[0].truncated = True
    batch = build_train_batch(samples, AlgorithmConfig(mask_truncated_completions=True))
    assert batch.n_samples == 2 and batch.sequences == []  # the rest is a flat group


def test_data_cursor_resumes_the_same_order() -> None:
    rows = list(range(10))
    a = DataCursor(rows, 4, seed=3)
    first = [a.next_batch() for _ in range(5)]
    assert sorted(first[0] + first[1] + first[2]) == rows  # one epoch, last batch short
    assert len(first[2]) == 2
    b = DataCursor(rows, 4, seed=3)
    b.next_batch()
    b.next_batch()
    c = DataCursor(rows, 4, seed=3, position=b.position)
    assert [c.next_batch() for _ in range(3)] == first[2:]
    assert DataCursor(rows, 4, seed=4).next_batch() != first[0]
    assert c.position == DataPosition(epoch=1, offset=8)


def test_plan_steps() -> None:
    assert plan_steps(10, 4, epochs=2, max_steps=None) == 6
    assert plan_steps(10, 4, epochs=2, max_steps=5) == 5
    assert plan_steps(0, 4, epochs=1, max_steps=None) == 0
