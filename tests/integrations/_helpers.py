"""Helpers for adapter tests: run rollouts through the real runner, or open a scope by hand."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from osmosis_ai.rollout import LLMCall, RolloutSample
from osmosis_ai.rollout.running import RolloutOutcome, RolloutRunner
from osmosis_ai.rollout.scope import PolicyEndpoint, RolloutScope, rollout_scope

ROLLOUTS = Path(__file__).parent / "rollouts"


async def run_rollouts(
    entrypoint: str | Path,
    endpoint: PolicyEndpoint,
    rows: list[Any],
    *,
    n_samples: int = 1,
    concurrency: int = 16,
) -> tuple[list[RolloutOutcome], RolloutRunner]:
    """Run ``rows`` through ``rollouts/<entrypoint>`` (or a path) with the real RolloutRunner."""
    async with RolloutRunner(
        entrypoint if isinstance(entrypoint, Path) else ROLLOUTS / entrypoint,
        endpoint,
        n_samples=n_samples,
        concurrency=concurrency,
        workflow_timeout_s=120,
        grader_timeout_s=30,
    ) as runner:
        outcomes = await runner.run_all(rows)
    for outcome in outcomes:
        assert outcome.ok, (outcome.status, outcome.error, [s.error for s in outcome.samples])
    return sorted(outcomes, key=lambda o: (o.row_index, o.sample_index)), runner


@contextmanager
def in_rollout(endpoint: PolicyEndpoint, rollout_id: str = "r1") -> Iterator[RolloutScope]:
    """A hand-opened rollout scope (what the runner does around ``workflow.run``)."""
    with rollout_scope(RolloutScope(rollout_id=rollout_id, endpoint=endpoint)) as scope:
        yield scope


async def samples_of(scope: RolloutScope) -> dict[str, RolloutSample]:
    """Build the registered samples and join the endpoint's calls (as the runner does)."""
    calls: dict[str, list[LLMCall]] = await scope.endpoint.collect(scope.rollout_id)
    samples = {}
    for sample_id, source in scope.sources.items():
        sample = source.build_sample(sample_id)
        sample.calls = calls.pop(sample_id, [])
        samples[sample_id] = sample
    assert not calls, f"calls recorded for samples nobody registered: {list(calls)}"
    return samples


def tool_call_ids(messages: list[dict[str, Any]]) -> list[str]:
    """Ids of the tool calls in chat-shaped messages, in order."""
    return [c["id"] for m in messages for c in (m.get("tool_calls") or [])]
