from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from osmosis_ai.config import AlgorithmConfig, CheckpointsConfig, SamplingConfig, TrainingSection
from osmosis_ai.errors import TrainingError
from osmosis_trainer.checkpoints import latest_checkpoint, list_checkpoints, load_checkpoint
from osmosis_trainer.loop import StepReport, Trainer, resolve_settings
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._policy import attach_lora, lora_parameters
from osmosis_trainer.loop._run import create_run_dir, read_status
from osmosis_trainer.models import load_model
from tests.trainer.loop.toy import ToySource, even_token_reward, toy_rows


def _setup(
    model_dir: Path,
    runs: Path,
    *,
    steps: int = 4,
    every: int = 2,
    eval_interval: int | None = None,
    **algorithm: Any,
) -> tuple[Trainer, ToySource]:
    lm = load_model(str(model_dir))
    model = attach_lora(lm.model, r=4, alpha=8, dropout=0.0, target_modules="all-linear", seed=0)
    eos = int(lm.tokenizer.eos_token_id)
    source = ToySource(model, eos_id=eos, reward=even_token_reward(eos, min_len=2), n_samples=4)
    rows = toy_rows(lm.tokenizer, 5)
    settings = resolve_settings(
        n_rows=len(rows),
        pad_id=int(lm.tokenizer.pad_token_id),
        training=TrainingSection(
            rollout_batch_size=3, lr=2e-2, seed=0, total_epochs=steps, max_steps=steps
        ),
        algorithm=AlgorithmConfig(warmup_steps=1, lr_schedule="cosine", **algorithm),
        sampling=SamplingConfig(max_tokens=8),
        checkpoints=CheckpointsConfig(checkpoint_save_freq=every, eval_interval=eval_interval),
    )
    assert settings.total_steps == steps
    run = create_run_dir(runs, "toy")
    trainer = Trainer(model, source, rows, settings, run, tensorboard=False)
    return trainer, source


def _lora(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in lora_parameters(trainer.model)}


async def test_resume_matches_an_uninterrupted_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    full, _ = _setup(tiny_model_dir, tmp_path / "a")
    result = await full.train()
    assert result.status == "finished" and result.steps_done == 4
    want = _lora(full)

    part, _ = _setup(tiny_model_dir, tmp_path / "b")

    def stop_after_two(report: StepReport) -> None:
        if report.step == 2:
            part.run_dir.stop_file.touch()

    part.on_report = stop_after_two
    stopped = await part.train()
    assert stopped.status == "stopped" and stopped.steps_done == 2
    assert read_status(part.run_dir.path)["status"] == "stopped"  # type: ignore[index]
    part.run_dir.stop_file.unlink()

    resumed, source = _setup(tiny_model_dir, tmp_path / "c")
    resumed.run_dir = part.run_dir  # continue the stopped run's folder
    from osmosis_trainer.loop._metrics import MetricsWriter

    resumed.metrics = MetricsWriter(part.run_dir.path, tensorboard=False)
    assert await resumed.resume()
    assert resumed.step == 2 and source.pushed[-1][1] == 2
    done = await resumed.train()
    assert done.steps_done == 4
    got = _lora(resumed)
    assert want.keys() == got.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)
    steps = [r["step"] for r in read_metrics(part.run_dir.path / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4]


async def test_checkpoints_metrics_and_status(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer, source = _setup(tiny_model_dir, tmp_path, steps=3, every=2)
    reports: list[StepReport] = []
    trainer.on_report = reports.append
    await trainer.train()
    ckpts = list_checkpoints(trainer.run_dir.checkpoints)
    assert [p.name for p in ckpts] == ["step_000002", "step_000003"]  # every 2 + the end
    assert latest_checkpoint(trainer.run_dir.checkpoints) == ckpts[-1]
    state = load_checkpoint(ckpts[0])
    assert state.step == 2 and state.data.offset == 5 and state.data.epoch == 0
    assert not list(trainer.run_dir.checkpoints.glob(".*"))  # no temp leftovers
    status = json.loads((trainer.run_dir.path / "status.json").read_text())
    assert status["status"] == "finished" and status["step"] == 3
    assert status["last_checkpoint"].endswith("step_000003")
    records = read_metrics(trainer.run_dir.path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    for key in (
        "reward_mean", "reward_std", "pass_rate", "entropy", "response_length",
        "truncation_ratio", "kl", "is_ratio_mean", "prefix_mismatch", "zero_variance_groups",
        "step_time_s", "tokens_per_s", "failed_rollouts", "lr", "loss", "grad_norm",
    ):
        assert key in records[0], key
    assert [r.step for r in reports] == [1, 2, 3]
    assert [v for _, v in source.pushed] == [1, 2, 3]
    # Only the newest adapters are kept for serving.
    assert len(list(trainer.run_dir.adapters.glob("step_*"))) == 2


async def test_checkpoint_adapter_loads_with_peft(tiny_model_dir: Path, tmp_path: Path) -> None:
    from peft import PeftModel

    trainer, _ = _setup(tiny_model_dir, tmp_path, steps=2, every=2)
    await trainer.train()
    ckpt = latest_checkpoint(trainer.run_dir.checkpoints)
    assert ckpt is not None
    loaded = PeftModel.from_pretrained(load_model(str(tiny_model_dir)).model, str(ckpt / "adapter"))
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, trainer.model(input_ids=ids).logits)


async def test_failure_budget_stops_the_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer, source = _setup(tiny_model_dir, tmp_path, max_failure_rate=0.1)
    source.failures_per_step = 4  # 4 of 16 rollouts fail: 25% > 10%
    with pytest.raises(TrainingError, match=r"step 1: 4 of 16 rollouts failed .*agent_error ×4"):
        await trainer.train()
    status = read_status(trainer.run_dir.path)
    assert status is not None and status["status"] == "failed"


async def test_failures_within_budget_are_counted(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer, source = _setup(tiny_model_dir, tmp_path, steps=1, max_failure_rate=0.5)
    source.failures_per_step = 2
    await trainer.train()
    rec = read_metrics(trainer.run_dir.path / "metrics.jsonl")[0]
    assert rec["failed_rollouts"] == 2 and rec["rollouts"] == 14 and rec["failed/agent_error"] == 2
    assert rec["samples"] == 12  # failures are excluded, never scored 0
    logged = json.loads((trainer.run_dir.path / "failures.jsonl").read_text())
    assert logged["step"] == 1 and logged["reasons"] == {"agent_error": 2}
    assert "boom" in logged["examples"][0]


async def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer, source = _setup(tiny_model_dir, tmp_path, steps=4, every=1)
    good_reward = source.reward

    def poisoned(completion: list[int]) -> float:
        return float("nan") if len(source.pushed) >= 2 else good_reward(completion)

    source.reward = poisoned
    with pytest.raises(TrainingError, match=r"loss is nan.*last good checkpoint is kept: .*step_000002"):
        await trainer.train()
    status = read_status(trainer.run_dir.path)
    assert status is not None and status["status"] == "failed" and status["step"] == 2
    assert [p.name for p in list_checkpoints(trainer.run_dir.checkpoints)] == [
        "step_000001", "step_000002"
    ]


async def test_zero_variance_groups_give_no_update(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer, source = _setup(tiny_model_dir, tmp_path, steps=1, every=100)
    source.reward = lambda completion: 0.5
    before = _lora(trainer)
    await trainer.train()
    rec = read_metrics(trainer.run_dir.path / "metrics.jsonl")[0]
    assert rec["zero_variance_groups"] == 3 and rec["groups"] == 3
    assert "loss" not in rec and source.pushed == []
    assert all(torch.equal(before[n], p) for n, p in _lora(trainer).items())


async def test_validation_every_eval_interval(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer, _ = _setup(tiny_model_dir, tmp_path, steps=2, every=100, eval_interval=1)
    trainer.eval_rows = toy_rows(load_model(str(tiny_model_dir)).tokenizer, 2)
    await trainer.train()
    records = read_metrics(trainer.run_dir.path / "metrics.jsonl")
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [1, 2]
    assert evals[0]["val_samples"] == 2 and "val_reward_mean" in evals[0]


@pytest.mark.parametrize("ahead", [0, 1])
async def test_the_policy_frees_idle_memory_only_when_no_rollout_overlaps_the_update(
    tiny_model_dir: Path, tmp_path: Path, ahead: int
) -> None:
    trainer, source = _setup(tiny_model_dir, tmp_path, steps=3, every=3, rollouts_ahead=ahead)
    await trainer.train()
    assert source.pushed  # the toy's rewards give updates
    # Each update is preceded by a release when nothing runs ahead, and by none otherwise.
    expected = ["release", "push"] * len(source.pushed) if ahead == 0 else ["push"] * len(
        source.pushed
    )
    assert source.events == expected
