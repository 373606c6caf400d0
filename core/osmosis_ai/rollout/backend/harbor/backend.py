"""osmosis-ai 0.3's ``HarborBackend``: every trial (one rollout) runs in a container of its own.

::

    backend = HarborBackend(
        orchestrator=TrialQueue(n_concurrent=8),          # or None / an int: trials at once
        tasks_dir=ROLLOUT_DIR / "multiply_harbor_task",   # environment/Dockerfile, task.toml
        task_mode="template",
        agent=MultiplyWorkflow, workflow_config=multiply_workflow_config,
        grader=MultiplyGrader, grader_config=multiply_grader_config,
        code_dir=ROLLOUT_DIR,
    )

The workflow runs inside the container, on osmosis's own worker (the one the process backend
starts): the rollout folder is copied into each trial's container, this machine's Python
environment is mounted read-only, and the policy gateway is reached over the host network. The
grader runs in osmosis's runner, as for every rollout. The image is built from the task's
``environment/Dockerfile`` with the local Docker daemon (no registry needed when the base image
is on the machine). The upstream ``harbor`` package is not used: it needs Python 3.12 and a
registry; the ``orchestrator`` and ``environment_config`` it builds are read for their settings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from osmosis_ai.rollout._backends import Backend, _error_run
from osmosis_ai.rollout._discovery import Entrypoint
from osmosis_ai.rollout._execution import WorkflowRequest, WorkflowRun
from osmosis_ai.rollout._grader import Grader
from osmosis_ai.rollout._types import ErrorCategory
from osmosis_ai.rollout._workflow import AgentWorkflow
from osmosis_ai.rollout.backend import ResultCallback
from osmosis_ai.rollout.backend.harbor._docker import (
    TRIAL_ENV,
    ContainerRuntimeError,
    ContainerTrials,
    DockerCLI,
    TrialPlan,
    probe_python,
)
from osmosis_ai.rollout.backend.harbor.tasks import HarborTask, TaskMode
from osmosis_ai.rollout.backend.local import LocalBackend
from osmosis_ai.rollout.scope import PolicyEndpoint
from osmosis_ai.rollout.types import ExecutionRequest

__all__ = ["ContainerRuntimeError", "HarborBackend"]

logger = logging.getLogger("osmosis")

_NATIVE_AGENTS = ("terminus-2", "mini-swe-agent", "oracle")
_DEFAULT_TRIALS = 4


def _trials_from(orchestrator: Any) -> int:
    """How many trials at once: harbor's ``TrialQueue(n_concurrent=N)``, an int, or 4."""
    if orchestrator is None:
        return _DEFAULT_TRIALS
    value = orchestrator if isinstance(orchestrator, int) else None
    # harbor's TrialQueue keeps the number it was built with as _n_concurrent.
    for attr in ("n_concurrent", "_n_concurrent", "max_concurrent"):
        if value is None:
            candidate = getattr(orchestrator, attr, None)
            value = candidate if isinstance(candidate, int) else None
    if isinstance(value, bool) or value is None or value < 1:
        raise ValueError(
            f"HarborBackend(orchestrator={orchestrator!r}): pass harbor's TrialQueue(n_concurrent=N), "
            "a positive int (trials at once) or None (4)"
        )
    return value


def _environment_type(config: Any) -> str:
    """``docker`` unless harbor's ``EnvironmentConfig`` names another environment."""
    if config is None:
        return "docker"
    kind = getattr(config, "type", None)
    if kind is None and isinstance(config, dict):
        kind = config.get("type")
    value = getattr(kind, "value", kind)
    return str(value).lower() if value is not None else "docker"


_Agent = type[AgentWorkflow[Any]] | AgentWorkflow[Any] | str


def _refuse_upstream_only(agent: _Agent | None, native_agent_kwargs: Any, bundle: Any) -> _Agent:
    """The workflow agent; refuses (with the reason) what only the upstream harbor runs."""
    if agent is None or (isinstance(agent, str) and ":" not in agent):
        named = f" ({agent!r} is one of Harbor's native agents)" if agent in _NATIVE_AGENTS else ""
        raise ValueError(
            f"HarborBackend(agent={agent!r}){named}: pass your AgentWorkflow (a class, an "
            "instance or 'module:Class'). Harbor's native agents (terminus-2, mini-swe-agent, "
            "oracle) need the upstream harbor package, which osmosis does not use"
        )
    if native_agent_kwargs:
        raise ValueError(
            "HarborBackend(native_agent_kwargs=...) configures Harbor's native agents, which "
            "are not available here; a workflow agent takes workflow_config"
        )
    if bundle is not None:
        raise ValueError(
            f"HarborBackend(bundle={str(bundle)!r}): prebuilt wheels are not used here; each "
            "trial gets a copy of the rollout folder (code_dir). Drop bundle="
        )
    return agent


class HarborBackend(LocalBackend):
    """Runs each rollout's workflow in a fresh container built from a Harbor task folder.

    The constructor is osmosis-ai 0.3's. Arguments that only make sense with the upstream
    ``harbor`` package are accepted when they change nothing here and refused (with the reason)
    when they would.

    Args:
        orchestrator: harbor's ``TrialQueue(n_concurrent=N)`` (only ``n_concurrent`` is read),
            an int, or ``None`` (4 trials at once).
        tasks_dir: the task folder (template mode) or the folder of task folders (dataset mode).
        agent: the ``AgentWorkflow`` (class, instance or ``"module:attr"``). Harbor's native
            agents (``"terminus-2"``, ...) are not available here.
        task_mode: ``"template"`` (the row's prompt, one task) or ``"dataset"`` (the task named
            by ``metadata["harbor_task_id"]``, its ``instruction.md`` as the prompt).
        grader / workflow_config / grader_config: as for :class:`LocalBackend`.
        code_dir: the rollout folder copied into every trial (default: the entrypoint's folder).
        environment_config: harbor's ``EnvironmentConfig``; its ``type`` must be Docker.
        cleanup_successful_trials: remove each trial's container when it ends (``False``: keep
            it, stopped, for ``docker inspect`` / ``docker cp``).
        max_queue_depth: the most rollouts waiting for a trial slot (``None``: no limit).
        docker: the ``docker`` command to call.
        network: the trials' container network (default ``host``, so the policy gateway on
            ``127.0.0.1`` answers inside the container).
        model_name, native_agent_kwargs, bundle, trials_dir, patch_dockerfile_with_sdk,
        agent_setup_timeout_sec: upstream settings for native agents and wheel bundles; see
            the README's Harbor section for what each does here.
    """

    def __init__(
        self,
        *,
        orchestrator: Any = None,
        tasks_dir: str | Path,
        agent: type[AgentWorkflow[Any]] | AgentWorkflow[Any] | str | None = None,
        native_agent_kwargs: dict[str, Any] | None = None,
        task_mode: TaskMode | str = TaskMode.TEMPLATE,
        model_name: str = "openai/osmosis-rollout",
        grader: type[Grader[Any]] | Grader[Any] | str | None = None,
        workflow_config: Any = None,
        grader_config: Any = None,
        code_dir: str | Path | None = None,
        bundle: str | Path | None = None,
        environment_config: Any = None,
        trials_dir: str | Path | None = None,
        cleanup_successful_trials: bool = True,
        patch_dockerfile_with_sdk: bool | None = None,
        agent_setup_timeout_sec: float | None = None,
        max_queue_depth: int | None = None,
        docker: str = "docker",
        network: str = "host",
    ) -> None:
        workflow = _refuse_upstream_only(agent, native_agent_kwargs, bundle)
        try:
            self.task_mode = TaskMode(task_mode)
        except ValueError:
            raise ValueError(
                f"HarborBackend(task_mode={task_mode!r}): use 'template' or 'dataset'"
            ) from None
        kind = _environment_type(environment_config)
        if kind != "docker":
            raise ValueError(
                f"HarborBackend(environment_config=...type={kind!r}): only the local Docker "
                "environment runs here (managed sandboxes are the hosted platform's); use "
                "EnvironmentType.DOCKER or leave environment_config out"
            )
        if max_queue_depth is not None and max_queue_depth < 1:
            raise ValueError("max_queue_depth must be >= 1, or None for unbounded")
        super().__init__(
            workflow=workflow,
            workflow_config=workflow_config,
            grader=grader,
            grader_config=grader_config,
        )
        self.orchestrator = orchestrator
        self.n_concurrent = _trials_from(orchestrator)
        self._max_concurrent = self.n_concurrent
        self.tasks_dir = Path(tasks_dir).resolve()
        self.agent = agent
        self.model_name = model_name
        self.code_dir = Path(code_dir).resolve() if code_dir is not None else None
        self.environment_config = environment_config
        self.trials_dir = Path(trials_dir) if trials_dir is not None else None
        self.cleanup_successful_trials = cleanup_successful_trials
        self.patch_dockerfile_with_sdk = patch_dockerfile_with_sdk
        self.agent_setup_timeout_sec = agent_setup_timeout_sec
        self.max_queue_depth = max_queue_depth
        self.docker = DockerCLI(docker)
        self.network = network
        self._images: dict[Path, str] = {}
        self._pending = 0

    # -- checks --------------------------------------------------------------------------------

    def _task(self, metadata: dict[str, Any] | None = None) -> HarborTask:
        if self.task_mode is TaskMode.TEMPLATE:
            return HarborTask(self.tasks_dir)
        task_id = (metadata or {}).get("harbor_task_id")
        if not task_id:
            raise ValueError(
                "HarborBackend(task_mode='dataset') needs each row's metadata['harbor_task_id'] "
                f"(a folder under {self.tasks_dir})"
            )
        return HarborTask.from_dataset(self.tasks_dir, str(task_id))

    def validate(self) -> None:
        """Check the task folder and that a Docker daemon answers (says what to install)."""
        if os.environ.get(TRIAL_ENV):
            return  # inside a trial's own container: it is already isolated
        if self.task_mode is TaskMode.TEMPLATE:
            HarborTask(self.tasks_dir)
        elif not self.tasks_dir.is_dir():
            raise ValueError(f"HarborBackend(tasks_dir=...): {self.tasks_dir} is not a folder")
        self.docker.check()

    def image_for(self, task: HarborTask) -> str:
        """Build (once) the task's image and return its tag."""
        tag = self._images.get(task.path)
        if tag is None:
            tag = task.image_tag()
            if not self.docker.image_exists(tag):
                logger.info("building the trial image %s from %s", tag, task.dockerfile)
                self.docker.build(task.environment, tag, task.base_images(), timeout=1800.0)
            self._images[task.path] = tag
        return tag

    def _rollout_dir(self, entrypoint: Entrypoint) -> Path:
        if self.code_dir is not None:
            return self.code_dir
        if entrypoint.path is not None:
            return Path(entrypoint.path).resolve().parent
        raise ValueError(
            "HarborBackend needs the rollout folder to copy into each trial: pass code_dir="
        )

    def plan(self, entrypoint: Entrypoint, task: HarborTask | None = None) -> TrialPlan:
        """How this backend starts a trial of ``task`` (default: the template task)."""
        task = task or self._task()
        limits = task.limits()
        return TrialPlan(
            image=self.image_for(task),
            rollout_dir=self._rollout_dir(entrypoint),
            docker=self.docker,
            network=self.network,
            cpus=limits.cpus,
            memory_mb=limits.memory_mb,
            keep_containers=not self.cleanup_successful_trials,
            agent_timeout_s=limits.agent_timeout_s,
            tests_dir=task.verifier.parent if task.verifier.is_file() else None,
            verifier_timeout_s=limits.verifier_timeout_s,
        )

    async def prewarm(self, task_ids: Sequence[str] | None = None) -> None:
        """Build every task image and check that this Python starts in it, before serving.

        Raises:
            ContainerRuntimeError: Docker is missing, an image does not build, or this
                machine's Python cannot run inside it (a C library it lacks).
        """
        await asyncio.to_thread(self.validate)
        if self.task_mode is TaskMode.DATASET:
            if not task_ids:
                raise ValueError("dataset mode prewarm needs the task ids")
            tasks = [HarborTask.from_dataset(self.tasks_dir, t) for t in task_ids]
        else:
            tasks = [HarborTask(self.tasks_dir)]
        for task in tasks:
            tag = await asyncio.to_thread(self.image_for, task)
            await asyncio.to_thread(probe_python, self.docker, tag)

    def prewarm_lifespan(
        self, task_ids: Sequence[str] | None = None
    ) -> Callable[[object], AbstractAsyncContextManager[None]]:
        """An ASGI lifespan that prewarms before the server accepts traffic."""

        @asynccontextmanager
        async def lifespan(app: object) -> AsyncIterator[None]:
            await self.prewarm(task_ids)
            yield

        return lifespan

    # -- what osmosis's runner runs -------------------------------------------------------------

    def verifier_scores(self) -> bool:
        """True when the tasks' own ``tests/test.sh`` scores every trial (then ``grader=`` is
        not used, as in 0.3: a task's verifier wins). In dataset mode: every task has one."""
        if self.task_mode is TaskMode.TEMPLATE:
            return (self.tasks_dir / "tests" / "test.sh").is_file()
        try:
            tasks = [p for p in self.tasks_dir.iterdir() if (p / "environment").is_dir()]
        except OSError:
            return False
        return bool(tasks) and all((p / "tests" / "test.sh").is_file() for p in tasks)

    def entrypoint(self) -> Entrypoint:
        entry = super().entrypoint()
        if entry.grader_cls is not None and self.verifier_scores():
            logger.info("the Harbor task's tests/test.sh scores the trials; grader= is not used")
            return dataclasses.replace(entry, grader_cls=None, grader_config=None)
        return entry

    def runner_backend(self, entrypoint: Entrypoint, endpoint: PolicyEndpoint) -> Backend:
        """A container per trial (dataset mode: per row's task)."""
        if entrypoint.path is None:
            # Served by the user's own server (not found by osmosis's discovery): the worker in
            # the container loads the file that defines the workflow.
            entrypoint = dataclasses.replace(entrypoint, path=_defining_file(entrypoint))
        if self.task_mode is TaskMode.DATASET:
            return _DatasetTrials(self, entrypoint, endpoint)
        return ContainerTrials(
            entrypoint,
            endpoint,
            plan=lambda: self.plan(entrypoint),
            max_concurrent=self.n_concurrent,
        )

    # -- 0.3's backend contract ---------------------------------------------------------------

    @property
    def capture_final_result(self) -> bool:
        return True

    def has_capacity(self) -> bool:
        queued = max(0, self._pending - self._active)
        return self.max_queue_depth is None or queued < self.max_queue_depth

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "backend": "harbor",
            "in_flight": self._pending,
            "running": self._active,
            "max_queue_depth": self.max_queue_depth,
        }

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        """0.3's entry point: the workflow in a trial container, then the grader here (or the
        task's own verifier, in the container, when it has one)."""
        self._pending += 1
        try:
            if not self.verifier_scores():
                await super().execute(request, on_workflow_complete, on_grader_complete)
                return
            async with self._limit():
                self._active += 1
                try:
                    result = await self.run_workflow(request)  # scored by the verifier
                    await on_workflow_complete(result)
                    if on_grader_complete is not None:
                        await on_grader_complete(result)
                finally:
                    self._active -= 1
        finally:
            self._pending -= 1


class _DatasetTrials:
    """Dataset mode: each row's task (``metadata["harbor_task_id"]``) has its own image."""

    def __init__(self, owner: HarborBackend, entrypoint: Entrypoint, endpoint: PolicyEndpoint):
        self.owner = owner
        self.entrypoint = entrypoint
        self.endpoint = endpoint
        self._trials: dict[Path, ContainerTrials] = {}
        self._gate = asyncio.Semaphore(owner.n_concurrent)

    async def run_workflow(self, request: WorkflowRequest) -> WorkflowRun:
        try:
            task = self.owner._task(request.metadata)
            trials = self._trials.get(task.path)
            if trials is None:
                trials = self._trials[task.path] = ContainerTrials(
                    self.entrypoint,
                    self.endpoint,
                    plan=lambda: self.owner.plan(self.entrypoint, task),
                    max_concurrent=self.owner.n_concurrent,
                )
            instruction = task.instruction()
        except Exception as exc:
            return _error_run(ErrorCategory.VALIDATION_ERROR, str(exc))
        if instruction is not None:
            # The task's instruction is the prompt, for the workflow and the grader alike.
            request.prompt = [{"role": "user", "content": instruction}]
        async with self._gate:
            return await trials.run_workflow(request)

    async def aclose(self) -> None:
        for trials in self._trials.values():
            await trials.aclose()


def _defining_file(entrypoint: Entrypoint) -> Path:
    try:
        source = inspect.getsourcefile(entrypoint.workflow_cls)
    except TypeError:
        source = None
    if source is None:
        raise ValueError(
            f"HarborBackend cannot find the file that defines {entrypoint.workflow_cls.__name__} "
            "(the trial's worker loads the workflow from it): define the workflow in a .py file"
        )
    return Path(source).resolve()
