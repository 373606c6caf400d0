"""run_training on a tiny model through the real gateway (the CLI: tests/trainer/runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from osmosis_ai.config import load_training_config
from osmosis_ai.errors import TrainingError
from osmosis_trainer.checkpoints import list_checkpoints
from osmosis_trainer.job import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir, read_status
from osmosis_trainer.models import load_model, training_dtype
from tests.e2e.toy_workspace import make_workspace


def _eos(model_dir: Path) -> int:
    return int(load_model(str(model_dir)).tokenizer.eos_token_id)


async def test_run_training_end_to_end(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = make_workspace(
        tmp_path / "ws",
        tiny_model_dir,
        eos_id=_eos(tiny_model_dir),
        max_steps=2,
        extra_toml="\n[checkpoints]\ncheckpoint_save_freq = 1\neval_interval = 2\n"
        "\n[evaluation]\nlimit = 2\n",
    )
    config = load_training_config(config_file)
    plan = plan_job(config)
    assert plan.total_steps == 2 and len(plan.rows) == 8 and plan.device == "cpu"
    run = create_run_dir(tmp_path / "runs", "even", config_file=config_file)
    phases: list[str] = []
    result = await run_training(config, run, plan=plan, on_phase=phases.append)
    assert result.status == "finished" and result.steps_done == 2
    assert "training" in phases
    records = read_metrics(run.path / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in train] == [1, 2] and [r["step"] for r in evals] == [2]
    first = train[0]
    assert first["rollouts"] == 16 and first["failed_rollouts"] == 0 and first["samples"] == 16
    assert first["prefix_mismatch"] == 0 and first["policy_calls"] == 16
    assert 0.0 <= first["reward_mean"] <= 1.0 and first["response_length"] > 0
    # The sampler (HF engine, own model copy) and the trainer agree on the logprobs.
    assert first["mismatch_kl"] < 1e-4 and abs(first["is_ratio_mean"] - 1.0) < 1e-2
    assert evals[0]["val_samples"] == 2
    assert [p.name for p in list_checkpoints(run.checkpoints)] == ["step_000001", "step_000002"]
    status = read_status(run.path)
    assert status is not None and status["status"] == "finished"
    # The run records the precision it trained in ("auto" resolves per machine).
    dtype = training_dtype(config.training.dtype, "cpu")
    assert status["dtype"] == dtype and any(p.endswith(f"on cpu in {dtype}") for p in phases)
    assert (run.path / "config.toml").read_text() == config_file.read_text()
    assert list((run.path / "tensorboard").glob("events.out.tfevents.*"))

    from peft import PeftModel

    base = load_model(str(tiny_model_dir)).model
    peft_model = PeftModel.from_pretrained(base, str(run.checkpoints / "step_000002" / "adapter"))
    lora_b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert lora_b and any(float(p.abs().max()) > 0 for p in lora_b)
    with torch.no_grad():
        peft_model(input_ids=torch.tensor([[1, 5, 9]]))


async def test_failing_rollouts_stop_the_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    config_file = make_workspace(tmp_path / "ws", tiny_model_dir, eos_id=_eos(tiny_model_dir))
    main_py = tmp_path / "ws" / "rollouts" / "even" / "main.py"
    main_py.write_text(
        main_py.read_text().replace(
            "reply = await ctx.chat(ctx.prompt)", "raise RuntimeError('tool server down')"
        )
    )
    config = load_training_config(config_file)
    run = create_run_dir(tmp_path / "runs", "even")
    with pytest.raises(TrainingError, match=r"16 of 16 rollouts failed.*tool server down"):
        await run_training(config, run)
    status = read_status(run.path)
    assert (
        status is not None
        and status["status"] == "failed"
        and "tool server down" in status["error"]
    )


async def test_prompts_over_max_prompt_length_say_which_setting(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    config_file = make_workspace(
        tmp_path / "ws", tiny_model_dir, eos_id=_eos(tiny_model_dir), max_prompt_length=4
    )
    config = load_training_config(config_file)
    run = create_run_dir(tmp_path / "runs", "even")
    with pytest.raises(TrainingError, match=r"longer than \[training\] max_prompt_length \(4 tokens"):
        await run_training(config, run)
