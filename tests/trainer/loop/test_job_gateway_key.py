"""A training run's policy gateway has a key of its own (issue 27, item 4): the run's
rollouts get it through their routes, and a client without it is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import osmosis_ai.serving
from osmosis_ai.config import load_training_config
from osmosis_trainer.job import run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir
from osmosis_trainer.models import load_model
from tests.e2e.toy_workspace import make_workspace, rollout_source

# Before its own call, each rollout checks the key it was given and tries the gateway
# without it; either failing fails the rollout, and with it the run.
CHECK = """
import httpx
route = ctx.route()
if route.api_key == "osmosis" or len(route.api_key) < 32:
    raise RuntimeError(f"the gateway has no real key: {route.api_key!r}")
async with httpx.AsyncClient() as http:
    anon = await http.post(route.base_url + "/chat/completions", json={"messages": ctx.prompt})
if anon.status_code != 401:
    raise RuntimeError(f"a call without the key got HTTP {anon.status_code}")
"""


async def test_the_training_gateway_requires_the_runs_key(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str] = []
    real = osmosis_ai.serving.new_api_key

    def spy() -> str:
        keys.append(real())
        return keys[-1]

    monkeypatch.setattr(osmosis_ai.serving, "new_api_key", spy)
    eos = int(load_model(str(tiny_model_dir)).tokenizer.eos_token_id)
    config_file = make_workspace(
        tmp_path / "ws", tiny_model_dir, eos_id=eos, rows=4, max_steps=1,
        rollout_batch_size=2, n_samples_per_prompt=2,
        rollout=rollout_source(before_chat=CHECK),
    )
    config = load_training_config(config_file)
    run = create_run_dir(tmp_path / "runs", "even", config_file=config_file)
    result = await run_training(config, run)
    assert result.status == "finished" and result.steps_done == 1
    [train] = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert train["failed_rollouts"] == 0 and train["policy_calls"] == 4
    # The key stays in memory: no file the run wrote holds it.
    assert keys
    for path in run.path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(key.encode() in data for key in keys), path
