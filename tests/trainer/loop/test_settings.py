"""One config, one set of defaults: the Python API and the TOML file train the same way."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from osmosis_ai.config import (
    AlgorithmConfig,
    CheckpointsConfig,
    SamplingConfig,
    TrainingSection,
    load_training_config,
)
from osmosis_trainer.loop import LoopSettings, Trainer, resolve_settings
from osmosis_trainer.loop._policy import attach_lora, lora_parameters
from osmosis_trainer.loop._run import create_run_dir
from osmosis_trainer.models import load_model
from tests.trainer.loop.toy import ToySource, even_token_reward, toy_rows

_EXPERIMENT = """
[experiment]
rollout = "toy"
entrypoint = "main.py"
model_path = "unused"
dataset = "unused"
"""

_TUNED = """
[training]
lr = 0.02
rollout_batch_size = 3
total_epochs = 3
seed = 7

[sampling]
max_tokens = 8

[algorithm]
warmup_steps = 1
lr_schedule = "cosine"
micro_batch_tokens = 64

[checkpoints]
checkpoint_save_freq = 2
"""


def _toml(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "configs" / "training" / "toy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_EXPERIMENT + body)
    return path


def test_defaults_are_the_sections_defaults(tmp_path: Path) -> None:
    """A TOML file naming no training setting and sections left out in code resolve alike."""
    from_file = resolve_settings(
        load_training_config(_toml(tmp_path, "")), n_rows=10, pad_id=0, device="cpu"
    )
    in_code = resolve_settings(n_rows=10, pad_id=0, device="cpu")
    assert from_file == in_code
    a = in_code.algorithm
    # The values the issue found duplicated with other defaults, now written once.
    assert (a.epsilon, a.epsilon_high, a.is_clip_max, a.max_failure_rate) == (0.2, 0.28, 3.0, 0.5)
    assert a.beta == 0.0 and a.is_correction == "token_truncate"
    assert in_code.checkpoints.checkpoint_save_freq == 20
    assert in_code.micro_batch_tokens == 256  # the CPU fp32 default of an unset budget
    assert resolve_settings(n_rows=10, pad_id=0, device="cuda:1").micro_batch_tokens == 8192
    bf16 = resolve_settings(n_rows=10, pad_id=0, device="cpu", dtype="bfloat16")
    assert bf16.micro_batch_tokens == 512  # bf16 activations take half the memory
    assert in_code.max_completion_length == in_code.training.max_response_length
    assert in_code.total_steps == 1  # 10 rows, 32 per step, one epoch


def test_sampling_resolves_once() -> None:
    greedy = resolve_settings(
        n_rows=4, pad_id=0, sampling=SamplingConfig(rollout_temperature=0.0, max_tokens=16)
    )
    assert greedy.temperature == 1.0  # greedy sampling: logprobs of the model itself
    assert greedy.max_completion_length == 16
    warm = resolve_settings(n_rows=4, pad_id=0, sampling=SamplingConfig(rollout_temperature=0.7))
    assert warm.temperature == 0.7


def test_config_and_sections_are_exclusive(tmp_path: Path) -> None:
    config = load_training_config(_toml(tmp_path, ""))
    with pytest.raises(TypeError, match="not both"):
        resolve_settings(config, n_rows=1, pad_id=0, training=TrainingSection())


async def _train(
    model_dir: Path, runs: Path, settings: LoopSettings
) -> tuple[list[float], dict[str, torch.Tensor]]:
    lm = load_model(str(model_dir))
    model = attach_lora(
        lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear",
        seed=settings.training.seed,
    )
    eos = int(lm.tokenizer.eos_token_id)
    source = ToySource(
        model, eos_id=eos, reward=even_token_reward(eos, min_len=2), n_samples=4,
        seed=settings.training.seed, max_new_tokens=settings.max_completion_length,
    )
    rows = toy_rows(lm.tokenizer, 5)
    trainer = Trainer(model, source, rows, settings, create_run_dir(runs, "toy"), tensorboard=False)
    result = await trainer.train()
    assert result.steps_done == settings.total_steps
    losses = [h["loss"] for h in result.history]
    return losses, {n: p.detach().clone() for n, p in lora_parameters(model)}


async def test_python_api_and_toml_train_identically(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = load_training_config(_toml(tmp_path, _TUNED))
    from_file = resolve_settings(config, n_rows=5, pad_id=0)
    in_code = resolve_settings(
        n_rows=5,
        pad_id=0,
        training=TrainingSection(lr=0.02, rollout_batch_size=3, total_epochs=3, seed=7),
        sampling=SamplingConfig(max_tokens=8),
        algorithm=AlgorithmConfig(warmup_steps=1, lr_schedule="cosine", micro_batch_tokens=64),
        checkpoints=CheckpointsConfig(checkpoint_save_freq=2),
    )
    assert from_file == in_code and from_file.total_steps == 6
    # pad_id from the tokenizer, as run_training does.
    pad = int(load_model(str(tiny_model_dir)).tokenizer.pad_token_id)
    losses_a, weights_a = await _train(
        tiny_model_dir, tmp_path / "a", replace(from_file, pad_id=pad)
    )
    losses_b, weights_b = await _train(tiny_model_dir, tmp_path / "b", replace(in_code, pad_id=pad))
    assert len(losses_a) == 6 and losses_a == losses_b
    assert weights_a.keys() == weights_b.keys()
    for name, w in weights_a.items():
        torch.testing.assert_close(weights_b[name], w, rtol=0, atol=0)
    # The run really trained: the B matrices left zero.
    assert any(float(w.abs().max()) > 0 for n, w in weights_a.items() if "lora_B" in n)
