"""``run_training`` with ``[remote]``: the remote-server template served by ``osmosis serve``
(a real subprocess on 127.0.0.1) is trained on through the gateway bridge, on a tiny model."""

from __future__ import annotations

from pathlib import Path

from osmosis_trainer.loop import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir
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
