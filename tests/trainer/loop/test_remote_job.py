"""``run_training`` with ``[remote]``: the remote-server template served by ``osmosis serve``
(a real subprocess on 127.0.0.1) is trained on through the gateway bridge, on a tiny model."""

from __future__ import annotations

from pathlib import Path

from osmosis_ai.config import load_training_config
from osmosis_ai.templates import create_from_template
from osmosis_trainer.loop import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir
from tests.serve_process import osmosis_serve


async def test_train_against_a_remote_rollout_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    create_from_template("remote-server", "calc", tmp_path)
    server_dir = tmp_path / "elsewhere"
    (tmp_path / "rollouts" / "calc").rename(server_dir)
    config_file = tmp_path / "configs" / "training" / "calc.toml"
    config = load_training_config(config_file)
    assert config.remote is not None
    config.experiment.dataset = str(server_dir / "test_data.jsonl")
    # The agent loop lives only in the served process: the trainer needs no entrypoint file.
    async with osmosis_serve(server_dir, "-m", "server:agent_loop", "-p", "0", api_key="k-remote") as served:
        config.remote.server_url = served.url
        config.experiment.model_path = str(tiny_model_dir)
        t = config.training
        t.max_steps, t.rollout_batch_size, t.n_samples_per_prompt = 1, 2, 2
        t.max_response_length = 16
        t.max_prompt_length = 8192  # the tiny byte-level tokenizer makes the tools block long
        plan = plan_job(config)
        run = create_run_dir(tmp_path / "runs", "calc", config_file=config_file)
        result = await run_training(config, run, plan=plan)
    assert result.status == "finished" and result.steps_done == 1
    [train] = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    # Every rollout ran on the server, and its policy calls came back token-level.
    assert train["rollouts"] == 4 and train["failed_rollouts"] == 0
    assert train["policy_calls"] >= 4 and train["samples"] == 4
