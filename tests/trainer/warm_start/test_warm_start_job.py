"""A training run with ``[warm_start]`` on a tiny model through the real gateway: the phase's
metrics, ``checkpoints/warm`` (``RUN:warm``), ``max_steps = 0``, and resume after the phase."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from osmosis_ai.config import load_training_config
from osmosis_ai.models import resolve_checkpoint
from osmosis_trainer.checkpoints import list_checkpoints, warm_checkpoint
from osmosis_trainer.job import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir, read_status
from osmosis_trainer.models import load_model
from tests.e2e.toy_workspace import make_workspace


def _demo(i: int) -> dict[str, object]:
    call = {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": "add", "arguments": json.dumps({"a": i, "b": i + 1})},
    }
    return {
        "messages": [
            {"role": "user", "content": f"What is {i} + {i + 1}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": str(2 * i + 1)},
            {"role": "assistant", "content": f"{2 * i + 1}"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two integers.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    },
                },
            }
        ],
    }


def _workspace(tmp_path: Path, model_dir: Path, *, max_steps: int, extra: str = "") -> Path:
    eos = int(load_model(str(model_dir)).tokenizer.eos_token_id)
    warm = (
        '\n[warm_start]\ndataset = "data/demos.jsonl"\nepochs = 6\nlr = 1e-2\nbatch_size = 2\n'
        'on_bad_row = "skip"\n' + extra
    )
    config = make_workspace(
        tmp_path / "ws", model_dir, eos_id=eos, max_steps=max_steps, extra_toml=warm
    )
    lines = [json.dumps(_demo(i)) for i in range(4)]
    lines.append('{"messages": [{"role": "robot", "content": "x"}]}')  # skipped and counted
    (tmp_path / "ws" / "data" / "demos.jsonl").write_text("\n".join(lines) + "\n")
    return config


async def test_warm_start_alone(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = _workspace(tmp_path, tiny_model_dir, max_steps=0)
    config = load_training_config(config_file)
    plan = plan_job(config)
    assert plan.total_steps == 0 and len(plan.demonstrations) == 4
    assert plan.bad_demonstrations == 1
    run = create_run_dir(tmp_path / "ws" / "runs", "even", config_file=config_file)
    phases: list[str] = []
    reports: list[str] = []
    result = await run_training(
        config,
        run,
        plan=plan,
        on_phase=phases.append,
        on_report=lambda r: reports.append(r.kind),
    )
    assert result.status == "finished" and result.steps_done == 0
    assert "warm start" in phases
    records = read_metrics(run.path / "metrics.jsonl")
    warm = [r for r in records if r["kind"] == "warm_start"]
    assert [r["step"] for r in warm] == list(range(1, 13))  # 6 epochs x 2 batches
    assert reports == ["warm_start"] * 12
    assert not [r for r in records if r["kind"] == "train"]
    losses = [r["warm_start/loss"] for r in warm]
    # a repeated tiny dataset: the loss falls and the model learns to predict its tokens
    assert losses[-1] < 0.5 * losses[0], losses
    assert warm[-1]["warm_start/token_accuracy"] > warm[0]["warm_start/token_accuracy"]
    for key in ("warm_start/tokens", "warm_start/epoch", "warm_start/lr"):
        assert key in warm[0]
    assert warm[-1]["warm_start/epoch"] == 6 and warm[0]["warm_start/lr"] == 1e-2
    path = warm_checkpoint(run.checkpoints)
    assert path is not None and (path / "adapter" / "adapter_model.safetensors").is_file()
    assert list_checkpoints(run.checkpoints) == []  # no RL step was taken
    status = read_status(run.path)
    assert status is not None and status["status"] == "finished"
    assert status["warm_start"]["done"] is True and status["warm_start"]["demonstrations"] == 4
    assert status["warm_start"]["skipped"] == {"bad_row": 1}
    assert status["last_checkpoint"] == str(path)
    # RUN:warm (and RUN, whose latest checkpoint it is) name the warm-start adapter
    ref = resolve_checkpoint(f"{run.run_id}:warm", tmp_path / "ws" / "runs")
    assert ref.path == path and ref.label == f"{run.run_id}:warm"
    assert resolve_checkpoint(run.run_id, tmp_path / "ws" / "runs").path == path
    # train info shows the phase; model list lists the checkpoint as RUN:warm
    from typer.testing import CliRunner

    from osmosis_ai.cli import app

    monkeypatch.chdir(tmp_path / "ws")
    info = CliRunner().invoke(app, ["train", "info", run.run_id], terminal_width=200)
    assert info.exit_code == 0, info.output
    first, last = losses[0], losses[-1]
    assert f"warm start 12 steps · loss {first:.3f} → {last:.3f} · token accuracy" in info.output
    assert f"step warm   reward -  {path}" in info.output
    listed = CliRunner().invoke(app, ["model", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    (entry,) = json.loads(listed.output)
    assert entry["name"] == "warm" and entry["step"] == 0 and entry["path"] == str(path)


async def test_warm_start_then_rl_and_resume(tiny_model_dir: Path, tmp_path: Path) -> None:
    config_file = _workspace(
        tmp_path, tiny_model_dir, max_steps=2, extra="\n[checkpoints]\ncheckpoint_save_freq = 1\n"
    )
    config = load_training_config(config_file)
    run = create_run_dir(tmp_path / "ws" / "runs", "even", config_file=config_file)
    result = await run_training(config, run)
    assert result.status == "finished" and result.steps_done == 2
    records = read_metrics(run.path / "metrics.jsonl")
    assert [r["kind"] for r in records] == ["warm_start"] * 12 + ["train"] * 2
    # RL continued from the warm adapter: step 1's rollouts sampled it (the sampler and the
    # trainer agree up to the merged adapter's rounding; serving the base model instead
    # gives a mismatch KL above 1000 here).
    assert records[12]["mismatch_kl"] < 0.05
    assert [p.name for p in list_checkpoints(run.checkpoints)] == ["step_000001", "step_000002"]
    warm_first = [r["warm_start/loss"] for r in records[:12]]

    # Killed after the phase (only the warm checkpoint is left): resume skips the phase.
    for step in list_checkpoints(run.checkpoints):
        shutil.rmtree(step)
    (run.checkpoints / "latest").unlink()
    phases: list[str] = []
    result = await run_training(
        load_training_config(config_file), run, resume=True, on_phase=phases.append
    )
    assert result.status == "finished" and result.steps_done == 2
    assert "warm start" not in phases and "resuming" in phases
    records = read_metrics(run.path / "metrics.jsonl")
    assert [r["kind"] for r in records] == ["warm_start"] * 12 + ["train"] * 2
    assert [r["warm_start/loss"] for r in records[:12]] == warm_first

    # Killed during the phase (no checkpoint at all): resume redoes it, once.
    shutil.rmtree(run.checkpoints)
    result = await run_training(load_training_config(config_file), run, resume=True)
    assert result.status == "finished"
    records = read_metrics(run.path / "metrics.jsonl")
    assert [r["kind"] for r in records].count("warm_start") == 12


async def test_no_usable_demonstration_is_one_clear_error(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    config_file = _workspace(tmp_path, tiny_model_dir, max_steps=0, extra="max_tokens = 16\n")
    config = load_training_config(config_file)
    run = create_run_dir(tmp_path / "ws" / "runs", "even", config_file=config_file)
    from osmosis_ai.errors import TrainingError

    with pytest.raises(TrainingError, match=r"no demonstration to train on .*over_max_tokens 4"):
        await run_training(config, run)


def test_submit_counts_warm_start_steps_against_the_warm_start(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The progress lines of ``train submit`` number warm-start steps out of the warm start's
    own total (4 demonstrations x 6 epochs / 2 = 12), not out of RL's ``max_steps``."""
    from osmosis_ai.cli._app import main

    config = _workspace(tmp_path, tiny_model_dir, max_steps=1)
    assert main(["train", "submit", str(config)]) == 0
    out = capsys.readouterr().out
    assert "warm start 1/12 (epoch 1)" in out and "warm start 12/12" in out, out
    assert "warm start 1/1 " not in out
