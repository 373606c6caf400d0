from __future__ import annotations

import math

import pytest
import torch

from osmosis_trainer.grpo import (
    LossNormalizers,
    aggregate_token_loss,
    clipped_token_loss,
    entropy_from_logits,
    entropy_from_logprobs,
    k3_kl,
    masked_mean,
)


def test_clipped_loss_hand_values() -> None:
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 0.5, 1.5]])).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = clipped_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.2)
    assert loss.tolist()[0] == pytest.approx([-1.2, -0.5, 0.8, 1.5])
    assert clipped.tolist()[0] == [True, False, True, False]
    loss.sum().backward()
    assert logp.grad is not None
    # d(-ratio*A)/dlogp = -ratio*A where unclipped; 0 where the clipped term was taken.
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -0.5, 0.0, 1.5])


def test_eps_high_and_delta() -> None:
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.25, 5.0]]))
    adv = torch.tensor([1.0])
    loss, _ = clipped_token_loss(logp, old, adv, eps_low=0.2, eps_high=0.28)
    assert loss.tolist()[0] == pytest.approx([-1.25, -1.28])
    loss_neg, _ = clipped_token_loss(
        logp, old, torch.tensor([-1.0]), eps_low=0.2, eps_high=0.28, delta=3.0
    )
    # A < 0: min(-ratio, -clip) = -ratio, but the unclipped ratio is capped at delta.
    assert loss_neg.tolist()[0] == pytest.approx([1.25, 3.0])


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    token_loss = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    return token_loss, mask


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [("grpo", 3.0), ("bnpo", 2.5), ("dr_grpo", 1.25), ("dapo", 2.5)],
)
def test_aggregation_modes(loss_type: str, expected: float) -> None:
    token_loss, mask = _batch()
    norm = LossNormalizers(total_tokens=4, total_sequences=2, max_completion_length=4)
    out = aggregate_token_loss(token_loss, mask, loss_type, norm)  # type: ignore[arg-type]
    assert out.item() == pytest.approx(expected)


def test_micro_batches_sum_to_the_full_loss_except_bnpo() -> None:
    token_loss, mask = _batch()
    for loss_type, full in [("grpo", 3.0), ("dr_grpo", 1.25), ("dapo", 2.5), ("bnpo", 3.0)]:
        norm = LossNormalizers(4, 2, 4, num_micro_batches=2)
        parts = [
            aggregate_token_loss(token_loss[i : i + 1], mask[i : i + 1], loss_type, norm)  # type: ignore[arg-type]
            for i in range(2)
        ]
        # bnpo normalises by each micro-batch's own tokens: (6/3 + 4/1) / 2 = 3.
        assert sum(p.item() for p in parts) == pytest.approx(full), loss_type


def test_sequence_weights() -> None:
    token_loss, mask = _batch()
    w = torch.tensor([0.5, 1.0])
    norm = LossNormalizers(total_tokens=0.5 * 3 + 1, total_sequences=1.5, max_completion_length=4)
    dapo = aggregate_token_loss(token_loss, mask, "dapo", norm, seq_weights=w)
    assert dapo.item() == pytest.approx((0.5 * 6 + 4) / 2.5)
    grpo = aggregate_token_loss(token_loss, mask, "grpo", norm, seq_weights=w)
    assert grpo.item() == pytest.approx((0.5 * 2 + 4) / 1.5)


def test_unknown_loss_type() -> None:
    token_loss, mask = _batch()
    with pytest.raises(ValueError, match="loss_type"):
        aggregate_token_loss(token_loss, mask, "sum", LossNormalizers(1, 1, 1))  # type: ignore[arg-type]


def test_k3_kl_hand_value_and_zero_at_equality() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.3]]))
    ref = torch.log(torch.tensor([[0.25, 0.3]]))
    kl = k3_kl(logp, ref)
    assert kl[0, 0].item() == pytest.approx(0.5 + math.log(2.0) - 1.0)
    assert kl[0, 1].item() == pytest.approx(0.0, abs=1e-7)


def test_entropy_and_masked_mean() -> None:
    logits = torch.zeros(2, 4)
    assert entropy_from_logits(logits).tolist() == pytest.approx([math.log(4)] * 2)
    half = torch.log(torch.tensor([[0.5, 0.5, 0.0]]))  # a zero-probability token adds nothing
    assert entropy_from_logprobs(half.clamp(min=-1e4)).tolist() == pytest.approx([math.log(2)])
    v = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert masked_mean(v, torch.tensor([[1, 0], [1, 1]])).item() == pytest.approx(8 / 3)
    assert masked_mean(v, torch.zeros(2, 2)).item() == 0.0
