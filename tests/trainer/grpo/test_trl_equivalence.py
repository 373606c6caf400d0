"""Our GRPO update against TRL's ``GRPOTrainer`` on the same batch: same loss, same LoRA gradients.

One batch is built once (a tiny Qwen2 with a LoRA adapter whose ``B`` matrices are non-zero, two
prompts of equal length with three completions each, completions of different lengths, fixed
advantages). Our side runs :func:`osmosis_trainer.loop.policy_update` (micro-batching, shared
prompt prefixes included) with an optimizer that records the gradients it
is handed; TRL's side calls its own ``GRPOTrainer._compute_loss`` (fused LM head included) on
the inputs dict its generation step would build, and backpropagates. Both act on the very same
peft model object, so parameters cannot drift apart.

With ``num_iterations = 2`` the second optimizer step trains against the logprobs recorded
before the first, so its importance ratios are away from 1 and the PPO clip is active: TRL gets
the same ``old_per_token_logps``. TRL (without vLLM) applies no sampler importance correction,
so ours runs with ``is_correction = "none"`` here. The KL term is compared with TRL's
``use_bias_correction_kl`` off (its default weights k3 by the importance ratio, an estimator
ours does not implement).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("trl")

from osmosis_ai.config import AlgorithmConfig, SamplingConfig
from osmosis_trainer.grpo import LossType
from osmosis_trainer.loop import resolve_settings
from osmosis_trainer.loop._batch import TrainSequence
from osmosis_trainer.loop._policy import attach_lora
from osmosis_trainer.loop._update import policy_update
from osmosis_trainer.models import load_model

LOSS_TYPES: list[LossType] = ["grpo", "bnpo", "dr_grpo", "dapo"]
MAX_COMPLETION = 12
TEMPERATURE = 0.9
LR = 0.3
"""SGD step between the two iterations: big enough to move ratios past the clip range."""
EPS_LOW, EPS_HIGH = 0.2, 0.28
TOL = 1e-6


class RecordingSGD(torch.optim.SGD):
    """Plain SGD that keeps a copy of every gradient it applies (one dict per step)."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]], lr: float) -> None:
        super().__init__([p for _, p in named], lr=lr)
        self.named = named
        self.grads: list[dict[str, torch.Tensor]] = []

    def step(self, closure: Any = None) -> Any:
        self.grads.append({n: p.grad.detach().clone() for n, p in self.named if p.grad is not None})
        return super().step(closure)


def _assert_close(ours: torch.Tensor, theirs: torch.Tensor, where: str) -> None:
    torch.testing.assert_close(ours, theirs, rtol=TOL, atol=TOL, msg=lambda m: f"{where}: {m}")


def _batch() -> tuple[list[list[int]], list[list[int]], list[float]]:
    """Two prompts (6 tokens each) x 3 completions of 5..12 tokens, and fixed advantages."""
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, 300, (6,), generator=g).tolist() for _ in range(2)]
    completions = [
        torch.randint(3, 300, (n,), generator=g).tolist() for n in (12, 5, 9, 7, 12, 10)
    ]
    advantages = [1.2, -0.4, -0.8, 0.9, -1.1, 0.2]
    return [prompts[i // 3] for i in range(6)], completions, advantages


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 at the usual init scale: logits of ordinary size, so fp32 rounding in two
    different forward implementations stays near 1e-7."""
    from osmosis_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("trl-eq") / "model")


def _policy(model_dir: Path) -> tuple[torch.nn.Module, Any]:
    lm = load_model(str(model_dir))
    model = attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=3)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # a trained-looking adapter: the KL term is not zero
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model, lm.tokenizer


def _trl_trainer(
    model: torch.nn.Module, tokenizer: Any, tmp: Path, loss_type: str, beta: float
) -> Any:
    from datasets import Dataset
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    config = GRPOConfig(
        output_dir=str(tmp / "trl"),
        per_device_train_batch_size=6,
        num_generations=3,
        max_completion_length=MAX_COMPLETION,
        temperature=TEMPERATURE,
        loss_type=loss_type,
        beta=beta,
        # TRL 1.16 multiplies the k3 KL by the (differentiable) importance ratio by default
        # (DeepSeek-V3.2's unbiased estimator); ours is the plain k3 term, as TRL's with this off.
        use_bias_correction_kl=False,
        epsilon=EPS_LOW,
        epsilon_high=EPS_HIGH,
        num_iterations=2,
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        save_strategy="no",
        disable_tqdm=True,
    )
    def no_reward(completions: list[Any], **_: Any) -> list[float | None]:
        return [0.0] * len(completions)

    peft_model: Any = model
    trainer = GRPOTrainer(
        model=peft_model,
        processing_class=tokenizer,
        reward_funcs=no_reward,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": "x"}] * 6),
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def _trl_inputs(
    trainer: Any, prompts: list[list[int]], completions: list[list[int]], advantages: list[float]
) -> dict[str, torch.Tensor]:
    width = max(len(c) for c in completions)
    completion_ids = torch.tensor([c + [0] * (width - len(c)) for c in completions])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completions])
    prompt_ids = torch.tensor(prompts)
    prompt_mask = torch.ones_like(prompt_ids)
    inputs: dict[str, torch.Tensor] = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor(advantages),
        "num_items_in_batch": completion_mask.sum(),
    }
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    with torch.no_grad():
        # TRL's own logprob pass, as its generation step runs it: before the first optimizer
        # step (old), and with the adapter disabled (reference).
        inputs["old_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention, width
        )[0]
        if trainer.beta != 0.0:
            with trainer.model.disable_adapter():
                inputs["ref_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                    trainer.model, input_ids, attention, width
                )[0]
    return inputs


@pytest.mark.parametrize("beta", [0.0, 0.05], ids=["no-kl", "kl"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_loss_and_lora_gradients_match_trl(
    model_dir: Path, tmp_path: Path, loss_type: LossType, beta: float
) -> None:
    prompts, completions, advantages = _batch()
    model, tokenizer = _policy(model_dir)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    start = {n: p.detach().clone() for n, p in named}

    # Ours: two optimizer steps over the batch, one micro-batch per group's shared prompt.
    seqs = [
        TrainSequence(p + c, [0] * len(p) + [1] * len(c), [0.0] * (len(p) + len(c)), advantage=a)
        for p, c, a in zip(prompts, completions, advantages, strict=True)
    ]
    settings = resolve_settings(
        n_rows=2, pad_id=0,
        algorithm=AlgorithmConfig(
            loss_type=loss_type, beta=beta, epsilon=EPS_LOW, epsilon_high=EPS_HIGH,
            is_correction="none", num_iterations=2, max_grad_norm=None,
            micro_batch_tokens=10_000,
        ),
        sampling=SamplingConfig(max_tokens=MAX_COMPLETION, rollout_temperature=TEMPERATURE),
    )
    ours = RecordingSGD(named, lr=LR)
    our_loss = policy_update(model, ours, seqs, settings).loss
    assert len(ours.grads) == 2

    # TRL: same start, its loss, backward, the same SGD step, its loss again.
    with torch.no_grad():
        for n, p in named:
            p.copy_(start[n])
    trainer = _trl_trainer(model, tokenizer, tmp_path, loss_type, beta)
    inputs = _trl_inputs(trainer, prompts, completions, advantages)
    theirs = RecordingSGD(named, lr=LR)
    model.train()
    trl_losses = []
    for _ in range(2):
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
        trl_losses.append(float(loss.item()))
        theirs.step()
        theirs.zero_grad(set_to_none=True)
    model.eval()

    clipped = trainer._metrics["train"]["clip_ratio/region_mean"][-1]
    assert clipped > 0.0, "the second iteration should clip some tokens (raise LR)"
    assert abs(our_loss - trl_losses[1]) <= TOL, (our_loss, trl_losses)
    for step in range(2):
        assert ours.grads[step].keys() == theirs.grads[step].keys()
        for name, grad in theirs.grads[step].items():
            _assert_close(ours.grads[step][name], grad, f"step {step + 1}, {name}")
