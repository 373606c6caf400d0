"""Learning tests: on a toy task, mean reward rises from its start to at least 0.9.

The task: a tiny random model (large initializer, so LoRA can move its logits) is rewarded by
the fraction of even token ids in its completion, EOS excluded and at least 4 tokens required
(otherwise the policy learns to emit EOS at once, EOS having an even id).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from osmosis_ai.config import (
    CheckpointsConfig,
    SamplingConfig,
    TrainingSection,
    load_training_config,
)
from osmosis_trainer.job import run_training
from osmosis_trainer.loop import StepReport, Trainer, resolve_settings
from osmosis_trainer.loop._policy import attach_lora
from osmosis_trainer.loop._run import create_run_dir
from osmosis_trainer.models import build_tiny_model, load_model
from tests.e2e.toy_workspace import make_workspace
from tests.trainer.loop.toy import ToySource, even_token_reward, toy_rows


@pytest.fixture(scope="module")
def learnable_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny_lr"), initializer_range=0.5, seed=0)


def _assert_learned(rewards: list[float]) -> None:
    start = statistics.fmean(rewards[:3])
    end = statistics.fmean(rewards[-3:])
    assert start < 0.8, f"the task is too easy to show learning: start {start:.3f}"
    assert end >= 0.9, f"mean reward rose only from {start:.3f} to {end:.3f}: {rewards}"


async def test_reward_rises_pure_loop(learnable_model: Path, tmp_path: Path) -> None:
    """The loop alone (in-process sampling, no HTTP), ~10 s on 2 cores."""
    lm = load_model(str(learnable_model))
    model = attach_lora(lm.model, r=8, alpha=16, dropout=0.0, target_modules="all-linear", seed=0)
    eos = int(lm.tokenizer.eos_token_id)
    source = ToySource(model, eos_id=eos, reward=even_token_reward(eos), max_new_tokens=8)
    rows = toy_rows(lm.tokenizer, 8)
    settings = resolve_settings(
        n_rows=len(rows),
        pad_id=int(lm.tokenizer.pad_token_id),
        training=TrainingSection(rollout_batch_size=8, lr=3e-2, total_epochs=30, seed=0),
        sampling=SamplingConfig(max_tokens=8),
        checkpoints=CheckpointsConfig(checkpoint_save_freq=30),
    )
    rewards: list[float] = []

    def record(report: StepReport) -> None:
        rewards.append(report.metrics["reward_mean"])

    run = create_run_dir(tmp_path, "learn")
    trainer = Trainer(
        model, source, rows, settings, run, on_report=record,
        tensorboard=False,
    )
    await trainer.train()
    _assert_learned(rewards)


async def test_reward_rises_through_gateway(learnable_model: Path, tmp_path: Path) -> None:
    """The real path: runner → ctx.chat → policy gateway → HFEngine, adapter pushed each step
    (~5-10 s on 2 cores)."""
    eos = int(load_model(str(learnable_model)).tokenizer.eos_token_id)
    config_file = make_workspace(
        tmp_path / "ws", learnable_model, eos_id=eos, max_steps=25, rollout_batch_size=8,
        total_epochs=50, extra_toml="\n[checkpoints]\ncheckpoint_save_freq = 25\n",
    )
    config = load_training_config(config_file)
    rewards: list[float] = []

    def record(report: StepReport) -> None:
        if report.kind == "train":
            rewards.append(report.metrics["reward_mean"])

    run = create_run_dir(tmp_path / "runs", "even")
    result = await run_training(config, run, on_report=record)
    assert result.status == "finished" and result.steps_done == 25
    _assert_learned(rewards)
