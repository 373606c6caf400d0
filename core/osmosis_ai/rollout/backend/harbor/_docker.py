"""Trials in Docker containers, through the ``docker`` command line.

:class:`ContainerTrials` is the runner's backend for a :class:`HarborBackend`: the
:class:`~osmosis_ai.rollout._backends.ProcessBackend` protocol and worker
(``python -m osmosis_ai.rollout._worker``), with each worker started in a fresh container that
is removed when its one rollout ends. The rollout folder is copied into the container (at the
same absolute path, so the entrypoint and its pickled config resolve as on the host); this
machine's Python environment is mounted read-only at its own paths. A file a workflow or a
tool writes therefore lands in the container's own layer: the host and the next trial never
see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import io
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from osmosis_ai.errors import OsmosisError
from osmosis_ai.rollout._backends import _CORE_DIR, ProcessBackend, _error_run, _Worker
from osmosis_ai.rollout._discovery import Entrypoint
from osmosis_ai.rollout._execution import WorkflowRequest, WorkflowRun
from osmosis_ai.rollout._types import ErrorCategory, RolloutSample, SampleError, SampleStatus
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID, PolicyEndpoint

__all__ = [
    "INSTALL_HINT",
    "TRIAL_ENV",
    "ContainerRuntimeError",
    "ContainerTrials",
    "DockerCLI",
    "TrialPlan",
    "host_python_mounts",
    "mount_args",
    "probe_python",
    "read_reward",
    "rollout_archive",
    "tests_archive",
    "verify_trial",
]

logger = logging.getLogger("osmosis")

INSTALL_HINT = (
    "install Docker and start its daemon: on Debian/Ubuntu 'apt-get install -y docker.io' then "
    "'dockerd &' (as root) or 'systemctl start docker'; elsewhere see "
    "https://docs.docker.com/engine/install/"
)
TRIAL_ENV = "OSMOSIS_HARBOR_TRIAL"
"""Set inside a trial's container (to the rollout id): code there is already isolated."""

_SKIP_DIRS = frozenset(
    {
        ".git",
        "__pycache__",
        ".venv",
        "venv",
        ".nox",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".osmosis",
    }
)
_HOST_ONLY_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "PWD",
        "OLDPWD",
        "HOSTNAME",
        "SHELL",
        "SHLVL",
        "TERM",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "MAIL",
        "DISPLAY",
        "VIRTUAL_ENV",
        "PYTHONHOME",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "LS_COLORS",
        "_",
    }
)
_HOST_ONLY_PREFIXES = ("SSH_", "XDG_", "DBUS_", "DOCKER_")
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_TRIAL: contextvars.ContextVar[tuple[str, float | None]] = contextvars.ContextVar(
    "osmosis_harbor_trial", default=("", None)
)
"""The rollout id a container is being started for, and how long it may live (``None``: no
limit)."""


class ContainerRuntimeError(OsmosisError, RuntimeError):
    """No usable container runtime (or a trial image cannot be built); says what to do."""


class DockerCLI:
    """The ``docker`` command line (``executable``: a name on ``PATH`` or a path)."""

    def __init__(self, executable: str = "docker") -> None:
        self.executable = executable

    def path(self) -> str:
        """The executable's full path; raises when it is not installed."""
        found = shutil.which(self.executable)
        if found is None:
            raise ContainerRuntimeError(
                f"HarborBackend runs each trial in a container, but the '{self.executable}' "
                f"command was not found: {INSTALL_HINT}"
            )
        return found

    def run(
        self, *args: str, timeout: float = 60.0, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``docker ARGS`` and return it finished (never raises for a non-zero status)."""
        try:
            return subprocess.run(
                [self.path(), *args],
                input=stdin,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ContainerRuntimeError(
                f"'docker {' '.join(args[:2])}' did not finish within {timeout:g} s; is the "
                "Docker daemon overloaded or stuck?"
            ) from exc

    def check(self) -> str:
        """The daemon's version; raises (naming what to install or start) when none answers."""
        done = self.run("version", "--format", "{{.Server.Version}}", timeout=30.0)
        version = done.stdout.decode(errors="replace").strip()
        if done.returncode != 0 or not version:
            why = _last_line(done.stderr) or f"exit status {done.returncode}"
            raise ContainerRuntimeError(
                f"the Docker daemon does not answer ({why}). HarborBackend runs each trial in a "
                f"container: {INSTALL_HINT}"
            )
        return version

    def image_exists(self, tag: str) -> bool:
        return self.run("image", "inspect", tag, timeout=30.0).returncode == 0

    def build(self, context: Path, tag: str, base_images: Sequence[str], *, timeout: float) -> None:
        """``docker build -t tag context``; a failure names the base images it needs."""
        done = self.run("build", "-q", "-t", tag, str(context), timeout=timeout)
        if done.returncode == 0:
            return
        text = done.stderr.decode(errors="replace")
        tail = "\n".join(text.strip().splitlines()[-5:])
        missing = [image for image in base_images if not self.image_exists(image)]
        hint = (
            f" The base image{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"{'are' if len(missing) > 1 else 'is'} not on this machine: 'docker pull' "
            f"{'them' if len(missing) > 1 else 'it'} where a registry is reachable, or build "
            "one locally and tag it with that name ('docker import ROOTFS.tar NAME')."
            if missing
            else ""
        )
        raise ContainerRuntimeError(
            f"building the trial image from {context / 'Dockerfile'} failed:\n{tail}\n{hint}".rstrip()
        )


def _last_line(data: bytes) -> str:
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else ""


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def host_python_mounts(
    rollout_dir: Path | None, path_entries: Iterable[str] | None = None
) -> list[Path]:
    """The folders to mount read-only so this interpreter and its packages run in a container.

    Those are the interpreter's prefixes and every folder on ``sys.path``. A folder that
    contains the rollout folder is mounted child by child, leaving out the branch that leads to
    the rollout (the rollout is copied into the container instead, so it stays writable there);
    folders inside the rollout are left out.
    """
    rollout = Path(os.path.abspath(rollout_dir)) if rollout_dir is not None else None
    roots: list[Path] = []
    entries = sys.path if path_entries is None else path_entries
    for raw in (sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix, *entries):
        if not raw:
            continue
        path = Path(os.path.abspath(raw))
        real = Path(os.path.realpath(raw))
        for candidate in (path, real):
            if candidate.is_dir() and candidate not in roots:
                roots.append(candidate)

    chosen: list[Path] = []

    def add(path: Path) -> None:
        if rollout is not None and _inside(path, rollout):
            return
        if rollout is not None and _inside(rollout, path):
            with contextlib.suppress(OSError):
                for child in sorted(path.iterdir()):
                    if child.is_dir() and not child.is_symlink():
                        add(child)
                    elif child.is_file() and not child.is_symlink():
                        chosen.append(child)
            return
        chosen.append(path)

    for root in roots:
        add(root)
    kept: list[Path] = []
    for path in sorted(set(chosen), key=lambda p: (len(p.parts), str(p))):
        if not any(_inside(path, outer) for outer in kept):
            kept.append(path)
    return kept


def rollout_archive(rollout_dir: Path) -> bytes:
    """A tar of the rollout folder whose member names are its absolute path without ``/``.

    Extracted at ``/`` in a container (``docker cp - NAME:/``), it recreates the folder at the
    host's path. Caches, virtual environments and VCS folders are left out.
    """
    root = Path(os.path.abspath(rollout_dir))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        # The folder and its ancestors first, with the host's modes (``/tmp`` keeps its
        # sticky bit).
        for folder in (*reversed(root.parents[:-1]), root):
            info = tar.gettarinfo(str(folder), arcname=str(folder).lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info)

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            if Path(info.name).name in _SKIP_DIRS and info.isdir():
                return None
            if Path(info.name).suffix in {".pyc", ".pyo"}:
                return None
            return info

        for entry in sorted(root.iterdir()) if root.is_dir() else ():
            if entry.name in _SKIP_DIRS:
                continue
            tar.add(str(entry), arcname=str(entry).lstrip("/"), filter=keep)
    return buffer.getvalue()


def mount_args(paths: Iterable[Path]) -> list[str]:
    """``--mount`` options that bind each path read-only at its own place."""
    args = []
    for path in paths:
        text = str(path)
        if "," in text or "\n" in text:
            raise ContainerRuntimeError(
                f"cannot mount {text!r} into a trial container (a comma or newline in the "
                "path); move the Python environment or the rollout to a plainer path"
            )
        args += ["--mount", f"type=bind,source={text},target={text},readonly"]
    return args


def probe_python(docker: DockerCLI, image: str) -> None:
    """Check that this machine's Python (mounted as in a trial) starts in ``image``."""
    done = docker.run(
        "run",
        "--rm",
        "--network",
        "none",
        *mount_args(host_python_mounts(None)),
        "-e",
        f"PYTHONPATH={_CORE_DIR}",
        image,
        sys.executable,
        "-c",
        "import osmosis_ai.rollout._worker",
        timeout=120.0,
    )
    if done.returncode != 0:
        raise ContainerRuntimeError(
            f"this machine's Python ({sys.executable}) does not start in the trial image "
            f"{image}: {_last_line(done.stderr) or f'exit status {done.returncode}'}. Base the "
            "task's Dockerfile on a glibc Linux image (Debian, Ubuntu) that has the C libraries "
            "this Python links (libssl, libffi, ...)"
        )


def _env_names() -> list[str]:
    """The host variables passed on to a trial (by name, so values stay off command lines)."""
    names = []
    for name in sorted(os.environ):
        if name in _HOST_ONLY_ENV or name.startswith(_HOST_ONLY_PREFIXES):
            continue
        if not name or "=" in name or not name.replace("_", "a").isalnum():
            continue
        names.append(name)
    return names


@dataclass
class TrialPlan:
    """How one task's trials are started.

    Attributes:
        image: the built image (a tag).
        rollout_dir: the folder copied into every trial.
        docker: the command line to call.
        network: the container network (``host``: the policy gateway on ``127.0.0.1`` answers
            as on the host).
        cpus / memory_mb: limits per container (the task's ``task.toml``), ``None``: none.
        keep_containers: leave each trial's stopped container for inspection.
        agent_timeout_s: the workflow's deadline when the run sets none (``task.toml``).
        tests_dir: the task's ``tests/`` when it has a ``test.sh`` verifier: it runs in the
            trial's container after the workflow and its reward scores the trial.
        verifier_timeout_s: the verifier's deadline (``task.toml``; default 600 s).
    """

    image: str
    rollout_dir: Path
    docker: DockerCLI = field(default_factory=DockerCLI)
    network: str = "host"
    cpus: float | None = None
    memory_mb: int | None = None
    keep_containers: bool = False
    agent_timeout_s: float | None = None
    tests_dir: Path | None = None
    verifier_timeout_s: float | None = None
    _archive: bytes | None = field(default=None, repr=False)

    def archive(self) -> bytes:
        if self._archive is None:
            self._archive = rollout_archive(self.rollout_dir)
        return self._archive

    def create_args(self, name: str, lifetime_s: float | None = None) -> list[str]:
        """``docker create`` for one trial. Its main process sleeps for ``lifetime_s``, so a
        container orphaned by a killed runner stops by itself (``docker container prune
        --filter label=osmosis.harbor.trial=1`` removes such leftovers)."""
        args = [
            "create",
            "--name",
            name,
            "--label",
            "osmosis.harbor.trial=1",
            "--network",
            self.network,
            "--entrypoint",
            "sleep",
        ]
        if self.cpus is not None:
            args += ["--cpus", f"{self.cpus:g}"]
        if self.memory_mb is not None:
            args += ["--memory", f"{self.memory_mb}m"]
        args += mount_args(host_python_mounts(self.rollout_dir))
        lifetime = "infinity" if lifetime_s is None else str(math.ceil(lifetime_s))
        return [*args, self.image, lifetime]

    def exec_args(self, name: str, rollout_id: str) -> list[str]:
        venv_bin = str(Path(sys.executable).parent)
        args = ["exec", "-i"]
        for name_ in _env_names():
            args += ["-e", name_]
        args += [
            "-e",
            f"PATH={venv_bin}:{_SYSTEM_PATH}",
            "-e",
            f"PYTHONPATH={_CORE_DIR}",
            "-e",
            "PYTHONDONTWRITEBYTECODE=1",
            "-e",
            f"{TRIAL_ENV}={rollout_id}",
        ]
        return [*args, name, sys.executable, "-m", "osmosis_ai.rollout._worker"]


class _ContainerWorker(_Worker):
    """A worker whose process is ``docker exec`` into a trial container it owns."""

    def __init__(self, proc: asyncio.subprocess.Process, container: str, plan: TrialPlan) -> None:
        super().__init__(proc)
        self.container = container
        self.plan = plan
        self.removed = False

    async def kill(self, *, grace_s: float = 0.0) -> int | None:
        code = await super().kill(grace_s=grace_s)
        await self.remove()
        # ``docker exec`` reports a worker killed by signal N as 128 + N.
        if code is not None and 128 < code < 160:
            return -(code - 128)
        return code

    async def remove(self) -> None:
        """Remove the container (stop it when containers are kept); never raises: a trial's
        outcome is already decided, and a leftover is named in the log."""
        if self.removed:
            return
        self.removed = True
        keep = self.plan.keep_containers
        verb = ["kill", self.container] if keep else ["rm", "-f", self.container]
        try:
            done = await asyncio.to_thread(self.plan.docker.run, *verb, timeout=120.0)
            why = "" if done.returncode == 0 else _last_line(done.stderr)
        except ContainerRuntimeError as exc:
            why = str(exc)
        if why and "No such container" not in why and "is not running" not in why:
            logger.warning(
                "could not %s trial container %s (%s); run 'docker rm -f %s'",
                "stop" if keep else "remove",
                self.container,
                why,
                self.container,
            )


class ContainerTrials(ProcessBackend):
    """Runs each workflow in a fresh container (the process backend's worker, one per trial).

    Args:
        entrypoint: the loaded entrypoint (it must have a ``path``).
        endpoint: the policy endpoint the routes come from.
        plan: the image, the rollout folder and the container settings, or a function that
            makes them (called once, in a thread, when the first trial starts: it may build the
            image).
        max_concurrent: the most trials (containers) at once.
        kill_grace_s / start_timeout_s: as for :class:`ProcessBackend`.
    """

    def __init__(
        self,
        entrypoint: Entrypoint,
        endpoint: PolicyEndpoint,
        *,
        plan: TrialPlan | Callable[[], TrialPlan],
        max_concurrent: int = 4,
        kill_grace_s: float = 5.0,
        start_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(
            entrypoint,
            endpoint,
            max_workers=max(1, max_concurrent),
            kill_grace_s=kill_grace_s,
            start_timeout_s=start_timeout_s,
        )
        self._plan: TrialPlan | None = plan if isinstance(plan, TrialPlan) else None
        self._make_plan = None if isinstance(plan, TrialPlan) else plan
        self._plan_lock: asyncio.Lock | None = None
        self._gate: asyncio.Semaphore | None = None

    async def plan(self) -> TrialPlan:
        """The trial plan (made on first use)."""
        if self._plan is None:
            if self._plan_lock is None:
                self._plan_lock = asyncio.Lock()
            async with self._plan_lock:
                if self._plan is None:
                    assert self._make_plan is not None
                    self._plan = await asyncio.to_thread(self._make_plan)
        return self._plan

    async def _launch(self) -> _Worker:
        plan = await self.plan()
        name = f"osmosis-trial-{uuid.uuid4().hex[:12]}"
        created = False
        try:
            archive = await asyncio.to_thread(plan.archive)
            steps: list[tuple[list[str], bytes | None]] = [
                (plan.create_args(name, _TRIAL.get()[1]), None),
                (["cp", "-", f"{name}:/"], archive),
                (["start", name], None),
            ]
            for args, data in steps:
                done = await asyncio.to_thread(
                    plan.docker.run, *args, timeout=self.start_timeout_s, stdin=data
                )
                created = created or args[0] == "create" and done.returncode == 0
                if done.returncode != 0:
                    raise ContainerRuntimeError(
                        f"'docker {args[0]}' for a trial of image {plan.image} failed: "
                        f"{_last_line(done.stderr) or f'exit status {done.returncode}'}"
                    )
            proc = await asyncio.create_subprocess_exec(
                plan.docker.path(),
                *plan.exec_args(name, _TRIAL.get()[0]),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        except BaseException:
            if created:
                await asyncio.to_thread(plan.docker.run, "rm", "-f", name, timeout=60.0)
            raise
        return _ContainerWorker(proc, name, plan)

    async def run_workflow(self, request: WorkflowRequest) -> WorkflowRun:
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.max_workers)
        async with self._gate:
            token = _TRIAL.set((request.rollout_id, None))
            try:
                plan = await self.plan()
                if request.timeout_s is None and plan.agent_timeout_s is not None:
                    request = dataclasses.replace(request, timeout_s=plan.agent_timeout_s)
                _TRIAL.set((request.rollout_id, self._lifetime(plan, request)))
                worker = await self._spawn()
            except (TimeoutError, Exception) as exc:
                return _error_run(
                    ErrorCategory.INTERNAL_ERROR,
                    f"could not start a trial container for rollout {request.rollout_id}: {exc}",
                )
            finally:
                _TRIAL.reset(token)
            try:
                run = await self._run_on(worker, request)
                if plan.tests_dir is not None and run.error is None:
                    await verify_trial(plan, _container_of(worker), run)
                return run
            finally:
                await self._discard(worker)

    def _lifetime(self, plan: TrialPlan, request: WorkflowRequest) -> float | None:
        """How long a trial's container may live: start, workflow, verifier, with slack."""
        if request.timeout_s is None:
            return None
        verifier = (plan.verifier_timeout_s or 600.0) if plan.tests_dir is not None else 0.0
        return self.start_timeout_s + request.timeout_s + self.kill_grace_s + verifier + 300.0

    async def aclose(self) -> None:
        """Stop and remove every trial container still running."""
        for worker in list(self._workers):
            await self._discard(worker)
        self._slots = None


def _container_of(worker: _Worker) -> str:
    assert isinstance(worker, _ContainerWorker)
    return worker.container


def tests_archive(tests_dir: Path) -> bytes:
    """A tar of a task's ``tests/`` that extracts at ``/`` as ``/tests``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(tests_dir), arcname="tests")
    return buffer.getvalue()


def read_reward(json_text: str | None, txt_text: str | None) -> float:
    """The reward a verifier wrote: ``reward.json`` (``{"reward": r}`` or one entry) or
    ``reward.txt`` (a number); raises ``ValueError`` naming what is wrong."""
    if json_text is not None:
        data = json.loads(json_text)
        if isinstance(data, dict) and "reward" in data:
            value = data["reward"]
        elif isinstance(data, dict) and len(data) == 1:
            (value,) = data.values()
        else:
            raise ValueError(
                f"/logs/verifier/reward.json holds {json_text.strip()[:200]!r}; osmosis trains "
                'on one reward: write {"reward": r}'
            )
    elif txt_text is not None:
        value = txt_text.strip()
    else:
        raise ValueError("it wrote neither /logs/verifier/reward.txt nor reward.json")
    if isinstance(value, bool):
        raise ValueError(f"the reward must be a number, got {value!r}")
    try:
        reward = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"the reward must be a number, got {value!r}") from None
    if not math.isfinite(reward):
        raise ValueError(f"the reward must be finite, got {reward}")
    return reward


async def verify_trial(plan: TrialPlan, container: str, run: WorkflowRun) -> None:
    """Run the task's ``tests/test.sh`` in the trial's container; its reward scores the run.

    As Harbor does: ``tests/`` is copied to ``/tests``, the script runs with its output in
    ``/logs/verifier/test-stdout.txt``, and it leaves the reward in ``/logs/verifier/reward.txt``
    or ``reward.json``. A verifier that fails to leave one fails the run (``grader_error``).
    """
    assert plan.tests_dir is not None
    docker = plan.docker
    timeout = plan.verifier_timeout_s or 600.0
    script = (
        "mkdir -p /logs/verifier && "
        "bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1; echo $? > /logs/verifier/exit"
    )
    copied = await asyncio.to_thread(
        docker.run, "cp", "-", f"{container}:/", stdin=tests_archive(plan.tests_dir), timeout=120.0
    )
    ran = await asyncio.to_thread(
        docker.run, "exec", container, "sh", "-c", script, timeout=timeout + 30.0
    )

    async def read(path: str) -> str | None:
        done = await asyncio.to_thread(docker.run, "exec", container, "cat", path, timeout=60.0)
        return done.stdout.decode(errors="replace") if done.returncode == 0 else None

    try:
        if copied.returncode != 0 or ran.returncode != 0:
            failed = copied if copied.returncode != 0 else ran
            raise ValueError(_last_line(failed.stderr) or f"exit status {failed.returncode}")
        reward = read_reward(
            await read("/logs/verifier/reward.json"), await read("/logs/verifier/reward.txt")
        )
    except (ValueError, ContainerRuntimeError) as exc:
        output = (await read("/logs/verifier/test-stdout.txt") or "").strip().splitlines()[-5:]
        status = (await read("/logs/verifier/exit") or "?").strip()
        run.error = SampleError(
            category=ErrorCategory.GRADER_ERROR,
            message=f"the task's verifier (tests/test.sh, exit status {status}) gave no reward: "
            f"{exc}" + (": " + " | ".join(output) if output else ""),
            where="grader",
        )
        return
    if run.messages is not None and DEFAULT_SAMPLE_ID not in run.samples:
        run.samples[DEFAULT_SAMPLE_ID] = RolloutSample(id=DEFAULT_SAMPLE_ID, messages=run.messages)
    for sample in run.samples.values():
        if sample.status is SampleStatus.SUCCESS:
            sample.reward = reward
