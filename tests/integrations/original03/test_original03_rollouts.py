"""osmosis-ai 0.3 starter-workspace rollouts run unchanged on osmosis's runner.

The fixtures under ``workspace/rollouts`` are written as 0.3's starter workspace writes them:
canonical ``osmosis_ai.rollout.*`` imports, the workflow and grader in a package beside
``main.py``, ``main.py`` serving a ``LocalBackend`` through ``create_rollout_server`` under
uvicorn, ``OsmosisRolloutModel(params={...})`` in a ``model: Model`` config field,
``OsmosisMemorySession`` and a single-sample grader (``ctx.sample`` / ``ctx.set_reward``).
"""

from __future__ import annotations

import pytest

from osmosis_ai.rollout.backend.local import LocalBackend
from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint
from osmosis_ai.testing import FakeOpenAIServer
from tests.integrations.original03._multiply import ROLLOUTS, multiply_policy, rows

CASES = [
    ("multiply-local-strands", "multiply_strands_rollout"),
    ("multiply-local-openai", "multiply_openai_rollout"),
]


@pytest.mark.parametrize(("rollout", "package"), CASES)
def test_discovery_finds_the_served_local_backend(rollout: str, package: str) -> None:
    entry = load_entrypoint(ROLLOUTS / rollout / "main.py")
    assert isinstance(entry.backend, LocalBackend)
    assert entry.workflow_cls.__module__ == f"{package}.workflow"
    assert entry.grader_cls is not None and entry.grader_cls.__module__ == f"{package}.grader"
    assert entry.workflow_config is entry.backend.workflow_config
    assert entry.grader_config is not None and entry.grader_config.name.startswith("Multiply")
    assert entry.path == (ROLLOUTS / rollout / "main.py").resolve()


@pytest.mark.parametrize(("rollout", "package"), CASES)
async def test_rollouts_evaluate_with_no_failed_row_and_trainable_samples(
    rollout: str, package: str
) -> None:
    entry = load_entrypoint(ROLLOUTS / rollout / "main.py")
    async with FakeOpenAIServer(script=multiply_policy) as server:
        async with RolloutRunner(entry, server, n_samples=2, workflow_timeout_s=60) as runner:
            outcomes = await runner.run_all(rows(3))
    assert len(outcomes) == 6
    for outcome in outcomes:
        assert outcome.ok, (outcome.status, outcome.error)
        [sample] = outcome.samples
        assert sample.id == "multiply" and sample.reward == 1.0
        assert len(sample.calls) == 2 and all(call.trainable for call in sample.calls)
        # workflow_config reached ctx.config: its params went out with every policy call
        assert [m["role"] for m in sample.messages][-3:] == ["assistant", "tool", "assistant"]


async def test_strands_params_reach_the_policy_call() -> None:
    entry = load_entrypoint(ROLLOUTS / "multiply-local-strands" / "main.py")
    async with FakeOpenAIServer(script=multiply_policy) as server:
        async with RolloutRunner(entry, server) as runner:
            await runner.run_all(rows(1))
        bodies = [request.body for request in server.requests]
    assert bodies and all(b["max_tokens"] == 16384 and b["top_p"] == 1.0 for b in bodies)
    assert bodies[0]["messages"][0] == {"role": "system", "content": rows(1)[0].system_prompt}


async def test_the_process_backend_runs_an_entrypoint_serving_a_local_backend() -> None:
    entry = load_entrypoint(ROLLOUTS / "multiply-local-strands" / "main.py")
    async with FakeOpenAIServer(script=multiply_policy) as server:
        async with RolloutRunner(entry, server, backend="process", max_workers=1) as runner:
            outcomes = await runner.run_all(rows(2))
    assert [o.samples[0].reward for o in outcomes] == [1.0, 1.0]
