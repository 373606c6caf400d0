from __future__ import annotations

import pytest

from osmosis_ai.config import AlgorithmConfig
from osmosis_trainer.checkpoints import DataPosition
from osmosis_trainer.loop import GradedSample, SequenceData
from osmosis_trainer.loop._batch import (
    TrainSequence,
    collate,
    common_prefix_len,
    plan_micro_batches,
)
from osmosis_trainer.loop._data import DataCursor, plan_steps
from osmosis_trainer.loop._prefix import PrefixUnit, collate_prefixed, plan_shared_prefix
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


def _seq(ids: list[int], n_prompt: int, group: int = 0) -> TrainSequence:
    mask = [0] * n_prompt + [1] * (len(ids) - n_prompt)
    return TrainSequence(ids, mask, [0.0] * len(ids), group_id=group)


def test_common_prefix_stops_at_the_first_trained_token() -> None:
    a = _seq([1, 2, 3, 4, 5, 6], 4)
    b = _seq([1, 2, 3, 4, 9], 4)
    c = _seq([1, 2, 7, 4, 9], 4)
    assert common_prefix_len([a, b]) == 4
    assert common_prefix_len([a, b, c]) == 2
    assert common_prefix_len([a, _seq([1, 2, 3, 4, 5, 6], 3)]) == 3


def test_plan_shared_prefix_packs_groups_by_cost() -> None:
    prompt = list(range(3, 23))  # 20 shared tokens
    seqs = [_seq(prompt + [50 + i] * (2 + i), 20, group=0) for i in range(4)]
    seqs += [_seq([7, 8, 9, 10, 11], 2, group=1), _seq([7, 8, 1, 2], 2, group=1)]
    seqs += [_seq(list(range(30, 60)), 25, group=2)]  # alone in its group
    seqs += [_seq([9] * 12 + [1, 2], 12, group=3), _seq([9] * 12 + [3], 12, group=3)]
    batches, rest = plan_shared_prefix(seqs, token_budget=1000, min_prefix=8)
    assert sorted(rest) == [4, 5, 6]  # group 1 shares 2 tokens only; group 2 is alone
    assert batches == [[PrefixUnit((3, 2, 1, 0), 20), PrefixUnit((7, 8), 12)]]
    # cost = G × longest prefix + B × longest continuation: 1 × 20 + 2 × 4 = 28 ≤ 30
    small, _ = plan_shared_prefix(seqs, token_budget=30, min_prefix=8)
    pieces = [u for b in small for u in b]
    assert PrefixUnit((3, 2), 20) in pieces and PrefixUnit((1, 0), 20) in pieces
    assert sum(len(u.members) for b in small for u in b) == 6


def test_a_group_that_fits_one_row_per_micro_batch_is_packed_plainly() -> None:
    prompt = list(range(3, 43))  # 40 shared tokens: with a continuation, one row fills 45
    seqs = [_seq(prompt + [50 + i] * 5, 40, group=0) for i in range(3)]
    batches, rest = plan_shared_prefix(seqs, token_budget=48, min_prefix=8)
    assert batches == [] and sorted(rest) == [0, 1, 2]
    batches, rest = plan_shared_prefix(seqs, token_budget=50, min_prefix=8)
    assert batches == [[PrefixUnit((0, 1), 40)]] and rest == [2]


def test_collate_prefixed_left_pads_prompts() -> None:
    seqs = [_seq([5, 6, 7, 1, 2], 3, group=0), _seq([5, 6, 7, 3], 3, group=0)]
    seqs += [_seq([8, 9, 4, 4], 2, group=1)]
    units = [PrefixUnit((0, 1), 3), PrefixUnit((2,), 2)]
    mb, order = collate_prefixed(seqs, units, pad_id=0)
    assert order == [0, 1, 2]
    assert mb.prefix is not None
    assert mb.prefix.ids.tolist() == [[5, 6, 7], [0, 8, 9]]
    assert mb.prefix.mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert mb.prefix.row_group.tolist() == [0, 0, 1]
    assert mb.input_ids.tolist() == [[1, 2], [3, 0], [4, 4]]
    assert mb.mask.tolist() == [[True, True], [True, False], [True, True]]
