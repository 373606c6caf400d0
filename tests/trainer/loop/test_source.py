"""GatewayRolloutSource: GRPO groups come from the runner, once."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout.running import RolloutRunner
from osmosis_ai.testing import FakeOpenAIServer
from osmosis_trainer.loop._source import GatewayRolloutSource

ENTRY = '''
from osmosis_ai.rollout import AgentWorkflow, Grader

class Chat(AgentWorkflow):
    async def run(self, ctx):
        reply = await ctx.chat()
        return [*ctx.prompt, reply.message]

class ByIndex(Grader):
    async def grade(self, ctx):
        for sid in ctx.samples:
            ctx.set_sample_reward(sid, float(ctx.sample_index))
'''


@pytest.fixture()
def entry(tmp_path: Path) -> Path:
    path = tmp_path / "main.py"
    path.write_text(textwrap.dedent(ENTRY))
    return path


def _row(i: int) -> DatasetRow:
    return DatasetRow(i, i, [{"role": "user", "content": f"q{i}"}], "x", {}, None, f"q{i}")


async def test_each_row_position_is_one_group_even_when_rows_repeat(entry: Path) -> None:
    row = _row(7)
    async with FakeOpenAIServer(script=["a"]) as server:
        runner = RolloutRunner(entry, server, n_samples=3, concurrency=6)
        source = GatewayRolloutSource(runner, server)
        try:
            out = await source.collect([row, row, _row(8)], step=1)
        finally:
            await runner.aclose()
    assert out.n_rollouts == 9 and out.n_failed == 0
    groups: dict[int, list[float]] = {}
    for s in out.samples:
        groups.setdefault(s.group_id, []).append(s.reward)
    # The same row given twice is two GRPO groups (row_index alone would merge them into six).
    assert sorted(groups) == [0, 1, 2]
    assert all(sorted(rewards) == [0.0, 1.0, 2.0] for rewards in groups.values())
