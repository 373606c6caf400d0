from __future__ import annotations

import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout import ErrorCategory, SampleStatus
from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint
from osmosis_ai.testing import RecordingEndpoint

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and rlimits")

ENTRY = '''
import asyncio, ctypes, os, signal, time
from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowConfig, Grader, RolloutSample
from osmosis_ai.rollout.scope import current_rollout

workflow_config = AgentWorkflowConfig(name="p", greeting="hi")

class Source:
    def build_sample(self, sample_id):
        return RolloutSample(id=sample_id, messages=[{"role": "user", "content": "from worker"}],
                             metrics={"pid": float(os.getpid())})

class Isolated(AgentWorkflow):
    async def run(self, ctx):
        q = ctx.prompt[-1]["content"]
        print("a print must not break the protocol")
        if q == "exit":
            os._exit(3)
        if q == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if q == "block":
            time.sleep(60)
        if q == "hog":
            hog = bytearray(4 * 1024 ** 3)
            return [{"role": "assistant", "content": str(len(hog))}]
        if q == "source":
            scope = current_rollout()
            scope.register_sample_source(scope.claim_sample_id("agent"), Source())
            return None
        return [{"role": "assistant", "content": f"{self.config.greeting} {q} "
                 f"{ctx.route('agent').base_url} {os.getpid()}"}]

class Reward(Grader):
    async def grade(self, ctx):
        for sid in ctx.samples:
            ctx.set_sample_reward(sid, 1.0)
'''


def make_row(i: int, question: str) -> DatasetRow:
    return DatasetRow(i, i, [{"role": "user", "content": question}], "x", {}, None, question)


@pytest.fixture()
def entry(tmp_path: Path) -> Path:
    path = tmp_path / "main.py"
    path.write_text(textwrap.dedent(ENTRY))
    return path


async def test_crashes_blocking_and_memory_hogs_cost_one_rollout_each(
    entry: Path, endpoint: RecordingEndpoint
) -> None:
    questions = ["ok", "exit", "segv", "block", "hog", "ok", "source", "ok"]
    async with RolloutRunner(
        entry, endpoint, backend="process", concurrency=2, workflow_timeout_s=4.0,
        memory_limit_mb=1024,
    ) as runner:
        runner.backend.kill_grace_s = 0.5  # type: ignore[attr-defined]
        outcomes = await runner.run_all([make_row(i, q) for i, q in enumerate(questions)])
        by_q: dict[str, Any] = dict(zip(questions, outcomes, strict=True))

        ok = [o for q, o in zip(questions, outcomes, strict=True) if q == "ok"]
        assert all(o.status is SampleStatus.SUCCESS and o.reward == 1.0 for o in ok)
        text = ok[0].samples[0].messages[-1]["content"]
        greeting, question, url, pid = text.split()
        assert (greeting, question) == ("hi", "ok")
        assert url == endpoint.route(ok[0].rollout_id, "agent").base_url
        assert int(pid) != __import__("os").getpid()

        exit_error = by_q["exit"].error
        assert exit_error.category is ErrorCategory.CRASHED
        assert f"the worker process running rollout {by_q['exit'].rollout_id} died (it exited " \
               "with code 3); it was replaced" == exit_error.message
        segv_error = by_q["segv"].error
        assert segv_error.category is ErrorCategory.CRASHED
        assert "(killed by signal SIGSEGV)" in segv_error.message

        block_error = by_q["block"].error
        assert block_error.category is ErrorCategory.TIMEOUT
        assert block_error.message.startswith("workflow timed out after 4 s and did not stop")

        hog = by_q["hog"]
        assert hog.status is SampleStatus.FAILED and hog.reward is None
        assert hog.error.category in (ErrorCategory.AGENT_ERROR, ErrorCategory.CRASHED)

        (sample,) = by_q["source"].samples
        assert sample.id == "agent" and sample.messages == [{"role": "user", "content": "from worker"}]
        assert sample.reward == 1.0 and sample.metrics["pid"] != __import__("os").getpid()

        # the pool still works after all that, with at most 2 workers alive
        (again,) = await runner.run_all([make_row(0, "ok")])
        assert again.ok
        assert len(runner.backend._workers) <= 2  # type: ignore[attr-defined]
    assert runner.backend._workers == set()  # type: ignore[attr-defined]


async def test_config_from_the_parent_entrypoint_is_sent_to_workers(
    entry: Path, endpoint: RecordingEndpoint
) -> None:
    ep = load_entrypoint(entry)
    config = ep.workflow_config.model_copy(update={"greeting": "bonjour"})
    async with RolloutRunner(replace(ep, workflow_config=config), endpoint, backend="process",
                             concurrency=1) as runner:
        (o,) = await runner.run_all([make_row(0, "ok")])
    assert o.samples[0].messages[-1]["content"].startswith("bonjour ok ")


async def test_a_worker_that_cannot_start_fails_rollouts_with_the_reason(
    tmp_path: Path, endpoint: RecordingEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "main.py"
    path.write_text(textwrap.dedent('''
        import os
        from osmosis_ai.rollout import AgentWorkflow
        if os.environ.get("OSMOSIS_TEST_IN_WORKER") == "1":
            raise RuntimeError("only in the worker")
        class W(AgentWorkflow):
            async def run(self, ctx):
                return []
    '''))
    runner = RolloutRunner(path, endpoint, backend="process", concurrency=1)
    monkeypatch.setenv("OSMOSIS_TEST_IN_WORKER", "1")  # the parent imported it already
    async with runner:
        (o,) = await runner.run_all([make_row(0, "ok")])
    assert o.error is not None and o.error.category is ErrorCategory.INTERNAL_ERROR
    assert "could not start a worker process: DiscoveryError:" in o.error.message
    assert "only in the worker" in o.error.message
