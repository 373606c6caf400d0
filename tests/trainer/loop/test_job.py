"""run_training and ``osmosis train submit`` on a tiny model through the real gateway."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
import torch

from osmosis_ai.cli._app import main
from osmosis_ai.config import load_training_config
from osmosis_ai.errors import ConfigError, TrainingError
from osmosis_trainer.checkpoints import list_checkpoints
from osmosis_trainer.loop import create_run_dir, plan_job, read_metrics, read_status, run_training
from osmosis_trainer.models import load_model
from tests.e2e.toy_workspace import make_workspace


def _eos(model_dir: Path) -> int:
    return int(load_model(str(model_dir)).tokenizer.eos_token_id)


@pytest.mark.parametrize("engine_process", [False, True], ids=["in-process", "engine-process"])
async def test_run_training_end_to_end(
    tiny_model_dir: Path, tmp_path: Path, engine_process: bool
) -> None:
    config_file = make_workspace(
        tmp_path / "ws",
        tiny_model_dir,
        eos_id=_eos(tiny_model_dir),
        max_steps=2,
        engine_process=engine_process,
        extra_toml="\n[checkpoints]\ncheckpoint_save_freq = 1\neval_interval = 2\n"
        "\n[evaluation]\nlimit = 2\n",
    )
    config = load_training_config(config_file)
    plan = plan_job(config)
    assert plan.total_steps == 2 and len(plan.rows) == 8 and plan.device == "cpu"
    run = create_run_dir(tmp_path / "runs", "even", config_file=config_file)
    phases: list[str] = []
    result = await run_training(config, run, plan=plan, on_phase=phases.append)
    assert result.status == "completed" and result.steps_done == 2
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
    assert status is not None and status["status"] == "completed"
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


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables ``train submit`` sets by default, restored after the test."""
    for name in ("OMP_WAIT_POLICY", "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.setenv(
            name, os.environ.get(name, "1" if name != "OMP_WAIT_POLICY" else "PASSIVE")
        )


@pytest.mark.usefixtures("cli_env")
def test_cli_submit_and_resume(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = make_workspace(
        tmp_path / "ws",
        tiny_model_dir,
        eos_id=_eos(tiny_model_dir),
        max_steps=2,
        extra_toml="\n[checkpoints]\ncheckpoint_save_freq = 1\n",
    )
    assert main(["train", "submit", str(config_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "completed" and out["steps"] == 2
    run_dir = Path(out["run"])
    assert run_dir.parent == tmp_path / "ws" / "runs" and run_dir.name.startswith("even-")
    assert len(out["reward_mean_per_step"]) == 2

    # Resuming a finished run continues from its last checkpoint: nothing is left to do.
    assert main(["train", "submit", str(config_file), "--json", "--resume", str(run_dir)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["steps"] == 2 and again["run"] == str(run_dir)
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1, 2]


@pytest.mark.usefixtures("cli_env")
def test_cli_submit_live_view(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = make_workspace(
        tmp_path / "ws", tiny_model_dir, eos_id=_eos(tiny_model_dir), max_steps=1
    )
    assert main(["train", "submit", str(config_file), "--name", "demo"]) == 0
    out = capsys.readouterr().out
    assert "reward per step" in out and "completed 1 steps" in out and "runs/demo-" in out
    # Not a terminal (captured): one plain line per step instead of a live display.
    assert re.search(r"^\[\d\d:\d\d\] step 1/1 \(100%\) reward \d\.\d{3} ", out, re.M), out


@pytest.mark.usefixtures("cli_env")
def test_cli_submit_live_view_on_a_terminal(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from osmosis_ai.cli._output import state

    screen = io.StringIO()
    monkeypatch.setattr(state, "console", Console(file=screen, force_terminal=True, width=100))
    config_file = make_workspace(
        tmp_path / "ws", tiny_model_dir, eos_id=_eos(tiny_model_dir), max_steps=2
    )
    assert main(["train", "submit", str(config_file)]) == 0
    out = screen.getvalue()
    assert "training" in out and "2/2" in out and "reward " in out and "completed" in out
    assert "step 1/2 (" not in out  # the plain-line view is for logs only


@pytest.mark.usefixtures("cli_env")
def test_cli_submit_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "configs" / "training" / "x.toml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        '[experiment]\nrollout = "nope"\nentrypoint = "main.py"\nmodel_path = "embedded"\ndataset = "d.jsonl"\n'
    )
    with pytest.raises(ConfigError):
        plan_job(load_training_config(bad))
    assert main(["train", "submit", str(bad)]) == 1


def test_reward_charts() -> None:
    from osmosis_ai.cli.train import ascii_chart, sparkline

    assert sparkline([0.0, 0.5, 1.0], lo=0.0, hi=1.0) == "▁▅█"
    assert sparkline([2.0, 2.0]) == "▅▅"  # flat data sits in the middle
    assert sparkline([float("nan"), 1.0], lo=0.0, hi=1.0) == " █"
    assert sparkline([]) == ""
    chart = ascii_chart([0.0, 1.0], height=4).splitlines()
    assert len(chart) == 5 and chart[0].startswith("  1.00 ┤") and chart[-2].startswith("  0.00 ┤")
    assert [row[-2:] for row in chart[:4]] == [" █", " █", " █", " █"]
    assert ascii_chart([]) == "reward: no data"
