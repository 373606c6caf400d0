"""The runner against a real HTTP policy endpoint (FakeOpenAIServer), in both backends."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout import ErrorCategory, SampleStatus
from osmosis_ai.rollout.running import RolloutRunner
from osmosis_ai.testing import FakeOpenAIServer, http_error

ENTRY = '''
from osmosis_ai.rollout import AgentWorkflow, Grader

class Chat(AgentWorkflow):
    async def run(self, ctx):
        first = await ctx.chat()
        second = await ctx.chat(sample_id="critic", messages=[{"role": "user", "content": "ok?"}])
        return [*ctx.prompt, first.message]

class Exact(Grader):
    async def grade(self, ctx):
        for sid, s in ctx.samples.items():
            ctx.set_sample_reward(sid, float(s.messages[-1]["content"] == ctx.label))
'''


def make_row(i: int, label: str) -> DatasetRow:
    return DatasetRow(i, i, [{"role": "user", "content": "2+2?"}], label, {}, None, "2+2?")


@pytest.fixture()
def entry(tmp_path: Path) -> Path:
    path = tmp_path / "main.py"
    path.write_text(textwrap.dedent(ENTRY))
    return path


@pytest.mark.parametrize("backend", ["local", "process"])
async def test_policy_calls_are_recorded_per_sample_and_joined(entry: Path, backend: str) -> None:
    async with FakeOpenAIServer(script=["4"]) as server:
        async with RolloutRunner(entry, server, n_samples=2, backend=backend,  # type: ignore[arg-type]
                                 concurrency=2, sampling={"temperature": 0.5}) as runner:
            outcomes = await runner.run_all([make_row(0, "4")])
    assert len(outcomes) == 2
    for o in outcomes:
        samples = {s.id: s for s in o.samples}
        assert set(samples) == {"main", "critic"}
        main, critic = samples["main"], samples["critic"]
        assert main.messages[-1]["content"] == "4" and main.reward == 1.0
        assert [c.sample_id for c in main.calls] == ["main"]
        assert main.calls[0].rollout_id == o.rollout_id and main.trainable
        # the critic sample is built from its last call (request + response)
        assert critic.messages == [{"role": "user", "content": "ok?"},
                                   {"role": "assistant", "content": "4"}]
        assert critic.reward == 1.0
    assert all(r.body.get("temperature") == 0.5 for r in server.requests)


async def test_policy_http_errors_are_http_error(entry: Path) -> None:
    async with FakeOpenAIServer(script=[http_error(400, "context too long")]) as server:
        async with RolloutRunner(entry, server) as runner:
            (o,) = await runner.run_all([make_row(0, "4")])
    assert o.status is SampleStatus.FAILED
    assert o.error is not None and o.error.category is ErrorCategory.HTTP_ERROR
    assert "answered HTTP 400" in o.error.message
    # the failed call is not silently scored: no sample carries a reward
    assert all(s.reward is None for s in o.samples)
