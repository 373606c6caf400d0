"""osmosis-ai 0.3's ``LocalBackend``: the workflow runs in the server's own process.

::

    backend = LocalBackend(
        workflow=MultiplyWorkflow, workflow_config=multiply_workflow_config,
        grader=MultiplyGrader, grader_config=multiply_grader_config,
    )

Each argument may be a class (a config: an instance), an instance (its class and config are
used) or a ``"module:attr"`` string. The backend runs rollouts on osmosis's own rollout steps
(the same workflow scope, timeouts, sample building and grading as ``osmosis eval run`` and
training), so a 0.3 entrypoint and a seeds-style entrypoint behave the same.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from osmosis_ai.chat import as_message
from osmosis_ai.rollout._discovery import Entrypoint
from osmosis_ai.rollout._execution import (
    WorkflowRequest,
    grade_samples,
    join_samples,
)
from osmosis_ai.rollout._grader import Grader
from osmosis_ai.rollout._types import ErrorCategory, LLMCall, SampleStatus
from osmosis_ai.rollout._workflow import AgentWorkflow
from osmosis_ai.rollout.backend import ExecutionBackend, ResultCallback
from osmosis_ai.rollout.context import get_rollout_context
from osmosis_ai.rollout.scope import PolicyRoute
from osmosis_ai.rollout.types import ExecutionRequest, ExecutionResult, RolloutStatus

__all__ = ["LocalBackend"]

_DEFAULT_CONCURRENCY = 4
"""0.3's limit when no workflow config is given (with a config: its ``max_concurrent``)."""


def resolve_object(value: Any, what: str) -> Any:
    """``"package.module:attr"`` -> the object; anything else as given."""
    if not isinstance(value, str):
        return value
    module_name, sep, attr = value.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"LocalBackend({what}={value!r}): a string must be 'module:attribute' "
            "(e.g. 'my_rollout.workflow:MyWorkflow')"
        )
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(
                f"LocalBackend({what}={value!r}): module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj


def _class_of(value: Any, base: type, what: str) -> tuple[type[Any] | None, Any]:
    """(class, config carried by an instance) for a class, an instance or a string."""
    obj = resolve_object(value, what)
    if obj is None:
        return None, None
    if inspect.isclass(obj) and issubclass(obj, base):
        cls: type[Any] = obj
        config = None
    elif isinstance(obj, base):
        cls, config = type(obj), getattr(obj, "config", None)
    else:
        raise TypeError(
            f"LocalBackend({what}=...) got {obj!r}; it takes a {base.__name__} subclass, an "
            f"instance of one, or a 'module:attribute' string naming one"
        )
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise TypeError(f"LocalBackend({what}={cls.__name__}): the class is abstract ({missing})")
    return cls, config


class _FixedEndpoint:
    """The policy endpoint of a rollout an 0.3 server runs: the URL its controller sent."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.base_url = base_url
        self.api_key = api_key or "osmosis"

    def route(self, rollout_id: str, sample_id: str) -> PolicyRoute:
        return PolicyRoute(base_url=self.base_url, api_key=self.api_key)

    async def collect(self, rollout_id: str) -> dict[str, list[LLMCall]]:
        return {}


class LocalBackend(ExecutionBackend):
    """Runs each rollout's workflow and grader in this process (osmosis-ai 0.3's constructor).

    Args:
        workflow: the ``AgentWorkflow`` (class, instance or ``"module:attr"``).
        workflow_config: its config (``"module:attr"`` accepted); deep-copied per rollout.
        grader: the ``Grader``, if any.
        grader_config: its config.

    Without a workflow config at most 4 rollouts run at once here; with one, its
    ``concurrency.max_concurrent`` (``None``: no limit).
    """

    def __init__(
        self,
        *,
        workflow: type[AgentWorkflow[Any]] | AgentWorkflow[Any] | str,
        workflow_config: Any = None,
        grader: type[Grader[Any]] | Grader[Any] | str | None = None,
        grader_config: Any = None,
    ) -> None:
        workflow_cls, carried = _class_of(workflow, AgentWorkflow, "workflow")
        if workflow_cls is None:
            raise TypeError("LocalBackend(workflow=...) is required")
        grader_cls, grader_carried = _class_of(grader, Grader, "grader")
        self.workflow_cls: type[AgentWorkflow[Any]] = workflow_cls
        self.workflow_config: Any = resolve_object(workflow_config, "workflow_config") or carried
        self.grader_cls: type[Grader[Any]] | None = grader_cls
        self.grader_config: Any = resolve_object(grader_config, "grader_config") or grader_carried
        if self.workflow_config is None:
            limit: int | None = _DEFAULT_CONCURRENCY
        else:
            limit = getattr(
                getattr(self.workflow_config, "concurrency", None), "max_concurrent", None
            )
        self._max_concurrent = limit
        self._semaphore: asyncio.Semaphore | None = None
        self._active = 0
        self._entrypoint: Entrypoint | None = None
        self.source_path: Path | None = None
        super().__init__()

    # -- what osmosis's runner runs ---------------------------------------------------------

    def entrypoint(self) -> Entrypoint:
        if self._entrypoint is None:
            self._entrypoint = Entrypoint(
                workflow_cls=self.workflow_cls,
                grader_cls=self.grader_cls,
                workflow_config=self.workflow_config,
                grader_config=self.grader_config,
                path=self.source_path,
                backend=self,
            )
        return self._entrypoint

    # -- 0.3's backend contract ---------------------------------------------------------------

    @property
    def max_concurrency(self) -> int:
        return self._max_concurrent or 0

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "concurrency": {"max_concurrent": self._max_concurrent, "active": self._active},
        }

    def _limit(self) -> asyncio.Semaphore | nullcontext[None]:
        if self._max_concurrent is None:
            return nullcontext()
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._max_concurrent)
        return self._semaphore

    async def execute(
        self,
        request: ExecutionRequest,
        on_workflow_complete: ResultCallback,
        on_grader_complete: ResultCallback | None = None,
    ) -> None:
        async with self._limit():
            self._active += 1
            try:
                result = await self.run_workflow(request)
                await on_workflow_complete(result)
                if on_grader_complete is None:
                    return
                if result.status is not RolloutStatus.SUCCESS:
                    await on_grader_complete(result)
                elif self.grader_cls is None:
                    await on_grader_complete(
                        ExecutionResult(
                            status=RolloutStatus.FAILURE,
                            sample=result.sample,
                            err_message="grading was asked for but this LocalBackend has no grader: "
                            "pass grader=... (and grader_config=...)",
                            err_category=ErrorCategory.VALIDATION_ERROR,
                        )
                    )
                else:
                    await on_grader_complete(await self.run_grader(request, result))
            finally:
                self._active -= 1

    async def run_workflow(self, request: ExecutionRequest) -> ExecutionResult:
        """Run the workflow for one request; its one sample, or the failure."""
        ambient = get_rollout_context()
        endpoint = _FixedEndpoint(
            ambient.chat_completions_url if ambient else "", ambient.api_key if ambient else None
        )
        work = _work(request)
        # Where the workflow runs is runner_backend's choice (in-process here; a container per
        # trial for HarborBackend): the same place osmosis's runner would run it.
        placement = self.runner_backend(self.entrypoint(), endpoint)
        try:
            run = await placement.run_workflow(work)
        finally:
            await placement.aclose()
        samples = join_samples(run, {}, request.label)
        if not samples and ambient is not None and ambient.sample_source is not None:
            sample = await ambient.get_sample()
            samples = {sample.id: sample} if sample is not None else {}
        if run.error is not None:
            return ExecutionResult(
                status=RolloutStatus.FAILURE,
                err_message=run.error.message,
                err_category=run.error.category,
            )
        if len(samples) > 1:
            return ExecutionResult(
                status=RolloutStatus.FAILURE,
                err_message=f"the workflow produced {len(samples)} samples "
                f"({', '.join(sorted(samples))}); an osmosis-ai 0.3 rollout server sends one. "
                "Run it with 'osmosis eval run' / 'osmosis train submit' to keep several",
                err_category=ErrorCategory.VALIDATION_ERROR,
            )
        sample = next(iter(samples.values()), None)
        return ExecutionResult(status=RolloutStatus.SUCCESS, sample=sample)

    async def run_grader(
        self, request: ExecutionRequest, result: ExecutionResult
    ) -> ExecutionResult:
        """Grade a successful workflow result; the sample with its reward, or the failure."""
        if self.grader_cls is None or result.sample is None:
            return result
        sample = result.sample.model_copy(deep=True)
        sample.label = request.label
        await grade_samples(
            self.entrypoint(), {sample.id: sample}, _work(request), request.grader_timeout_sec
        )
        if sample.status is SampleStatus.FAILED and sample.error is not None:
            return ExecutionResult(
                status=RolloutStatus.FAILURE,
                sample=sample,
                err_message=sample.error.message,
                err_category=sample.error.category,
            )
        return ExecutionResult(status=RolloutStatus.SUCCESS, sample=sample)


def _work(request: ExecutionRequest) -> WorkflowRequest:
    return WorkflowRequest(
        rollout_id=request.id,
        row_index=0,
        sample_index=0,
        n_samples=1,
        prompt=[as_message(m) for m in request.prompt],
        label=request.label,
        metadata=dict(request.metadata or {}),
        sampling={},
        timeout_s=request.agent_timeout_sec,
    )
