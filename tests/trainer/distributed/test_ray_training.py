"""Training on a real two-node local Ray cluster, with one rollout worker killed mid-step.

The head and a second node are separate ``ray start`` processes on 127.0.0.1 with different
resources. The run trains a tiny model for 3 steps with one rollout worker on each node. After
step 2 is reported the test drops an empty KILL file; the first workflow of step 3 that finds
it takes it and ends its own worker process (``os._exit``), so the kill happens exactly once,
mid-step (see ``_ray_workspace``).

Checked: every rollout of every step is accounted for (16 per step, none failed, one policy
call each, each (row, sample) once), the run went on with one worker and said so in its
metrics and status, and step 1 sampled the same token ids as the single-process path (each
sample's calls carry a seed derived from its row and sample index; at most one sample may
flip on a last-bit logit difference: see ``assert_same_trajectories``).

Why only step 1: the sampler's logprobs enter the update (the importance weights), and they
differ in the last bits between one process and the cluster (other batch compositions and thread
counts in the engines). Adam's first step is nearly a sign step, so such differences in the tiny
gradients of a fresh LoRA change the weights, and the trajectories of later steps with them.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.config import load_training_config
from osmosis_ai.runs import describe_run, find_run
from osmosis_trainer.job import plan_job, run_training
from osmosis_trainer.loop._metrics import read_metrics
from osmosis_trainer.loop._run import create_run_dir, read_status
from tests.trainer.distributed._ray_workspace import (
    ROLLOUTS,
    STEPS,
    assert_same_trajectories,
    kill_file,
    token_ids,
    workspace,
)

pytestmark = pytest.mark.ray

@pytest.fixture(scope="module")
def single_run(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The single-process path: the reference trajectories."""
    import asyncio

    tmp = tmp_path_factory.mktemp("single")
    single_cfg = workspace(tmp / "ws", tiny_model_dir, "")
    config = load_training_config(single_cfg)
    single = create_run_dir(tmp / "runs", "single", config_file=single_cfg)
    result = asyncio.run(run_training(config, single, plan=plan_job(config)))
    assert result.status == "finished" and result.steps_done == STEPS
    return single.path


async def test_two_node_training_survives_a_killed_worker(
    tiny_model_dir: Path, tmp_path: Path, cluster_address: str, single_run: Path
) -> None:
    address = cluster_address
    ws = tmp_path / "cluster"
    cfg_file = workspace(
        ws, tiny_model_dir,
        f'\n[cluster]\naddress = "{address}"\nrollout_workers = 2\nworker_cpus = 0.5\n'
        "max_retries = 2\n",
    )
    config = load_training_config(cfg_file)
    run = create_run_dir(tmp_path / "runs", "cluster", config_file=cfg_file)
    kill = kill_file(cfg_file)

    def on_report(report: Any) -> None:
        if getattr(report, "kind", "train") == "train" and report.step == 2:
            kill.write_text("")

    result = await run_training(config, run, plan=plan_job(config), on_report=on_report)

    assert result.status == "finished" and result.steps_done == STEPS
    assert not kill.exists() and kill.with_name("KILL.taken").exists()
    nodes = Counter((ws / "rollouts" / "even" / "nodes.log").read_text().split())
    assert len(nodes) == 2, f"rollouts ran on {len(nodes)} node(s): {nodes}"

    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    for r in train:  # every rollout accounted for: none lost, none failed, none counted twice
        assert r["rollouts"] == ROLLOUTS and r["failed_rollouts"] == 0
        assert r["samples"] == ROLLOUTS and r["policy_calls"] == ROLLOUTS
    assert [r["cluster_workers"] for r in train] == [2, 2, 1]
    assert [r["cluster_workers_lost"] for r in train] == [0, 0, 1]
    assert train[0]["cluster_retries"] == 0 and train[1]["cluster_retries"] == 0
    assert 1 <= train[2]["cluster_retries"] <= ROLLOUTS
    status = read_status(run.path)
    assert status is not None and status["status"] == "finished"
    assert status["cluster"]["workers"] == 1 and status["cluster"]["workers_lost"] == 1
    info = describe_run(find_run(tmp_path / "runs", run.run_id))  # osmosis train info
    assert info["cluster"]["workers_lost"] == 1 and info["cluster"]["address"] == address

    for step in range(1, STEPS + 1):  # each (row, sample) traced exactly once
        assert len(token_ids(run.path, step)) == ROLLOUTS
    # Before the kill, on the base model: the same trajectories as in one process (see above).
    assert_same_trajectories(token_ids(run.path, 1), token_ids(single_run, 1))


async def test_engines_as_ray_actors_get_each_adapter_and_match_one_process(
    tiny_model_dir: Path, tmp_path: Path, cluster_address: str, single_run: Path
) -> None:
    """Two HF engine actors behind the gateway, each packed with its rollout worker on its own
    node: same trajectories, every adapter confirmed, every call served on its worker's node."""
    ws = tmp_path / "engines"
    cfg_file = workspace(
        ws, tiny_model_dir,
        f'\n[cluster]\naddress = "{cluster_address}"\nrollout_workers = 2\nworker_cpus = 0.25\n'
        "engines = 2\nengine_cpus = 0.25\n",
    )
    config = load_training_config(cfg_file)
    run = create_run_dir(tmp_path / "runs", "engines", config_file=cfg_file)
    result = await run_training(config, run, plan=plan_job(config))
    assert result.status == "finished" and result.steps_done == STEPS
    train = [r for r in read_metrics(run.path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["cluster_engines"] for r in train] == [2, 2, 2]
    assert [r["cluster_engines_lost"] for r in train] == [0, 0, 0]
    # Step 1 is served by the base model; steps 2 and 3 by adapters v1 and v2, shipped to
    # both engines and confirmed before the step's rollouts began.
    assert "adapter_sync_s" not in train[0]
    assert all(r["adapter_sync_s"] > 0 for r in train[1:])
    for r in train:
        assert r["rollouts"] == ROLLOUTS and r["failed_rollouts"] == 0
    # Sticky, seeded sampling on the base model: the one-process trajectories (step 1 only:
    # see the module docstring for why later steps differ in the last bits).
    assert_same_trajectories(token_ids(run.path, 1), token_ids(single_run, 1))
    for step in range(2, STEPS + 1):  # each (row, sample) traced exactly once
        assert len(token_ids(run.path, step)) == ROLLOUTS

    # Placement (node ids from each actor's Ray runtime context): the engines on different
    # nodes — the head and the second node — and each worker on its engine's node.
    cluster = read_status(run.path)["cluster"]  # type: ignore[index]
    engine_nodes, worker_nodes = cluster["engine_nodes"], cluster["worker_nodes"]
    assert sorted(engine_nodes) == sorted(_node_ids(cluster_address))
    assert cluster["worker_engines"] == [0, 1]
    assert [engine_nodes[e] for e in cluster["worker_engines"]] == worker_nodes
    # ... so every policy call was served by the engine on its worker's node.
    assert [r["cluster_calls_off_node"] for r in train] == [0, 0, 0]


def _node_ids(address: str) -> list[str]:
    """The cluster's live node ids (asked from Ray)."""
    import ray

    ray.init(address=address, logging_level=logging.ERROR)
    try:
        return [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    finally:
        ray.shutdown()
