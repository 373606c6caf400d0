"""Engines lost on the two-node cluster, ``[remote]`` with ``[cluster]``, the shipped rollout.

* One of two engine actors killed mid-step (by name, from inside a workflow, so exactly once):
  its samples' calls go to the survivor, the run finishes, and the metrics and
  ``osmosis train info`` say one engine was lost.
* The only engine killed mid-step: the run ends ``failed`` with one line naming the dead engine
  and the fix; its last checkpoint resumes (in one process) to the end.
* ``[remote]``: rollouts served by an ``osmosis serve`` process, policy calls by an engine actor.
* The rollout folder reaches the workers through Ray's ``runtime_env``, not the driver's path.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.config import load_training_config
from osmosis_ai.data import DatasetRow
from osmosis_ai.errors import TrainingError
from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint
from osmosis_ai.runs import describe_run, find_run
from osmosis_ai.testing import RecordingEndpoint
from osmosis_trainer.distributed import RayBackend
from osmosis_trainer.job import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir, read_status
from tests.serve_process import remote_template_run
from tests.trainer.distributed._ray_workspace import ROLLOUTS, STEPS, kill_file, workspace

pytestmark = pytest.mark.ray


def _engines_toml(address: str, engines: int) -> str:
    return (f'\n[cluster]\naddress = "{address}"\nrollout_workers = 2\nworker_cpus = 0.25\n'
            f"engines = {engines}\nengine_cpus = 0.25\n\n[checkpoints]\ncheckpoint_save_freq = 1\n")


def _kill_engine_after_step(cfg_file: Path, run_id: str, step: int, engine: int = 0) -> Any:
    """A report hook: after ``step``, the next workflow to start kills engine ``engine``."""
    kill = kill_file(cfg_file)

    def on_report(report: Any) -> None:
        if getattr(report, "kind", "train") == "train" and report.step == step:
            tmp = kill.with_name("KILL.tmp")
            tmp.write_text(f"osmosis-engine-{run_id}-{engine}")
            tmp.rename(kill)  # atomic: a workflow never sees a half-written name

    return on_report


async def test_an_engine_killed_mid_step_moves_its_calls_to_the_survivor(
    tiny_model_dir: Path, tmp_path: Path, cluster_address: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg_file = workspace(tmp_path / "ws", tiny_model_dir, _engines_toml(cluster_address, 2))
    config = load_training_config(cfg_file)
    run = create_run_dir(tmp_path / "runs", "lose-one", config_file=cfg_file)
    result = await run_training(config, run, plan=plan_job(config),
                                on_report=_kill_engine_after_step(cfg_file, run.run_id, 1))

    assert result.status == "finished" and result.steps_done == STEPS
    assert kill_file(cfg_file).with_name("KILL.taken").exists()
    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["cluster_engines"] for r in train] == [2, 1, 1]
    assert [r["cluster_engines_lost"] for r in train] == [0, 1, 1]
    for r in train:  # no sample lost: the dead engine's calls were served by the other one
        assert r["rollouts"] == ROLLOUTS and r["failed_rollouts"] == 0
        assert r["policy_calls"] == ROLLOUTS
    # Worker 0's engine is gone: its samples' calls now cross to the other node's engine.
    assert train[0]["cluster_calls_off_node"] == 0 and train[2]["cluster_calls_off_node"] > 0
    status = read_status(run.path)
    assert status is not None and status["cluster"]["engines_lost"] == 1
    assert any(m.startswith("engine 0 ") for m in status["cluster"]["lost"])
    assert describe_run(find_run(tmp_path / "runs", run.run_id))["cluster"]["engines"] == 1
    capsys.readouterr()
    assert main(["train", "info", run.run_id, "--runs-dir", str(tmp_path / "runs")]) == 0
    assert "2 rollout workers · 1 engines (1 lost)" in capsys.readouterr().out


async def test_the_last_engine_lost_fails_the_run_with_a_resumable_checkpoint(
    tiny_model_dir: Path, tmp_path: Path, cluster_address: str
) -> None:
    cfg_file = workspace(tmp_path / "ws", tiny_model_dir, _engines_toml(cluster_address, 1))
    config = load_training_config(cfg_file)
    run = create_run_dir(tmp_path / "runs", "lose-all", config_file=cfg_file)
    with pytest.raises(TrainingError) as info:
        await run_training(config, run, plan=plan_job(config),
                           on_report=_kill_engine_after_step(cfg_file, run.run_id, 1))

    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("step 2: every inference engine died (engine 0 (node ")
    assert "died: " in message and "'osmosis train resume'" in message
    record = find_run(tmp_path / "runs", run.run_id)
    assert record.status == "failed" and record.error is not None
    assert "every inference engine died (engine 0" in record.error
    [checkpoint] = record.checkpoints()
    assert checkpoint.step == 1 and checkpoint.adapter is not None

    # The checkpoint is usable: the run resumes from it in one process and finishes.
    single = load_training_config(cfg_file)
    single.cluster.address = None
    result = await run_training(single, run, plan=plan_job(single), resume=True)
    assert result.status == "finished" and result.steps_done == STEPS
    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in train][-2:] == [2, 3]
    assert all(r["failed_rollouts"] == 0 for r in train[-2:])


async def test_remote_rollout_server_with_engines_on_the_cluster(
    tiny_model_dir: Path, tmp_path: Path, cluster_address: str
) -> None:
    """``[remote]`` + ``[cluster]``: ``osmosis serve`` runs the agent loop, an engine actor on
    the cluster serves its policy calls through the driver's gateway."""
    async with remote_template_run(tmp_path, tiny_model_dir, steps=2) as (config, config_file):
        config.cluster.address, config.cluster.engines = cluster_address, 1
        config.cluster.engine_cpus = 0.25
        run = create_run_dir(tmp_path / "runs", "calc", config_file=config_file)
        result = await run_training(config, run, plan=plan_job(config))
    assert result.status == "finished" and result.steps_done == 2
    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    for r in train:  # every rollout ran on the server; its calls were served by the engine actor
        assert r["rollouts"] == 4 and r["failed_rollouts"] == 0 and r["samples"] == 4
        assert r["policy_calls"] >= 4 and r["cluster_engines"] == 1
    status = read_status(run.path)
    assert status is not None and status["cluster"]["engines"] == 1


SHIPPED = '''
from osmosis_ai.rollout import AgentWorkflow


class Where(AgentWorkflow):
    async def run(self, ctx):
        import helper  # a sibling module, imported on the worker's node at run time

        return [*ctx.prompt, {"role": "assistant", "content": helper.VALUE + "|" + __file__}]
'''


async def test_workers_import_the_rollout_folder_shipped_by_ray(
    tmp_path: Path, cluster_address: str
) -> None:
    import ray

    folder = tmp_path / "driver-only" / "shipped"
    folder.mkdir(parents=True)
    (folder / "main.py").write_text(SHIPPED)
    (folder / "helper.py").write_text('VALUE = "shipped helper"\n')
    entry = load_entrypoint(folder / "main.py")
    # ray.init zips and uploads the folder; then the driver's copy is deleted, so a worker
    # can only import what Ray unpacked on its own node.
    ray.init(address=cluster_address, logging_level=logging.ERROR,
             runtime_env={"working_dir": str(folder)})
    try:
        shutil.rmtree(tmp_path / "driver-only")
        endpoint = RecordingEndpoint()
        backend = RayBackend(entry, endpoint, workers=2, worker_cpus=0.25, ship_rollout=True)
        runner = RolloutRunner(entry, endpoint, n_samples=1, concurrency=2, backend=backend)
        rows = [DatasetRow(i, i, [{"role": "user", "content": f"hi {i}"}], None, {}, None, "hi")
                for i in range(4)]
        try:
            async with runner:
                outcomes = [o async for o in runner.run(rows)]
        finally:
            backend.shutdown()
    finally:
        ray.shutdown()
    assert len(outcomes) == 4 and all(o.ok for o in outcomes), [o.error for o in outcomes]
    for o in outcomes:
        value, file = o.samples[0].messages[-1]["content"].split("|")
        assert value == "shipped helper"
        assert not file.startswith(str(tmp_path)) and "runtime_resources" in file
