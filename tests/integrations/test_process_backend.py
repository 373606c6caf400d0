"""Adapters in worker processes (the runner's ``process`` backend): samples cross the boundary."""

from __future__ import annotations

import pytest

from osmosis_ai.rollout.running import RolloutRunner
from osmosis_ai.testing import FakeOpenAIServer
from tests.integrations._calc import calculator, rows
from tests.integrations._helpers import ROLLOUTS, tool_call_ids


@pytest.mark.parametrize(
    ("entrypoint", "sample_id"), [("strands_calc.py", "main"), ("agents_calc.py", "calculator")]
)
async def test_adapter_samples_from_worker_processes(entrypoint: str, sample_id: str) -> None:
    async with FakeOpenAIServer(script=calculator) as server:
        async with RolloutRunner(
            ROLLOUTS / entrypoint, server, n_samples=2, backend="process", concurrency=2
        ) as runner:
            outcomes = await runner.run_all(rows(1))
    assert len(outcomes) == 2
    for outcome in outcomes:
        sample = outcome.sample(sample_id)
        assert outcome.ok and sample is not None and sample.reward == 1.0, outcome
        assert len(sample.calls) == 2 and all(c.trainable for c in sample.calls)
        assert tool_call_ids(sample.messages) == [t.id for t in sample.calls[0].tool_calls]
        assert sample.extra_fields["tool_calls"]  # the adapter's structure survived pickling
