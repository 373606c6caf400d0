"""Failure bounds on the two-node cluster: retries stop, the last engine lost is one clear error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout import ErrorCategory
from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint
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


@pytest.fixture
def ray_driver(cluster_address: str) -> Iterator[None]:
    import ray

    ray.init(address=cluster_address, logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


async def test_a_rollout_whose_workers_keep_dying_fails_after_bounded_retries(
    tmp_path: Path, ray_driver: None
) -> None:
    path = tmp_path / "dies.py"
    path.write_text(DYING)
    entry = load_entrypoint(str(path))
    endpoint = RecordingEndpoint()
    backend = RayBackend(entry, endpoint, workers=2, worker_cpus=0.25, max_retries=1)
    runner = RolloutRunner(entry, endpoint, concurrency=1, backend=backend)
    row = DatasetRow(0, 0, [{"role": "user", "content": "hi"}], None, {}, None, "hi")
    try:
        async with runner:
            outcomes = [o async for o in runner.run([row])]
    finally:
        backend.shutdown()
    assert len(outcomes) == 1 and not outcomes[0].ok
    assert outcomes[0].error is not None and outcomes[0].error.category is ErrorCategory.CRASHED
    # Tried once, retried once (max_retries=1) on the other worker; both died; no third try.
    assert backend.stats.workers_lost == 2 and backend.stats.retries == 1
    assert "every rollout worker died" in outcomes[0].error.message


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
