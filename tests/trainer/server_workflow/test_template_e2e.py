"""Done-when test: the calculator ``remote-server`` template, scaffolded into a workspace and
served by ``osmosis serve`` (a real subprocess on 127.0.0.1), driven by a test training cluster
(policy gateway + ScriptedEngine + RolloutRunner) through the workspace's training config."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from osmosis_ai.config import load_training_config
from osmosis_ai.data import read_dataset
from osmosis_ai.rollout.running import RolloutRunner
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.templates import create_from_template
from osmosis_ai.testing import ScriptedEngine, text, tool_call
from osmosis_trainer.server_workflow import remote_entrypoint_for
from osmosis_trainer.trajectory import build_sequences
from tests.serve_process import osmosis_serve


def calculator_policy(req: Any) -> Any:
    """Uses the tool the question asks for (by its operator), then repeats the tool's answer."""
    last = req.messages[-1]
    if last["role"] == "tool":
        return text(last["content"])
    a, op, b = re.search(r"(\d+(?:\.\d+)?) ([-+*/]) (\d+(?:\.\d+)?)", last["content"]).groups()  # type: ignore[union-attr]
    name = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide"}[op]
    return tool_call(name, a=float(a), b=float(b))


async def test_template_served_by_osmosis_serve_trains_through_the_gateway(tmp_path: Path) -> None:
    create_from_template("remote-server", "calc", tmp_path)
    rollout_dir = tmp_path / "rollouts" / "calc"
    config = load_training_config(tmp_path / "configs" / "training" / "calc.toml")
    assert config.remote is not None and config.remote.server_url == "http://127.0.0.1:9000"
    args = ("-m", "server:agent_loop", "-p", "0", "--log", str(tmp_path / "logs"))
    async with osmosis_serve(rollout_dir, *args, api_key="shared-key") as served:
        # taken from the environment, and never printed in full
        assert "API key (given): … (10 characters)" in served.output
        assert "shared-key" not in served.output
        config.remote.server_url = served.url
        # ScriptedEngine counts bytes as tokens: give the rollouts a budget that fits the tool block
        config.training.max_prompt_length = 8192
        async with PolicyGateway(ScriptedEngine(per_sample=False, script=calculator_policy), api_key="gw") as gw:
            entrypoint = remote_entrypoint_for(config, gw)
            rows = list(read_dataset(config.dataset_path(), limit=4))
            async with RolloutRunner(entrypoint, gw, n_samples=2, workflow_timeout_s=60) as runner:
                outcomes = await runner.run_all(rows)
    assert served.returncode == 0, served.output
    assert len(outcomes) == 8
    assert all(o.status == "success" for o in outcomes), [o.error for o in outcomes]
    for outcome in outcomes:
        [sample] = outcome.samples
        assert sample.reward == 1.0  # rewards.py on the server: the tool's answer is right
        assert sample.trainable and len(sample.calls) == 2
        assert [m["role"] for m in sample.messages] == ["system", "user", "assistant", "tool", "assistant"]
        built = build_sequences(sample.calls)
        assert len(built.sequences) == 1  # the second prompt extends the first exactly
        assert json.dumps(sample.messages)
    traces = list((tmp_path / "logs").glob("*/rollout-*.jsonl"))
    assert len(traces) == 8  # --log: one JSONL trace per rollout
