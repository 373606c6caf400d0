from __future__ import annotations

import math

import pytest
import torch

from osmosis_trainer.grpo import importance_weights

# Sampler logprobs deliberately shifted from the trainer's: token 0 has w = 4, token 1 w = 0.5.
OLD = torch.zeros(1, 3)
SAMPLER = torch.tensor([[math.log(0.25), math.log(2.0), 0.0]])
MASK = torch.tensor([[1, 1, 0]])


def test_token_truncate() -> None:
    res = importance_weights(OLD, SAMPLER, MASK, mode="token_truncate", clip_max=2.0)
    assert res.weights.tolist()[0] == pytest.approx([2.0, 0.5, 0.0])
    assert res.ratio_max == pytest.approx(4.0)
    assert res.ratio_min == pytest.approx(0.5)
    assert res.clipped_frac == pytest.approx(0.5)


def test_token_truncate_with_min() -> None:
    res = importance_weights(OLD, SAMPLER, MASK, mode="token_truncate", clip_min=0.8, clip_max=5)
    assert res.weights.tolist()[0] == pytest.approx([4.0, 0.8, 0.0])


def test_token_mask() -> None:
    res = importance_weights(OLD, SAMPLER, MASK, mode="token_mask", clip_min=0.4, clip_max=2.0)
    assert res.weights.tolist()[0] == pytest.approx([0.0, 0.5, 0.0])
    assert res.clipped_frac == pytest.approx(0.5)


def test_sequence_modes_use_the_summed_log_ratio() -> None:
    # sum of (old - sampler) over the masked tokens = log 4 + log 0.5 = log 2 -> w = 2.
    trunc = importance_weights(OLD, SAMPLER, MASK, mode="sequence_truncate", clip_max=1.5)
    assert trunc.weights.tolist()[0] == pytest.approx([1.5, 1.5, 0.0])
    masked = importance_weights(OLD, SAMPLER, MASK, mode="sequence_mask", clip_max=1.5)
    assert masked.weights.tolist()[0] == pytest.approx([0.0, 0.0, 0.0])
    kept = importance_weights(OLD, SAMPLER, MASK, mode="sequence_mask", clip_max=3.0)
    assert kept.weights.tolist()[0] == pytest.approx([2.0, 2.0, 0.0])


def test_matching_sampler_gives_unit_weights_and_zero_mismatch() -> None:
    logp = torch.log(torch.tensor([[0.2, 0.7]]))
    res = importance_weights(logp, logp.clone(), torch.ones(1, 2), mode="token_truncate", clip_max=2)
    assert res.weights.tolist()[0] == pytest.approx([1.0, 1.0])
    assert res.mismatch_kl == pytest.approx(0.0, abs=1e-7)
    assert res.clipped_frac == 0.0


def test_mismatch_kl_is_positive_when_shifted() -> None:
    res = importance_weights(OLD, SAMPLER, MASK, mode="token_truncate", clip_max=2.0)
    # k3 with r = sampler - old: mean of (e^r - r - 1) over the two masked tokens.
    expected = ((0.25 - math.log(0.25) - 1) + (2.0 - math.log(2.0) - 1)) / 2
    assert res.mismatch_kl == pytest.approx(expected)


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="IS mode"):
        importance_weights(OLD, SAMPLER, MASK, mode="tokens", clip_max=2.0)  # type: ignore[arg-type]
