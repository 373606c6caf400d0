"""An osmosis-ai 0.3 starter-style rollout trains unchanged (issue 39 §3, fast: tiny model).

The OpenAI Agents multiply workspace of tests/integrations/original03 (workflow and grader in a
package beside main.py, main() serving a LocalBackend, OsmosisMemorySession, ctx.sample /
ctx.set_reward) trains 2 GRPO steps through the real gateway on a tiny random model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from osmosis_ai.config import load_training_config
from osmosis_trainer.job import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir

pytest.importorskip("agents")

ORIGINAL = Path(__file__).parents[2] / "integrations" / "original03" / "workspace"


def original_workspace(root: Path, model: str, rollout: str, **training: object) -> Path:
    """Copy a 0.3 rollout folder unchanged; write multiply rows and a training config."""
    shutil.copytree(ORIGINAL / "rollouts" / rollout, root / "rollouts" / rollout)
    (root / "data").mkdir(parents=True)
    with open(root / "data" / "multiply.jsonl", "w") as fh:
        for i in range(8):
            a, b = 2 + i, 3 + i
            fh.write(json.dumps({"user_prompt": f"What is {a} * {b}?", "ground_truth": str(a * b)}))
            fh.write("\n")
    settings = {
        "lr": 1e-3, "max_steps": 2, "rollout_batch_size": 2, "n_samples_per_prompt": 2,
        "max_prompt_length": 1024, "max_response_length": 16, "device": "cpu", **training,
    }
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    (root / "configs" / "training").mkdir(parents=True)
    config = root / "configs" / "training" / f"{rollout}.toml"
    config.write_text(
        f'[experiment]\nrollout = "{rollout}"\nentrypoint = "main.py"\nmodel_path = "{model}"\n'
        f'dataset = "data/multiply.jsonl"\n\n[secrets]\nrequired = []\n\n[training]\n{body}\n'
        "\n[lora]\nr = 8\nalpha = 16\n"
    )
    return config


async def test_an_original_openai_agents_rollout_trains_two_steps(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    config_file = original_workspace(tmp_path / "ws", str(tiny_model_dir), "multiply-local-openai")
    config = load_training_config(config_file)
    plan = plan_job(config)
    run = create_run_dir(tmp_path / "runs", "multiply", config_file=config_file)
    result = await run_training(config, run, plan=plan)
    assert result.status == "finished" and result.steps_done == 2
    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    for record in train:
        assert record["rollouts"] == 4 and record["failed_rollouts"] == 0
        assert record["samples"] == 4 and record["policy_calls"] >= 4
