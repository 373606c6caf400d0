"""HarborBackend on a real Docker daemon (marker ``harbor``; ``nox -s harbor``).

Needs a running Docker daemon: without one these tests skip, except under ``nox -s harbor``
(``OSMOSIS_HARBOR_REQUIRED=1``), where they fail naming what to install. The trial image's base, ``osmosis-test/bookworm:base``, is made
here when missing: a Debian root filesystem from ``debootstrap`` (root, Debian's mirror)
imported with ``docker import``, so no registry is needed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.rollout import AgentWorkflow, ErrorCategory, SampleStatus
from osmosis_ai.rollout.backend.harbor import ContainerRuntimeError, HarborBackend
from osmosis_ai.rollout.backend.harbor._docker import DockerCLI
from osmosis_ai.rollout.context import RolloutContext
from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint
from osmosis_ai.rollout.types import ExecutionRequest, ExecutionResult, RolloutStatus
from osmosis_ai.testing import FakeOpenAIServer, RecordingEndpoint, text, tool_call

pytestmark = [
    pytest.mark.harbor,
    pytest.mark.skipif(sys.platform != "linux", reason="Linux containers on a local daemon"),
    pytest.mark.timeout(900),
]

BASE_IMAGE = "osmosis-test/bookworm:base"
# What this machine's Python links besides libc (see `ldd` of its extension modules).
PYTHON_LIBS = "libssl3,libffi8,libsqlite3-0,libbz2-1.0,libreadline8,libncursesw6"


@pytest.fixture(scope="session")
def base_image() -> str:
    docker = DockerCLI()
    try:
        docker.check()
    except ContainerRuntimeError as exc:
        if os.environ.get("OSMOSIS_HARBOR_REQUIRED"):  # nox -s harbor: not running is a failure
            raise
        pytest.skip(str(exc))
    if docker.image_exists(BASE_IMAGE):
        return BASE_IMAGE
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        pytest.fail(
            f"{BASE_IMAGE} is missing and debootstrap is not installed: "
            "apt-get install -y debootstrap"
        )
    with tempfile.TemporaryDirectory() as folder:
        rootfs = Path(folder) / "rootfs"
        subprocess.run(
            [debootstrap, "--variant=minbase", f"--include={PYTHON_LIBS}", "bookworm", str(rootfs)],
            check=True,
            capture_output=True,
            timeout=1500,
        )
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        done = subprocess.run(
            [docker.path(), "import", "-", BASE_IMAGE],
            stdin=tar.stdout,
            capture_output=True,
            timeout=600,
            check=False,
        )
        tar.wait()
        assert done.returncode == 0, done.stderr.decode()
    return BASE_IMAGE


def on_host(*paths: Path) -> bool:
    """Whether any of the paths exists on this machine (outside every container)."""
    return any(path.exists() for path in paths)


def trial_containers() -> set[str]:
    done = DockerCLI().run("ps", "-a", "-q", "--filter", "label=osmosis.harbor.trial=1")
    return set(done.stdout.decode().split())


def write_task(folder: Path) -> None:
    (folder / "environment").mkdir(parents=True)
    (folder / "environment" / "Dockerfile").write_text(
        f'FROM {BASE_IMAGE}\nCMD ["sleep", "infinity"]\n'
    )
    (folder / "task.toml").write_text("[environment]\ncpus = 1\nmemory_mb = 2048\n")


# An osmosis-ai 0.3 entrypoint: the workflow's tool writes a file in three places (an absolute
# path, the working folder, the rollout folder) and reports which were there already.
NOTES_ENTRY = '''
import dataclasses
import json
import os
from pathlib import Path

from strands import tool

from osmosis_ai.rollout.agent_workflow import AgentWorkflow
from osmosis_ai.rollout.backend.harbor import ContainerRuntimeError, HarborBackend
from osmosis_ai.rollout.grader import Grader
from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent

ROLLOUT_DIR = Path(__file__).resolve().parent
PLACES = ["/tmp/osmosis-harbor-probe/note.txt", "harbor-note.txt", str(ROLLOUT_DIR / "note.txt")]


@tool
def write_note(text: str) -> str:
    """Write a note.

    Args:
        text: what to write.
    """
    seen = [place for place in PLACES if os.path.exists(place)]
    for place in PLACES:
        Path(place).parent.mkdir(parents=True, exist_ok=True)
        Path(place).write_text(text)
    return json.dumps({"seen_before": seen, "trial": os.environ.get("OSMOSIS_HARBOR_TRIAL")})


class NotesWorkflow(AgentWorkflow):
    async def run(self, ctx):
        agent = OsmosisStrandsAgent(
            model=OsmosisRolloutModel(), tools=[write_note], callback_handler=None
        )
        await agent.invoke_async(ctx.prompt[-1]["content"])


class NotesGrader(Grader):
    async def grade(self, ctx):
        for sample_id in ctx.samples:
            ctx.set_sample_reward(sample_id, 1.0)


def main():
    backend = HarborBackend(
        orchestrator=1,
        tasks_dir=ROLLOUT_DIR / "task",
        task_mode="template",
        agent=NotesWorkflow,
        grader=NotesGrader,
        code_dir=ROLLOUT_DIR,
    )
    return backend
'''


class NotesLike(AgentWorkflow):
    async def run(self, ctx: Any) -> None:
        return None


def tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for message in messages:
        if message.get("role") != "tool":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        found.append(json.loads(str(content)))
    return found


def rows(questions: list[str]) -> list[DatasetRow]:
    return [
        DatasetRow(i, i, [{"role": "user", "content": q}], "x", {}, None, q)
        for i, q in enumerate(questions)
    ]


async def test_a_file_a_tool_writes_is_seen_by_neither_the_next_trial_nor_the_host(
    base_image: str, tmp_path: Path
) -> None:
    rollout = tmp_path / "notes"
    write_task(rollout / "task")
    (rollout / "main.py").write_text(textwrap.dedent(NOTES_ENTRY))
    host_places = [
        Path("/tmp/osmosis-harbor-probe/note.txt"),
        Path("/harbor-note.txt"),
        rollout / "note.txt",
    ]
    assert not on_host(*host_places)
    before = trial_containers()

    entry = load_entrypoint(rollout / "main.py")  # the served HarborBackend, validated
    assert isinstance(entry.backend, HarborBackend)
    script = [tool_call("write_note", text="from a trial"), text("written")]
    async with FakeOpenAIServer(script=script) as server:
        async with RolloutRunner(entry, server, concurrency=3, workflow_timeout_s=240) as runner:
            outcomes = await runner.run_all(rows(["note 1", "note 2", "note 3"]))

    assert len(outcomes) == 3
    for outcome in outcomes:
        assert outcome.status is SampleStatus.SUCCESS, outcome.error
        (sample,) = outcome.samples
        assert sample.reward == 1.0
        # the trial ran in its container and reached the gateway from there (2 calls recorded)
        assert [r["trial"] for r in tool_results(sample.messages)] == [outcome.rollout_id]
        assert len(sample.calls) == 2 and all(c.trainable for c in sample.calls)
        # the previous trials' notes are not there: each trial starts from a clean container
        assert [r["seen_before"] for r in tool_results(sample.messages)] == [[]]
    assert not on_host(*host_places)  # nor did any note reach the host
    assert trial_containers() == before  # every trial's container is gone


CRASHY_ENTRY = """
import os, time
from osmosis_ai.rollout import AgentWorkflow

class Crashy(AgentWorkflow):
    async def run(self, ctx):
        question = ctx.prompt[-1]["content"]
        if question == "exit":
            os._exit(3)
        if question == "block":
            time.sleep(600)
        return [{"role": "assistant", "content": os.environ["OSMOSIS_HARBOR_TRIAL"]}]
"""


async def test_crashes_and_stuck_trials_cost_one_rollout_and_leave_no_container(
    base_image: str, tmp_path: Path, endpoint: RecordingEndpoint
) -> None:
    rollout = tmp_path / "crashy"
    write_task(rollout / "task")
    (rollout / "main.py").write_text(textwrap.dedent(CRASHY_ENTRY))
    entry = load_entrypoint(rollout / "main.py")
    backend = HarborBackend(tasks_dir=rollout / "task", agent=entry.workflow_cls, orchestrator=3)
    before = trial_containers()
    trials = backend.runner_backend(entry, endpoint)
    trials.kill_grace_s = 1.0  # type: ignore[attr-defined]
    async with RolloutRunner(entry, endpoint, backend=trials, workflow_timeout_s=5) as runner:
        outcomes = sorted(
            await runner.run_all(rows(["ok", "exit", "block"])), key=lambda o: o.row_index
        )
    ok, crashed, stuck = outcomes
    assert ok.status is SampleStatus.SUCCESS
    assert ok.samples[0].messages[-1]["content"] == ok.rollout_id
    assert crashed.error is not None and crashed.error.category is ErrorCategory.CRASHED
    assert "(it exited with code 3)" in crashed.error.message
    assert stuck.error is not None and stuck.error.category is ErrorCategory.TIMEOUT
    assert trial_containers() == before


async def test_the_03_execute_path_runs_the_workflow_in_a_container(
    base_image: str, tmp_path: Path
) -> None:
    rollout = tmp_path / "execute"
    write_task(rollout / "task")
    (rollout / "main.py").write_text(textwrap.dedent(NOTES_ENTRY))
    entry = load_entrypoint(rollout / "main.py")
    backend = entry.backend
    assert isinstance(backend, HarborBackend)
    results: list[tuple[str, ExecutionResult]] = []

    async def on_workflow(result: ExecutionResult) -> None:
        results.append(("workflow", result))

    async def on_grader(result: ExecutionResult) -> None:
        results.append(("grader", result))

    script = [tool_call("write_note", text="x"), text("written")]
    async with FakeOpenAIServer(script=script) as server:
        url = server.route("r-03", "main").base_url
        with RolloutContext(chat_completions_url=url, rollout_id="r-03"):
            request = ExecutionRequest(
                id="r-03",
                prompt=[{"role": "user", "content": "go"}],
                label="x",
                agent_timeout_sec=240,
            )
            await backend.execute(request, on_workflow, on_grader)
    (_, workflow), (_, graded) = results
    assert workflow.status is RolloutStatus.SUCCESS, workflow.err_message
    assert graded.status is RolloutStatus.SUCCESS and graded.sample is not None
    assert graded.sample.reward == 1.0
    assert [r["trial"] for r in tool_results(list(graded.sample.messages))] == ["r-03"]
    assert not on_host(Path("/tmp/osmosis-harbor-probe/note.txt"))


# The task's own verifier checks what the workflow left in the container (0.3: it wins over
# grader=). A second task's verifier writes no reward.
VERIFIED_ENTRY = """
from pathlib import Path
from osmosis_ai.rollout import AgentWorkflow, Grader

class Answer(AgentWorkflow):
    async def run(self, ctx):
        Path("/srv").mkdir(exist_ok=True)
        Path("/srv/answer.txt").write_text(ctx.prompt[-1]["content"])
        return [{"role": "assistant", "content": "done"}]

class Half(Grader):  # never used: the task's tests/test.sh scores the trials
    async def grade(self, ctx):
        for sample_id in ctx.samples:
            ctx.set_sample_reward(sample_id, 0.5)
"""
VERIFIER = """#!/bin/bash
if [ "$(cat /srv/answer.txt)" = "42" ]; then echo 1 > /logs/verifier/reward.txt
else echo '{"reward": 0}' > /logs/verifier/reward.json; fi
"""


async def test_a_task_verifier_scores_the_trial_inside_its_container(
    base_image: str, tmp_path: Path, endpoint: RecordingEndpoint
) -> None:
    rollout = tmp_path / "verified"
    (rollout / "main.py").parent.mkdir(parents=True)
    (rollout / "main.py").write_text(textwrap.dedent(VERIFIED_ENTRY))
    write_task(rollout / "task")
    (rollout / "task" / "tests").mkdir()
    (rollout / "task" / "tests" / "test.sh").write_text(VERIFIER)
    write_task(rollout / "mute")
    (rollout / "mute" / "tests").mkdir()
    (rollout / "mute" / "tests" / "test.sh").write_text("echo checking; exit 3\n")
    loaded = load_entrypoint(rollout / "main.py")

    for task, questions in (("task", ["42", "41"]), ("mute", ["42"])):
        backend = HarborBackend(
            tasks_dir=rollout / task, agent=loaded.workflow_cls, grader=loaded.grader_cls
        )
        entry = backend.entrypoint()
        assert entry.grader_cls is None  # the verifier wins over grader=
        entry = dataclasses.replace(entry, path=loaded.path)
        async with RolloutRunner(
            entry, endpoint, backend=backend.runner_backend(entry, endpoint), concurrency=2
        ) as runner:
            outcomes = sorted(await runner.run_all(rows(questions)), key=lambda o: o.row_index)
        if task == "task":
            assert [o.reward for o in outcomes] == [1.0, 0.0]
            assert all(o.status is SampleStatus.SUCCESS for o in outcomes)
        else:
            (mute,) = outcomes
            assert mute.error is not None and mute.error.category is ErrorCategory.GRADER_ERROR
            assert "tests/test.sh, exit status 3" in mute.error.message
            assert "wrote neither /logs/verifier/reward.txt nor reward.json" in mute.error.message
            assert "checking" in mute.error.message


async def test_prewarm_builds_the_image_and_checks_that_this_python_starts_in_it(
    base_image: str, tmp_path: Path
) -> None:
    write_task(tmp_path / "task")
    backend = HarborBackend(tasks_dir=tmp_path / "task", agent=NotesLike)
    async with backend.prewarm_lifespan()(object()):
        pass  # the image is built and Python started in it
    (tmp_path / "bare" / "environment").mkdir(parents=True)  # no C library for this Python
    (tmp_path / "bare" / "environment" / "Dockerfile").write_text("FROM scratch\nCOPY x /x\n")
    (tmp_path / "bare" / "environment" / "x").write_text("x")
    bare = HarborBackend(tasks_dir=tmp_path / "bare", agent=NotesLike)
    with pytest.raises(ContainerRuntimeError) as info:
        await bare.prewarm()
    assert "does not start in the trial image osmosis-harbor/bare:" in str(info.value)
    assert "glibc Linux image (Debian, Ubuntu)" in str(info.value)
