"""``run_training`` with ``[remote]``: the remote-server template served by ``osmosis serve``
(a real subprocess on 127.0.0.1) is trained on through the gateway bridge, on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.config import load_training_config
from osmosis_ai.errors import ConfigError, DiscoveryError
from osmosis_ai.remote import (
    RolloutAgentLoop,
    RolloutContext,
    RolloutRequest,
    RolloutResult,
    create_app,
)
from osmosis_ai.rollout.running import load_grader
from osmosis_ai.testing import serve_in_loop
from osmosis_trainer.job import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir
from tests.core.remote._helpers import ADD_TOOL
from tests.serve_process import remote_template_run


async def test_train_against_a_remote_rollout_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    async with remote_template_run(tmp_path, tiny_model_dir, steps=1) as (config, config_file):
        plan = plan_job(config)
        run = create_run_dir(tmp_path / "runs", "calc", config_file=config_file)
        result = await run_training(config, run, plan=plan)
    assert result.status == "finished" and result.steps_done == 1
    [train] = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    # Every rollout ran on the server, and its policy calls came back token-level.
    assert train["rollouts"] == 4 and train["failed_rollouts"] == 0
    assert train["policy_calls"] >= 4 and train["samples"] == 4


GRADER = '''
from pathlib import Path

from osmosis_ai.rollout import Grader, GraderContext


class LengthGrader(Grader):
    """Scores the final answer's length parity; logs each sample it grades."""

    async def grade(self, ctx: GraderContext) -> None:
        for sample_id, sample in ctx.samples.items():
            final = [m for m in sample.messages if m.get("role") == "assistant"][-1]
            reward = float(len(final.get("content") or "") % 2)
            with (Path(__file__).parent / "graded.log").open("a") as log:
                log.write(f"{ctx.label} {reward}\\n")
            ctx.set_sample_reward(sample_id, reward)
'''


class NoRewardLoop(RolloutAgentLoop):
    """One LLM call, then the conversation back without a reward (the grader's job)."""

    name = "no-reward"

    def get_tools(self, request: RolloutRequest) -> list[dict[str, Any]]:
        return [ADD_TOOL]

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        messages = list(ctx.request.messages)
        messages.append((await ctx.chat(messages)).message)
        return ctx.complete(messages)


async def test_remote_run_with_reward_grader_trains_on_the_entrypoints_grader(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    rollout = tmp_path / "rollouts" / "calc"
    rollout.mkdir(parents=True)
    (rollout / "grader.py").write_text(GRADER)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "calc.jsonl").write_text(
        "".join(
            json.dumps({"user_prompt": f"What is {i} + 1?", "ground_truth": str(i + 1)}) + "\n"
            for i in range(2)
        )
    )
    config_file = tmp_path / "configs" / "training" / "calc.toml"
    config_file.parent.mkdir(parents=True)
    app = create_app(NoRewardLoop(), api_key="k-remote")
    async with serve_in_loop(app) as url:
        config_file.write_text(
            f'[experiment]\nrollout = "calc"\nentrypoint = "grader.py"\n'
            f'model_path = "{tiny_model_dir}"\ndataset = "data/calc.jsonl"\n\n'
            f'[remote]\nserver_url = "{url}"\napi_key = "k-remote"\nreward = "grader"\n\n'
            "[training]\nmax_steps = 2\ntotal_epochs = 2\nrollout_batch_size = 2\nn_samples_per_prompt = 2\n"
            "max_prompt_length = 8192\nmax_response_length = 16\n"
        )
        config = load_training_config(config_file)
        run = create_run_dir(tmp_path / "runs", "calc", config_file=config_file)
        result = await run_training(config, run, plan=plan_job(config))
    assert result.status == "finished" and result.steps_done == 2
    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    # The server sent no reward: without the grader every sample would have failed.
    assert [(r["rollouts"], r["failed_rollouts"], r["samples"]) for r in train] == [(4, 0, 4)] * 2
    graded = (rollout / "graded.log").read_text().splitlines()
    assert len(graded) == 8 and {line.split()[0] for line in graded} == {"1", "2"}


async def test_remote_reward_grader_without_a_grader_is_a_located_error(tmp_path: Path) -> None:
    rollout = tmp_path / "rollouts" / "calc"
    rollout.mkdir(parents=True)
    (rollout / "server.py").write_text("x = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "calc.jsonl").write_text('{"user_prompt": "hi"}\n')
    config_file = tmp_path / "configs" / "training" / "calc.toml"
    config_file.parent.mkdir(parents=True)
    config_file.write_text(
        '[experiment]\nrollout = "calc"\nentrypoint = "server.py"\nmodel_path = "m"\n'
        'dataset = "data/calc.jsonl"\n\n[remote]\nserver_url = "http://127.0.0.1:9"\n'
        'reward = "grader"\n'
    )
    config = load_training_config(config_file)
    with pytest.raises(
        DiscoveryError,
        match=r"server.py: \[remote\] reward = \"grader\" needs "
        "exactly one Grader subclass defined in this file; found none",
    ):
        load_grader(plan_job(config).entrypoint)
    (rollout / "server.py").unlink()
    with pytest.raises(ConfigError, match="entrypoint = 'server.py': file .* not found"):
        plan_job(config)


async def test_the_templates_grader_is_what_reward_grader_loads(tmp_path: Path) -> None:
    """The template's training comment: with reward = "grader" and entrypoint = "grader.py",
    the trainer scores with the rule of rewards.py."""
    from osmosis_ai.rollout import GraderContext, RolloutSample
    from osmosis_ai.templates import create_from_template

    create_from_template("remote-server", "calc", tmp_path)
    config_file = tmp_path / "configs" / "training" / "calc.toml"
    text = config_file.read_text()
    assert 'reward = "server"' in text and 'entrypoint = "grader.py"' in text
    config_file.write_text(
        text.replace('reward = "server"', 'reward = "grader"').replace(
            'entrypoint = "server.py"', 'entrypoint = "grader.py"'
        )
    )
    config = load_training_config(config_file)
    assert config.remote is not None and config.remote.reward == "grader"
    grader_cls, grader_config = load_grader(plan_job(config).entrypoint)
    samples = {
        "right": RolloutSample(id="right", messages=[{"role": "assistant", "content": "= 42"}]),
        "wrong": RolloutSample(id="wrong", messages=[{"role": "assistant", "content": "41"}]),
    }
    ctx = GraderContext(samples=samples, label="42", metadata={}, prompt=[], config=grader_config)
    await grader_cls(grader_config).grade(ctx)
    assert (samples["right"].reward, samples["wrong"].reward) == (1.0, 0.0)
