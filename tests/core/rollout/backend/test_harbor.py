"""HarborBackend without a container runtime: its constructor, its checks, and the trial plumbing
driven through a stand-in ``docker`` command that runs the worker on this machine.

The real containers (isolation between trials and from the host) are tested in
``test_harbor_docker.py`` (marker ``harbor``, ``nox -s harbor``).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tarfile
import textwrap
from enum import Enum
from io import BytesIO
from pathlib import Path
from types import SimpleNamespace

import pytest

from osmosis_ai.data import DatasetRow
from osmosis_ai.errors import DiscoveryError
from osmosis_ai.rollout import AgentWorkflow, ErrorCategory, Grader, SampleStatus
from osmosis_ai.rollout.backend.harbor import ContainerRuntimeError, HarborBackend, TaskMode
from osmosis_ai.rollout.backend.harbor._docker import (
    DockerCLI,
    host_python_mounts,
    read_reward,
    rollout_archive,
)
from osmosis_ai.rollout.backend.harbor.tasks import HarborTask
from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint
from osmosis_ai.testing import RecordingEndpoint

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell stand-in for docker")


class Echo(AgentWorkflow):
    async def run(self, ctx: object) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": "hi"}]


class Full(Grader):
    async def grade(self, ctx: object) -> None:
        return None


def make_task(root: Path, dockerfile: str = "FROM debian:bookworm\n", toml: str = "") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    if toml:
        (root / "task.toml").write_text(toml)
    return root


def fake_docker(tmp_path: Path, body: str) -> str:
    """A ``docker`` stand-in: a Python script with ``body`` as its main code."""
    path = tmp_path / "bin" / "docker"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport os, sys\nargs = sys.argv[1:]\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_the_original_import_path_and_task_modes() -> None:
    from osmosis_ai.rollout import backend

    assert backend.HarborBackend is HarborBackend
    assert [m.value for m in TaskMode] == ["template", "dataset"]
    assert TaskMode("dataset") is TaskMode.DATASET


class TrialQueue:
    """Shaped like harbor 0.20's ``harbor.trial.queue.TrialQueue`` (what 0.3 entrypoints pass)."""

    def __init__(self, n_concurrent: int) -> None:
        self._n_concurrent = n_concurrent


class EnvironmentType(str, Enum):  # noqa: UP042 - as harbor.models.environment_type defines it
    DOCKER = "docker"
    DAYTONA = "daytona"


def test_the_original_constructor_is_accepted(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task")
    environment = SimpleNamespace(type=EnvironmentType.DOCKER)  # harbor's EnvironmentConfig
    backend = HarborBackend(
        orchestrator=TrialQueue(n_concurrent=3),
        tasks_dir=task,
        task_mode="template",
        agent=Echo,
        workflow_config=None,
        grader=Full,
        grader_config=None,
        code_dir=tmp_path,
        environment_config=environment,
        trials_dir=tmp_path / "trials",
        cleanup_successful_trials=False,
        patch_dockerfile_with_sdk=None,
        agent_setup_timeout_sec=30.0,
        max_queue_depth=2,
    )
    entry = backend.entrypoint()
    assert (entry.workflow_cls, entry.grader_cls) == (Echo, Full)
    assert backend.n_concurrent == backend.max_concurrency == 3
    assert backend.task_mode is TaskMode.TEMPLATE and backend.has_capacity()
    assert backend.health()["backend"] == "harbor"
    assert HarborBackend(tasks_dir=task, agent=Echo, orchestrator=None).n_concurrent == 4
    assert HarborBackend(tasks_dir=task, agent=Echo, orchestrator=2).n_concurrent == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"agent": "terminus-2"}, "'terminus-2' is one of Harbor's native agents"),
        ({"agent": None}, "pass your AgentWorkflow"),
        ({"agent": Echo, "native_agent_kwargs": {"x": 1}}, "native agents"),
        ({"agent": Echo, "bundle": "dist/x.whl"}, "prebuilt wheels are not used here"),
        ({"agent": Echo, "task_mode": "suite"}, "use 'template' or 'dataset'"),
        ({"agent": Echo, "orchestrator": 0}, "a positive int"),
        ({"agent": Echo, "max_queue_depth": 0}, "max_queue_depth must be >= 1"),
        (
            {"agent": Echo, "environment_config": SimpleNamespace(type=EnvironmentType.DAYTONA)},
            "only the local Docker environment runs here",
        ),
    ],
)
def test_what_cannot_run_here_is_refused_with_the_reason(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        HarborBackend(tasks_dir=make_task(tmp_path / "task"), **kwargs)  # type: ignore[arg-type]


def test_validate_without_docker_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker on it
    monkeypatch.delenv("OSMOSIS_HARBOR_TRIAL", raising=False)
    backend = HarborBackend(tasks_dir=make_task(tmp_path / "task"), agent=Echo)
    with pytest.raises(ContainerRuntimeError) as info:
        backend.validate()
    assert "the 'docker' command was not found" in str(info.value)
    assert "apt-get install -y docker.io" in str(info.value)


def test_validate_with_a_daemon_that_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OSMOSIS_HARBOR_TRIAL", raising=False)
    docker = fake_docker(
        tmp_path,
        "sys.stderr.write('Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\\n')\n"
        "sys.exit(1)\n",
    )
    backend = HarborBackend(tasks_dir=make_task(tmp_path / "task"), agent=Echo, docker=docker)
    with pytest.raises(ContainerRuntimeError) as info:
        backend.validate()
    text = str(info.value)
    assert "the Docker daemon does not answer (Cannot connect to the Docker daemon" in text
    assert "'dockerd &'" in text and "apt-get install -y docker.io" in text


ENTRY_03 = """
from pathlib import Path
from osmosis_ai.rollout.agent_workflow import AgentWorkflow
from osmosis_ai.rollout.backend.harbor import HarborBackend

ROLLOUT_DIR = Path(__file__).resolve().parent

class Echo(AgentWorkflow):
    async def run(self, ctx):
        return [{"role": "assistant", "content": "hi"}]

def main():
    backend = HarborBackend(tasks_dir=ROLLOUT_DIR / "task", task_mode="template", agent=Echo,
                            code_dir=ROLLOUT_DIR)
    return backend
"""


def test_an_entrypoint_serving_harbor_fails_at_validate_time_without_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_task(tmp_path / "task")
    (tmp_path / "main.py").write_text(textwrap.dedent(ENTRY_03))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("OSMOSIS_HARBOR_TRIAL", raising=False)
    with pytest.raises(DiscoveryError) as info:
        load_entrypoint(tmp_path / "main.py")
    text = str(info.value)
    assert "serves a HarborBackend, which cannot run here" in text
    assert "apt-get install -y docker.io" in text


def test_osmosis_validate_says_what_to_install_without_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from osmosis_ai.cli import main

    make_task(tmp_path / "task")
    (tmp_path / "main.py").write_text(textwrap.dedent(ENTRY_03))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("OSMOSIS_HARBOR_TRIAL", raising=False)
    code = main(["validate", str(tmp_path / "main.py")])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "serves a HarborBackend, which cannot run here" in err
    assert "apt-get install -y docker.io" in err


def test_task_folders_are_checked_and_read(tmp_path: Path) -> None:
    (tmp_path / "bare").mkdir()
    with pytest.raises(ValueError, match=r"needs environment/Dockerfile"):
        HarborTask(tmp_path / "bare")
    task = make_task(
        tmp_path / "suite" / "mul-1",
        "FROM --platform=linux/amd64 python:3.12-bookworm AS base\nFROM base\n",
        "[environment]\ncpus = 1\nmemory_mb = 512\n[agent]\ntimeout_sec = 120.0\n",
    )
    (task / "instruction.md").write_text("Multiply 6 by 7.")
    found = HarborTask.from_dataset(tmp_path / "suite", "mul-1")
    assert found.path == task.resolve() and found.instruction() == "Multiply 6 by 7."
    assert found.base_images() == ["python:3.12-bookworm", "base"]
    limits = found.limits()
    assert (limits.cpus, limits.memory_mb, limits.agent_timeout_s) == (1.0, 512, 120.0)
    for bad in ("../bare", "nope", "."):
        with pytest.raises(ValueError, match="unknown Harbor task id"):
            HarborTask.from_dataset(tmp_path / "suite", bad)
    tag = found.image_tag()
    assert tag.startswith("osmosis-harbor/mul-1:")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm\n")
    assert found.image_tag() != tag
    (task / "task.toml").write_text("[environment]\nmemory_mb = -1\n")
    with pytest.raises(ValueError, match="memory_mb must be a positive number"):
        found.limits()


def test_dataset_mode_needs_a_task_id_per_row(tmp_path: Path) -> None:
    backend = HarborBackend(tasks_dir=tmp_path, agent=Echo, task_mode=TaskMode.DATASET)
    with pytest.raises(ValueError, match=r"metadata\['harbor_task_id'\]"):
        backend._task({})


def test_mounts_leave_out_the_rollout_branch(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for sub in ("core/pkg", "trainer", "rollouts/r1/tools", "rollouts/r2", "docs"):
        (ws / sub).mkdir(parents=True)
    (ws / "noxfile.py").write_text("")
    rollout = ws / "rollouts" / "r1"
    mounts = host_python_mounts(rollout, [str(ws), str(ws / "core"), str(rollout / "tools"), ""])
    assert ws / "core" in mounts and ws / "trainer" in mounts and ws / "noxfile.py" in mounts
    assert ws / "rollouts" / "r2" in mounts  # a sibling rollout, read-only
    assert not any(m == rollout or m.is_relative_to(rollout) for m in mounts)
    assert ws not in mounts and ws / "rollouts" not in mounts
    assert ws / "core" / "pkg" not in mounts  # inside a mount already
    assert Path(sys.base_prefix) in mounts or Path(os.path.realpath(sys.base_prefix)) in mounts


def test_the_archive_recreates_the_rollout_at_its_own_path(tmp_path: Path) -> None:
    rollout = tmp_path / "r1"
    (rollout / "pkg" / "__pycache__").mkdir(parents=True)
    (rollout / ".git").mkdir()
    (rollout / "main.py").write_text("x = 1\n")
    (rollout / "pkg" / "tool.py").write_text("y = 2\n")
    (rollout / "pkg" / "__pycache__" / "tool.cpython-311.pyc").write_bytes(b"\0")
    (rollout / ".git" / "HEAD").write_text("ref\n")
    with tarfile.open(fileobj=BytesIO(rollout_archive(rollout))) as tar:
        names = tar.getnames()
        files = {n: tar.extractfile(n).read() for n in names if tar.getmember(n).isfile()}  # type: ignore[union-attr]
    base = str(rollout).lstrip("/")
    assert names[0] == base.split("/")[0]  # ancestors first, so the path exists in the container
    assert files == {f"{base}/main.py": b"x = 1\n", f"{base}/pkg/tool.py": b"y = 2\n"}
    assert not any("__pycache__" in n or ".git" in n for n in names)


# A docker stand-in that records each call and runs `docker exec`'s command on this machine
# (the environment as docker would give it: the host's for `-e NAME`, the value for `-e K=V`).
RUNS_LOCALLY = """
log = os.environ["FAKE_DOCKER_LOG"]
with open(log, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "version":
    print("99.0")
elif args[0] == "cp":
    sys.stdin.buffer.read()
elif args[0] == "exec":
    env, i = {}, 1
    while args[i].startswith("-"):
        if args[i] == "-e":
            key, eq, value = args[i + 1].partition("=")
            env[key] = value if eq else os.environ.get(key, "")
            i += 2
        else:
            i += 1
    os.execve(args[i + 1], args[i + 1:], env)
"""

ENTRY = """
import os
from osmosis_ai.rollout import AgentWorkflow, Grader

class Where(AgentWorkflow):
    async def run(self, ctx):
        if ctx.prompt[-1]["content"] == "exit":
            os._exit(3)
        url = ctx.route().base_url
        return [{"role": "assistant", "content": " ".join(
            [os.environ["OSMOSIS_HARBOR_TRIAL"], os.environ["HARBOR_TEST_SECRET"], url])}]

class Reward(Grader):
    async def grade(self, ctx):
        for sid in ctx.samples:
            ctx.set_sample_reward(sid, 1.0)
"""


async def test_each_trial_starts_a_container_runs_the_worker_once_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: RecordingEndpoint
) -> None:
    log = tmp_path / "docker.log"
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setenv("HARBOR_TEST_SECRET", "s3cret-value")
    docker = fake_docker(tmp_path, "import json\n" + RUNS_LOCALLY)
    rollout = tmp_path / "rollout"
    make_task(rollout / "task", toml="[environment]\ncpus = 2\nmemory_mb = 2048\n")
    (rollout / "main.py").write_text(textwrap.dedent(ENTRY))
    entry = load_entrypoint(rollout / "main.py")
    backend = HarborBackend(
        tasks_dir=rollout / "task",
        agent=entry.workflow_cls,
        grader=entry.grader_cls,
        docker=docker,
        orchestrator=2,
    )
    rows = [
        DatasetRow(i, i, [{"role": "user", "content": q}], "x", {}, None, q)
        for i, q in enumerate(["a", "exit", "b"])
    ]
    async with RolloutRunner(
        entry,
        endpoint,
        backend=backend.runner_backend(entry, endpoint),
        concurrency=2,
        workflow_timeout_s=30,
    ) as runner:
        outcomes = sorted(await runner.run_all(rows), key=lambda o: o.row_index)

    ok = [outcomes[0], outcomes[2]]
    for outcome in ok:
        assert outcome.status is SampleStatus.SUCCESS and outcome.reward == 1.0
        trial, secret, url = outcome.samples[0].messages[-1]["content"].split()
        assert trial == outcome.rollout_id and secret == "s3cret-value"
        assert url == endpoint.route(outcome.rollout_id, "main").base_url
    crashed = outcomes[1].error
    assert crashed is not None and crashed.category is ErrorCategory.CRASHED
    assert "(it exited with code 3)" in crashed.message

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    verbs = [c[0] for c in calls]
    assert verbs.count("create") == verbs.count("start") == verbs.count("exec") == 3
    assert verbs.count("rm") == 3  # one container per trial, each removed
    create = next(c for c in calls if c[0] == "create")
    assert create[create.index("--cpus") + 1] == "2" and "2048m" in create
    assert create[create.index("--network") + 1] == "host"
    # an orphaned container (runner killed) stops by itself: start 120 s + workflow 30 s +
    # kill grace 5 s + 300 s of slack
    assert create[-1] == "455"
    # a secret travels by name only: its value is never on a docker command line
    assert "s3cret-value" not in log.read_text()
    assert any(c[0] == "exec" and "HARBOR_TEST_SECRET" in c for c in calls)


async def test_a_container_that_does_not_start_fails_that_rollout_only(
    tmp_path: Path, endpoint: RecordingEndpoint
) -> None:
    docker = fake_docker(
        tmp_path,
        "if args[0] == 'create':\n"
        "    sys.stderr.write('Error: No such image: osmosis-harbor/task:x\\n'); sys.exit(1)\n",
    )
    rollout = tmp_path / "rollout"
    make_task(rollout / "task")
    (rollout / "main.py").write_text(textwrap.dedent(ENTRY))
    entry = load_entrypoint(rollout / "main.py")
    backend = HarborBackend(tasks_dir=rollout / "task", agent=entry.workflow_cls, docker=docker)
    row = DatasetRow(0, 0, [{"role": "user", "content": "a"}], "x", {}, None, "a")
    async with RolloutRunner(entry, endpoint, backend=backend.runner_backend(entry, endpoint)) as r:
        (outcome,) = await r.run_all([row])
    assert outcome.error is not None and outcome.error.category is ErrorCategory.INTERNAL_ERROR
    assert "could not start a trial container" in outcome.error.message
    assert "No such image" in outcome.error.message


def test_a_base_image_missing_offline_is_named(tmp_path: Path) -> None:
    docker = fake_docker(
        tmp_path,
        "if args[0] == 'build':\n"
        "    sys.stderr.write('pull access denied for python, repository does not exist\\n')\n"
        "    sys.exit(1)\n"
        "if args[:2] == ['image', 'inspect']:\n"
        "    sys.exit(1)\n",
    )
    task = HarborTask(make_task(tmp_path / "task", "FROM python:3.12-bookworm\n"))
    with pytest.raises(ContainerRuntimeError) as info:
        DockerCLI(docker).build(task.environment, "t:1", task.base_images(), timeout=30)
    text = str(info.value)
    assert "pull access denied" in text
    assert "The base image python:3.12-bookworm is not on this machine" in text


@pytest.mark.parametrize(
    ("json_text", "txt_text", "expected"),
    [
        ('{"reward": 0.5, "passed": 1}', None, 0.5),
        ('{"accuracy": 1}', "0.0", 1.0),
        (None, " 1\n", 1.0),
    ],
)
def test_a_verifier_reward_is_read_as_harbor_writes_it(
    json_text: str | None, txt_text: str | None, expected: float
) -> None:
    assert read_reward(json_text, txt_text) == expected


@pytest.mark.parametrize(
    ("json_text", "txt_text", "message"),
    [
        ('{"a": 1, "b": 0}', None, "osmosis trains on one reward"),
        (None, "nan", "must be finite"),
        (None, "passed", "must be a number"),
        ('{"reward": true}', None, "must be a number"),
        (None, None, "neither /logs/verifier/reward.txt nor reward.json"),
    ],
)
def test_a_verifier_reward_that_cannot_train_is_refused(
    json_text: str | None, txt_text: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        read_reward(json_text, txt_text)


def test_a_task_verifier_replaces_the_grader(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", toml="[verifier]\ntimeout_sec = 60.0\n")
    backend = HarborBackend(tasks_dir=task, agent=Echo, grader=Full)
    assert not backend.verifier_scores() and backend.entrypoint().grader_cls is Full
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    assert backend.verifier_scores() and backend.entrypoint().grader_cls is None
    assert HarborTask(task).limits().verifier_timeout_s == 60.0

    suite = tmp_path / "suite"
    for name in ("a", "b"):
        make_task(suite / name)
        (suite / name / "tests").mkdir()
        (suite / name / "tests" / "test.sh").write_text("exit 0\n")
    dataset = HarborBackend(tasks_dir=suite, agent=Echo, grader=Full, task_mode="dataset")
    assert dataset.verifier_scores()
    (suite / "b" / "tests" / "test.sh").unlink()  # one task without: the grader scores all
    assert not dataset.verifier_scores()


DATASET_ENTRY = """
from osmosis_ai.rollout import AgentWorkflow

class Instructed(AgentWorkflow):
    async def run(self, ctx):
        return [{"role": "assistant", "content": ctx.prompt[-1]["content"]}]
"""


async def test_dataset_mode_runs_each_row_in_its_own_task_with_its_instruction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, endpoint: RecordingEndpoint
) -> None:
    log = tmp_path / "docker.log"
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    docker = fake_docker(tmp_path, "import json\n" + RUNS_LOCALLY)
    rollout = tmp_path / "rollout"
    for name, text in (("mul-1", "Multiply 6 by 7."), ("add-1", "Add 2 and 3.")):
        make_task(rollout / "tasks" / name, f"FROM debian:bookworm\nLABEL task={name}\n")
        (rollout / "tasks" / name / "instruction.md").write_text(text)
    (rollout / "main.py").write_text(textwrap.dedent(DATASET_ENTRY))
    entry = load_entrypoint(rollout / "main.py")
    backend = HarborBackend(
        tasks_dir=rollout / "tasks", agent=entry.workflow_cls, task_mode="dataset", docker=docker
    )
    rows = [
        DatasetRow(i, i, [{"role": "user", "content": "row prompt"}], "x", meta, None, "q")
        for i, meta in enumerate(
            [{"harbor_task_id": "mul-1"}, {"harbor_task_id": "add-1"}, {"harbor_task_id": "../x"}]
        )
    ]
    async with RolloutRunner(
        entry, endpoint, backend=backend.runner_backend(entry, endpoint), concurrency=3
    ) as runner:
        mul, add, bad = sorted(await runner.run_all(rows), key=lambda o: o.row_index)
    assert mul.samples[0].messages[-1]["content"] == "Multiply 6 by 7."
    assert add.samples[0].messages[-1]["content"] == "Add 2 and 3."
    assert bad.error is not None and bad.error.category is ErrorCategory.VALIDATION_ERROR
    assert "unknown Harbor task id '../x'" in bad.error.message
    images = {c[-2] for c in map(json.loads, log.read_text().splitlines()) if c[0] == "create"}
    assert len(images) == 2  # one image per task


def test_an_entrypoint_importing_upstream_harbor_is_told_it_is_not_needed(tmp_path: Path) -> None:
    entry = tmp_path / "main.py"
    entry.write_text("from harbor_missing_for_test import x\n")  # any module: must not mislead
    with pytest.raises(DiscoveryError) as other:
        load_entrypoint(entry)
    assert "upstream harbor" not in str(other.value)
    entry.write_text(
        "from harbor.trial.queue import TrialQueue\n"
        + textwrap.dedent(ENTRY_03).replace(
            "agent=Echo,", "agent=Echo, orchestrator=TrialQueue(2),"
        )
    )
    try:
        import harbor  # noqa: F401
    except ImportError:
        with pytest.raises(DiscoveryError) as info:
            load_entrypoint(entry)
        text = str(info.value)
        assert "main.py:1: importing the entrypoint failed: No module named 'harbor'" in text
        assert "pass orchestrator=N (trials at once) instead of TrialQueue(n_concurrent=N)" in text
    else:  # pragma: no cover - harbor installed (Python >= 3.12)
        pytest.skip("the upstream harbor package is installed here")


async def test_a_container_that_cannot_be_removed_does_not_change_the_outcome(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    endpoint: RecordingEndpoint,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "docker.log"))
    monkeypatch.setenv("HARBOR_TEST_SECRET", "x")
    docker = fake_docker(
        tmp_path,
        "import json\n"
        "if args[0] == 'rm':\n"
        "    sys.stderr.write('Error response from daemon: removal is stuck\\n'); sys.exit(1)\n"
        + RUNS_LOCALLY,
    )
    rollout = tmp_path / "rollout"
    make_task(rollout / "task")
    (rollout / "main.py").write_text(textwrap.dedent(ENTRY))
    entry = load_entrypoint(rollout / "main.py")
    backend = HarborBackend(tasks_dir=rollout / "task", agent=entry.workflow_cls, docker=docker)
    row = DatasetRow(0, 0, [{"role": "user", "content": "a"}], "x", {}, None, "a")
    async with RolloutRunner(entry, endpoint, backend=backend.runner_backend(entry, endpoint)) as r:
        (outcome,) = await r.run_all([row])
    assert outcome.status is SampleStatus.SUCCESS
    (warning,) = [m for m in caplog.messages if "could not remove trial container" in m]
    assert "removal is stuck" in warning and "run 'docker rm -f osmosis-trial-" in warning
