from __future__ import annotations

from pathlib import Path

import pytest
import torch

from osmosis_trainer.loop._policy import attach_lora, lora_parameters
from osmosis_trainer.loop._prefix import micro_batches
from osmosis_trainer.models import load_model
from osmosis_trainer.trajectory import TrainingSequence
from osmosis_trainer.warm_start._phase import WarmStartSettings, _sequences, warm_update
from osmosis_trainer.warm_start._render import RenderedDemo


def _demos(n: int = 5) -> list[RenderedDemo]:
    """Demonstrations sharing a 20-token head (the system prompt and tools of a real step)."""
    g = torch.Generator().manual_seed(3)
    head = torch.randint(3, 300, (20,), generator=g).tolist()
    demos = []
    for i in range(n):
        question = torch.randint(3, 300, (4 + i,), generator=g).tolist()
        answer = torch.randint(3, 300, (3 + 2 * i,), generator=g).tolist()
        ids = head + question + answer
        mask = [0] * (len(head) + len(question)) + [1] * len(answer)
        demos.append(RenderedDemo(line=i + 1, sequences=[TrainingSequence(
            token_ids=ids, loss_mask=mask, sampler_logprobs=[0.0] * len(ids), call_ids=[f"c{i}"]
        )]))
    return demos


def _settings(share: bool) -> WarmStartSettings:
    return WarmStartSettings(epochs=1, lr=1.0, batch_size=8, micro_batch_tokens=4096, pad_id=0,
                             max_grad_norm=None, share_prefix=share)


def test_the_step_shares_its_demonstrations_head() -> None:
    seqs = _sequences(_demos())
    shared = micro_batches(seqs, token_budget=4096, pad_id=0, share_prefix=True)
    assert len(shared) == 1 and shared[0].prefix is not None
    assert shared[0].prefix.ids.shape == (1, 20)  # the head, run once for the 5 demonstrations
    plain = micro_batches(seqs, token_budget=4096, pad_id=0, share_prefix=False)
    assert [b.prefix for b in plain] == [None]


def test_a_shared_head_gives_the_same_warm_start_step(tiny_model_dir: Path) -> None:
    results = []
    for share in (False, True):
        lm = load_model(str(tiny_model_dir))
        model = attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0)
        for name, p in lora_parameters(model):
            if "lora_B" in name:  # a non-zero adapter, so the head's gradient matters
                torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(1))
        opt = torch.optim.SGD([p for _, p in lora_parameters(model)], lr=1.0)
        stats = warm_update(model, opt, _sequences(_demos()), _settings(share))
        results.append((stats, {n: p.detach().clone() for n, p in lora_parameters(model)}))
    (plain_stats, plain), (shared_stats, shared) = results
    assert shared_stats[0] == pytest.approx(plain_stats[0], abs=1e-5)  # loss
    assert shared_stats[1:3] == plain_stats[1:3]  # token accuracy, tokens
    for name in plain:
        # float rounding: in float64 both paths agree with the plain forward to 1e-9
        torch.testing.assert_close(shared[name], plain[name], rtol=1e-3, atol=1e-5)
