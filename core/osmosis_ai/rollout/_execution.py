"""One rollout's steps, shared by the backends and the runner.

``execute_workflow`` runs the workflow inside its :class:`RolloutScope` (in-process, or inside a
worker process); ``join_samples`` joins its result with the policy calls the endpoint recorded;
``grade_samples`` runs the grader. Every failure is recorded on the samples as data.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osmosis_ai.chat import as_message
from osmosis_ai.rollout._discovery import Entrypoint
from osmosis_ai.rollout._grader import GraderContext
from osmosis_ai.rollout._outcome import classify_exception
from osmosis_ai.rollout._types import (
    AgentWorkflowOutput,
    ErrorCategory,
    LLMCall,
    Message,
    RolloutSample,
    SampleError,
    SampleStatus,
)
from osmosis_ai.rollout._workflow import AgentWorkflowContext
from osmosis_ai.rollout.scope import (
    DEFAULT_SAMPLE_ID,
    PolicyEndpoint,
    RolloutScope,
    rollout_scope,
)

__all__ = ["WorkflowRequest", "WorkflowRun", "execute_workflow", "grade_samples", "join_samples"]


@dataclass(slots=True)
class WorkflowRequest:
    """Everything one workflow run needs (plain data, so it can cross a process boundary)."""

    rollout_id: str
    row_index: int
    sample_index: int
    n_samples: int
    prompt: list[Message]
    label: str | None
    metadata: dict[str, Any]
    sampling: dict[str, Any]
    timeout_s: float | None
    artifacts_dir: str | None = None


@dataclass(slots=True)
class WorkflowRun:
    """What a workflow run produced: its returned messages, its adapters' samples, or an error."""

    messages: list[Message] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    samples: dict[str, RolloutSample] = field(default_factory=dict)
    error: SampleError | None = None

    def to_wire(self) -> dict[str, Any]:
        """A picklable dict of plain data (samples as JSON-mode dicts)."""
        return {
            "messages": self.messages,
            "metrics": self.metrics,
            "samples": {k: s.model_dump(mode="json") for k, s in self.samples.items()},
            "error": self.error.model_dump(mode="json") if self.error else None,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> WorkflowRun:
        return cls(
            messages=data["messages"],
            metrics=data["metrics"],
            samples={k: RolloutSample.model_validate(v) for k, v in data["samples"].items()},
            error=SampleError.model_validate(data["error"]) if data["error"] else None,
        )


def _accept(result: Any, workflow_name: str, run: WorkflowRun) -> None:
    if result is None:
        return
    if isinstance(result, AgentWorkflowOutput):
        # Validated again: its metrics dict may have been changed in place after construction.
        result = AgentWorkflowOutput.model_validate(result.model_dump())
        run.messages = result.messages
        run.metrics = dict(result.metrics)
        return
    if isinstance(result, list):
        for i, message in enumerate(result):
            if not isinstance(message, Mapping):
                raise TypeError(
                    f"{workflow_name}.run returned a list whose item {i} is a "
                    f"{type(message).__name__}; messages must be dicts like "
                    "{'role': 'assistant', 'content': '...'}"
                )
        run.messages = [as_message(m) for m in result]
        return
    raise TypeError(
        f"{workflow_name}.run returned a {type(result).__name__}; return a list of message "
        "dicts, an AgentWorkflowOutput, or None (when framework adapters register the samples)"
    )


async def execute_workflow(
    entrypoint: Entrypoint,
    request: WorkflowRequest,
    endpoint: PolicyEndpoint,
    limit: AbstractAsyncContextManager[Any] | None = None,
) -> WorkflowRun:
    """Run one workflow in its rollout scope, with the timeout; never raises (but on cancel)."""
    scope = RolloutScope(
        rollout_id=request.rollout_id,
        endpoint=endpoint,
        label=request.label,
        metadata=request.metadata,
        row_index=request.row_index,
        sample_index=request.sample_index,
        n_samples=request.n_samples,
    )
    run = WorkflowRun()
    name = entrypoint.workflow_cls.__name__
    with rollout_scope(scope):
        try:
            workflow = entrypoint.new_workflow()
            ctx: AgentWorkflowContext[Any] = AgentWorkflowContext(
                prompt=request.prompt,
                metadata=request.metadata,
                scope=scope,
                config=workflow.config,
                rollout_id=request.rollout_id,
                row_index=request.row_index,
                sample_index=request.sample_index,
                n_samples=request.n_samples,
                artifacts_dir=Path(request.artifacts_dir) if request.artifacts_dir else None,
                sampling=dict(request.sampling),
            )
            async with limit or nullcontext():
                async with asyncio.timeout(request.timeout_s):
                    result = await workflow.run(ctx)
            _accept(result, name, run)
        except TimeoutError as exc:
            run.error = _timeout_error(exc, "workflow", request.timeout_s)
        except asyncio.CancelledError:
            if _really_cancelled():
                raise
            run.error = SampleError(
                category=ErrorCategory.CANCELLED,
                message=f"{name}.run raised CancelledError (a task it awaited was cancelled)",
                where="workflow",
            )
        except Exception as exc:
            run.error = classify_exception(exc, "workflow")
        run.samples = await _source_samples(scope, run)
    return run


def _really_cancelled() -> bool:
    """True when this task itself is being cancelled (not just a CancelledError bubbling up)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _timeout_error(exc: TimeoutError, where: str, timeout_s: float | None) -> SampleError:
    text = str(exc)
    what = "workflow" if where == "workflow" else "grader"
    message = (
        f"{what} timed out after {timeout_s:g} s"
        if not text and timeout_s is not None
        else f"TimeoutError: {text}" if text else f"{what} raised TimeoutError"
    )
    return SampleError(category=ErrorCategory.TIMEOUT, message=message, where=where)


async def _source_samples(scope: RolloutScope, run: WorkflowRun) -> dict[str, RolloutSample]:
    samples: dict[str, RolloutSample] = {}
    for sample_id, source in scope.sources.items():
        try:
            built = source.build_sample(sample_id)
            sample = await built if inspect.isawaitable(built) else built
            if not isinstance(sample, RolloutSample):
                raise TypeError(
                    f"the sample source of {sample_id!r} returned a {type(sample).__name__}, "
                    "not a RolloutSample"
                )
        except Exception as exc:
            error = classify_exception(exc, "workflow")
            error.message = f"building sample {sample_id!r} failed: {error.message}"
            sample = RolloutSample(id=sample_id, status=SampleStatus.FAILED, error=error)
        if sample.id != sample_id:
            sample = sample.model_copy(update={"id": sample_id})
        samples[sample_id] = sample
    return samples


def join_samples(
    run: WorkflowRun, calls: dict[str, list[LLMCall]], label: str | None
) -> dict[str, RolloutSample]:
    """Join a workflow run with the recorded policy calls into the rollout's samples.

    Samples from sources (adapters) come first; the returned messages become sample ``main``
    (replacing the messages of an adapter's ``main`` sample); a sample id with calls but no
    sample gets one built from its last call (request messages + response). When the workflow
    failed, every sample is marked failed with its error.
    """
    calls = dict(calls)
    samples: dict[str, RolloutSample] = {}
    for sample_id, sample in run.samples.items():
        recorded = calls.pop(sample_id, [])
        if recorded:
            sample.calls = recorded
        samples[sample_id] = sample
    if run.messages is not None:
        _set_main(samples, run.messages, calls.pop(DEFAULT_SAMPLE_ID, []))
    for sample_id, recorded in calls.items():
        if recorded:
            last = recorded[-1]
            samples[sample_id] = RolloutSample(
                id=sample_id,
                messages=[*last.request_messages, last.response_message],
                calls=recorded,
            )
    if run.metrics:
        targets = [samples[DEFAULT_SAMPLE_ID]] if DEFAULT_SAMPLE_ID in samples else samples.values()
        for sample in targets:
            sample.metrics = {**sample.metrics, **run.metrics}
    for sample in samples.values():
        sample.label = label
        if run.error is not None and sample.status is SampleStatus.SUCCESS:
            _fail(sample, run.error)
    return samples


def _set_main(
    samples: dict[str, RolloutSample], messages: list[Message], calls: list[LLMCall]
) -> None:
    main = samples.get(DEFAULT_SAMPLE_ID)
    if main is None:
        samples[DEFAULT_SAMPLE_ID] = RolloutSample(
            id=DEFAULT_SAMPLE_ID, messages=messages, calls=calls
        )
        return
    main.messages = messages
    if calls:
        main.calls = calls


def _fail(sample: RolloutSample, error: SampleError) -> None:
    sample.reward = None
    sample.status = SampleStatus.FAILED
    sample.error = error.model_copy()


async def grade_samples(
    entrypoint: Entrypoint,
    samples: dict[str, RolloutSample],
    request: WorkflowRequest,
    timeout_s: float | None,
    limit: AbstractAsyncContextManager[Any] | None = None,
) -> None:
    """Grade the successful samples in place.

    A grader that raises or times out fails every sample it was given; a kept sample left
    without a reward fails with ``grader_error``; a removed sample becomes ``skipped``. Without a
    grader, samples keep whatever reward their source gave them (possibly none).
    """
    gradable = {k: s for k, s in samples.items() if s.status is SampleStatus.SUCCESS}
    if not gradable or entrypoint.grader_cls is None:
        return
    error = await _run_grader(entrypoint, gradable, request, timeout_s, limit)
    for sample_id, sample in gradable.items():
        if error is not None:
            _fail(sample, error)
        elif sample.remove_sample:
            sample.status = SampleStatus.SKIPPED
        elif sample.reward is None:
            _fail(sample, SampleError(
                category=ErrorCategory.GRADER_ERROR,
                message=f"grader set no reward for sample {sample_id!r}: call "
                f"ctx.set_sample_reward({sample_id!r}, reward) or ctx.remove_sample({sample_id!r})",
                where="grader",
            ))


async def _run_grader(
    entrypoint: Entrypoint,
    gradable: dict[str, RolloutSample],
    request: WorkflowRequest,
    timeout_s: float | None,
    limit: AbstractAsyncContextManager[Any] | None,
) -> SampleError | None:
    """Run the grader once; its failure as data (``None`` when it finished)."""
    try:
        grader = entrypoint.new_grader()
        assert grader is not None
        ctx: GraderContext[Any] = GraderContext(
            samples=gradable,
            label=request.label,
            metadata=request.metadata,
            prompt=request.prompt,
            config=grader.config,
            artifacts_dir=Path(request.artifacts_dir) if request.artifacts_dir else None,
            rollout_id=request.rollout_id,
            row_index=request.row_index,
            sample_index=request.sample_index,
            n_samples=request.n_samples,
        )
        async with limit or nullcontext():
            async with asyncio.timeout(timeout_s):
                await grader.grade(ctx)
    except TimeoutError as exc:
        return _timeout_error(exc, "grader", timeout_s)
    except asyncio.CancelledError:
        if _really_cancelled():
            raise
        return SampleError(
            category=ErrorCategory.CANCELLED, message="grade raised CancelledError", where="grader"
        )
    except Exception as exc:
        return classify_exception(exc, "grader")
    return None
