"""Failure bounds on the two-node cluster: retries stop, the last engine lost is one clear error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout import ErrorCategory
from osmosis_ai.rollout.running import RolloutOutcome, RolloutRunner, load_entrypoint
from osmosis_ai.serving import EngineError, GenerationRequest
from osmosis_ai.testing import RecordingEndpoint
from osmosis_trainer.distributed import RayBackend, RayEnginePool

pytestmark = pytest.mark.ray

DYING = '''
import os

from osmosis_ai.rollout import AgentWorkflow, Grader


class Dies(AgentWorkflow):
    async def run(self, ctx):
        os._exit(1)  # every attempt kills its worker


class Never(Grader):
    async def grade(self, ctx):
        raise AssertionError("no sample to grade")
'''

# Loaded by the driver (no marker in its environment) and by each worker: the first worker to
# create the marker file dies on the spot, like a process killed while it imports.
DIES_ONCE_ON_LOAD = '''
import os

from osmosis_ai.rollout import AgentWorkflow

_marker = os.environ.get("DIE_ONCE_MARKER")
if _marker:
    try:
        os.close(os.open(_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        pass
    else:
        os._exit(1)
if os.environ.get("FAIL_TO_LOAD"):
    with open(os.environ["FAIL_TO_LOAD"], "a") as log:
        log.write("load\\n")
    raise ImportError("this entrypoint needs a package the node lacks")


class Echo(AgentWorkflow):
    async def run(self, ctx):
        return [*ctx.prompt, {"role": "assistant", "content": "ok"}]
'''


@pytest.fixture
def ray_driver(cluster_address: str) -> Iterator[None]:
    import ray

    ray.init(address=cluster_address, logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


async def _run_on_ray(
    tmp_path: Path, source: str, rows: int, concurrency: int = 1, **backend_args: Any
) -> tuple[RayBackend, list[RolloutOutcome], int]:
    """``source`` written as an entrypoint and ``rows`` run on a two-worker RayBackend
    (``backend_args``), shut down after: the backend, the outcomes, the workers alive at the end.
    """
    path = tmp_path / "entry.py"
    path.write_text(source)
    entry = load_entrypoint(str(path))
    endpoint = RecordingEndpoint()
    backend = RayBackend(entry, endpoint, workers=2, worker_cpus=0.25, **backend_args)
    runner = RolloutRunner(entry, endpoint, concurrency=concurrency, backend=backend)
    batch = [DatasetRow(i, i, [{"role": "user", "content": "hi"}], None, {}, None, "hi")
             for i in range(rows)]
    try:
        async with runner:
            outcomes = [o async for o in runner.run(batch)]
        alive = backend.workers_alive
    finally:
        backend.shutdown()
    return backend, outcomes, alive


async def test_a_rollout_whose_workers_keep_dying_fails_after_bounded_retries(
    tmp_path: Path, ray_driver: None
) -> None:
    backend, outcomes, _ = await _run_on_ray(tmp_path, DYING, rows=1, max_retries=1)
    assert len(outcomes) == 1 and not outcomes[0].ok
    assert outcomes[0].error is not None and outcomes[0].error.category is ErrorCategory.CRASHED
    # Tried once, retried once (max_retries=1) on the other worker; both died; no third try.
    assert backend.stats.workers_lost == 2 and backend.stats.retries == 1
    assert "every rollout worker died" in outcomes[0].error.message


async def test_a_worker_dying_while_it_starts_is_replaced(
    tmp_path: Path, ray_driver: None
) -> None:
    marker = tmp_path / "died"
    backend, outcomes, alive = await _run_on_ray(
        tmp_path, DIES_ONCE_ON_LOAD, rows=3, concurrency=2, env={"DIE_ONCE_MARKER": str(marker)})
    assert marker.exists() and alive == 2
    assert [o.ok for o in outcomes] == [True] * 3, [o.error for o in outcomes]
    assert backend.stats.start_failures == 1 and backend.stats.workers_lost == 0
    assert "died while starting" in backend.stats.lost_messages[0]


async def test_an_entrypoint_that_fails_to_load_is_not_retried(
    tmp_path: Path, ray_driver: None
) -> None:
    loads = tmp_path / "loads.log"
    backend, outcomes, _ = await _run_on_ray(tmp_path, DIES_ONCE_ON_LOAD, rows=3,
                                             env={"FAIL_TO_LOAD": str(loads)})
    assert len(outcomes) == 3
    for outcome in outcomes:
        assert outcome.error is not None
        assert "could not start Ray workers" in outcome.error.message
        assert "needs a package the node lacks" in outcome.error.message
    assert backend.stats.start_failures == 0  # a constructor that raised is not started again
    # The first start's two workers loaded the file; the other rollouts did not start a pool.
    assert loads.read_text().count("load") == 2
    # Nothing half-started is left holding the cluster's CPUs.
    from ray.util import placement_group_table

    assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())


async def test_the_last_engine_lost_is_one_clear_error(
    tiny_model_dir: Path, ray_driver: None
) -> None:
    import ray

    pool = RayEnginePool(str(tiny_model_dir), engines=1, cpus=0.25,
                         options={"max_new_tokens": 4, "seed": 0})
    await pool.start()
    req = GenerationRequest(messages=[{"role": "user", "content": "hi"}], rollout_id="r",
                            sample_id="s", seed=1)
    result = await pool.generate(req)
    assert result.completion_token_ids
    ray.kill(pool._actors[0])
    with pytest.raises(EngineError) as info:
        await pool.generate(req)
    assert info.value.code == "engines_lost" and pool.engines_lost == 1
    assert "every inference engine died" in str(info.value)
    await pool.close()
