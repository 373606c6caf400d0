"""The rollout runner: dataset rows x n samples -> graded samples, with bounded concurrency.

::

    async with RolloutRunner("rollouts/calc/main.py", endpoint, n_samples=4) as runner:
        async for outcome in runner.run(read_dataset("data/calc.jsonl")):
            print(outcome.row_index, outcome.status, outcome.reward)

Rows are read lazily: at most ``concurrency`` rollouts exist at a time, whatever the dataset size.
Outcomes stream out as they finish (not in row order). A workflow or grader that raises or times
out is recorded on its outcome; it never stops the other rollouts and never becomes reward 0.0.

Cancellation: cancelling the task that iterates ``run()`` (or closing the iterator early)
cancels every in-flight rollout; their outcomes are dropped (not yielded) and the policy calls
recorded for them are collected from the endpoint and discarded.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Mapping
from contextlib import aclosing
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from osmosis_ai.chat import as_message
from osmosis_ai.rollout._backends import Backend, LocalBackend, ProcessBackend, _concurrency_limit
from osmosis_ai.rollout._discovery import Entrypoint, load_entrypoint
from osmosis_ai.rollout._execution import (
    WorkflowRequest,
    _really_cancelled,
    grade_samples,
    join_samples,
)
from osmosis_ai.rollout._outcome import (
    RolloutGroup,
    RolloutOutcome,
    RolloutRow,
    classify_exception,
)
from osmosis_ai.rollout._types import ErrorCategory, RolloutSample, SampleError, SampleStatus
from osmosis_ai.rollout.scope import PolicyEndpoint

__all__ = ["RolloutRunner", "Rows"]

logger = logging.getLogger("osmosis")

Rows = Iterable[RolloutRow] | AsyncIterable[RolloutRow]
"""Dataset rows (:class:`~osmosis_ai.data.DatasetRow` or anything with ``row_index``,
``prompt``, ``label`` and ``metadata``), as a plain or async iterable."""

_COLLECT_ON_CANCEL_S = 5.0


class RolloutRunner:
    """Runs every row ``n_samples`` times through the entrypoint's workflow and grader.

    Args:
        entrypoint: a loaded :class:`Entrypoint`, or the path of an entrypoint file.
        endpoint: the policy endpoint (the gateway, or a test double) that routes and records
            policy calls.
        n_samples: rollouts per row (the GRPO group size).
        concurrency: the most rollouts in flight at once (workflow and grading).
        workflow_timeout_s: seconds one workflow run may take (``None``: no limit).
        grader_timeout_s: seconds one grading may take (``None``: no limit).
        sampling: default chat parameters (``temperature``, ``top_p``, ``max_tokens``) put on
            ``ctx.sampling`` and sent by ``ctx.chat``.
        backend: ``"local"`` (in-process) or ``"process"`` (one worker process per rollout at
            a time, from a pool of ``min(concurrency, max_workers)``), or any object with
            ``async run_workflow(WorkflowRequest) -> WorkflowRun`` and ``async aclose()``.
        artifacts_root: if set, each rollout gets ``<artifacts_root>/<rollout_id>/artifacts``
            as ``ctx.artifacts_dir``.
        max_workers: cap on worker processes for the process backend.
        memory_limit_mb: per-worker address-space cap for the process backend.

    Attributes:
        in_flight: rollouts scheduled and not finished yet.
        peak_in_flight: the most rollouts ever in flight at once.
    """

    def __init__(
        self,
        entrypoint: Entrypoint | str | PathLike[str],
        endpoint: PolicyEndpoint,
        *,
        n_samples: int = 1,
        concurrency: int = 16,
        workflow_timeout_s: float | None = 450,
        grader_timeout_s: float | None = 150,
        sampling: Mapping[str, Any] | None = None,
        backend: Literal["local", "process"] | Backend = "local",
        artifacts_root: str | PathLike[str] | None = None,
        max_workers: int = 8,
        memory_limit_mb: int | None = None,
    ) -> None:
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {n_samples}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if isinstance(backend, str) and backend not in ("local", "process"):
            raise ValueError(f"backend must be 'local' or 'process', got {backend!r}")
        self.entrypoint = (
            entrypoint if isinstance(entrypoint, Entrypoint) else load_entrypoint(entrypoint)
        )
        self.endpoint = endpoint
        self.n_samples = n_samples
        self.concurrency = concurrency
        self.workflow_timeout_s = workflow_timeout_s
        self.grader_timeout_s = grader_timeout_s
        self.sampling = dict(sampling or {})
        self.artifacts_root = Path(artifacts_root) if artifacts_root is not None else None
        self.backend: Backend
        served = self.entrypoint.backend
        if not isinstance(backend, str):
            self.backend = backend
        elif served is not None and (backend == "local" or _places_workflows(served)):
            # An osmosis-ai 0.3 entrypoint serving an ExecutionBackend: the backend says where
            # its workflows run (in this process for LocalBackend, a container for Harbor).
            self.backend = served.runner_backend(self.entrypoint, endpoint)
        elif backend == "process":
            self.backend = ProcessBackend(
                self.entrypoint, endpoint, max_workers=min(concurrency, max_workers),
                memory_limit_mb=memory_limit_mb,
            )
        else:
            self.backend = LocalBackend(self.entrypoint, endpoint)
        self._grader_limit = _concurrency_limit(self.entrypoint.grader_config)
        self.in_flight = 0
        self.peak_in_flight = 0

    async def __aenter__(self) -> RolloutRunner:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the backend (stops worker processes). The runner can be used again."""
        await self.backend.aclose()

    async def run(self, rows: Rows) -> AsyncIterator[RolloutOutcome]:
        """Run every row ``n_samples`` times; yield each outcome as soon as it is done.

        Cancelling the consuming task, or closing the iterator early (``aclosing``), cancels the
        rollouts still in flight; their outcomes are dropped and their recorded calls discarded.
        """
        async with aclosing(self._stream(rows)) as stream:
            async for _, _, outcome in stream:
                yield outcome

    async def run_all(self, rows: Rows) -> list[RolloutOutcome]:
        """Run everything and return the outcomes ordered by (row_index, sample_index)."""
        outcomes = [o async for o in self.run(rows)]
        outcomes.sort(key=lambda o: (o.row_index, o.sample_index))
        return outcomes

    async def run_groups(self, rows: Rows) -> AsyncIterator[RolloutGroup]:
        """Like :meth:`run`, but yield each row's ``n_samples`` outcomes together (a GRPO
        group), sorted by sample index, as soon as the row's last rollout finishes.

        Groups are keyed by the row's position in ``rows``, so repeated rows (or repeated
        ``row_index`` values) form separate groups.
        """
        pending: dict[int, list[RolloutOutcome]] = {}
        async with aclosing(self._stream(rows)) as stream:
            async for seq, row, outcome in stream:
                got = pending.setdefault(seq, [])
                got.append(outcome)
                if len(got) == self.n_samples:
                    del pending[seq]
                    got.sort(key=lambda o: o.sample_index)
                    yield RolloutGroup(row=row, outcomes=got, position=seq)

    async def _stream(self, rows: Rows) -> AsyncGenerator[tuple[int, RolloutRow, RolloutOutcome], None]:
        """Yield ``(row position, row, outcome)`` as rollouts finish, keeping at most
        ``concurrency`` rollouts (and rows read) ahead."""
        items = _work_items(rows, self.n_samples)
        done: asyncio.Queue[asyncio.Task[tuple[int, RolloutRow, RolloutOutcome]]] = asyncio.Queue()
        tasks: set[asyncio.Task[tuple[int, RolloutRow, RolloutOutcome]]] = set()
        exhausted = False

        async def one(seq: int, row: RolloutRow, sample_index: int) -> tuple[int, RolloutRow, RolloutOutcome]:
            return seq, row, await self._rollout(row, sample_index)

        def finished(task: asyncio.Task[tuple[int, RolloutRow, RolloutOutcome]]) -> None:
            self.in_flight -= 1
            done.put_nowait(task)

        async def fill() -> None:
            nonlocal exhausted
            while not exhausted and len(tasks) < self.concurrency:
                try:
                    seq, row, sample_index = await anext(items)
                except StopAsyncIteration:
                    exhausted = True
                    return
                task = asyncio.create_task(one(seq, row, sample_index))
                tasks.add(task)
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                task.add_done_callback(finished)

        try:
            await fill()
            while tasks:
                task = await done.get()
                tasks.discard(task)
                await fill()
                yield task.result()
        finally:
            await _cancel_all(tasks)
            await items.aclose()

    def _request(self, row: RolloutRow, sample_index: int, rollout_id: str) -> WorkflowRequest:
        artifacts: str | None = None
        if self.artifacts_root is not None:
            path = self.artifacts_root / rollout_id / "artifacts"
            try:
                path.mkdir(parents=True, exist_ok=True)
                artifacts = str(path)
            except OSError as exc:
                logger.warning("cannot create artifacts dir %s: %s", path, exc)
        return WorkflowRequest(
            rollout_id=rollout_id,
            row_index=row.row_index,
            sample_index=sample_index,
            n_samples=self.n_samples,
            prompt=[as_message(m) for m in row.prompt],
            label=row.label,
            metadata=dict(row.metadata),
            sampling=self.sampling,
            timeout_s=self.workflow_timeout_s,
            artifacts_dir=artifacts,
        )

    async def _rollout(self, row: RolloutRow, sample_index: int) -> RolloutOutcome:
        started = time.perf_counter()
        rollout_id = f"r{row.row_index}s{sample_index}-{uuid.uuid4().hex[:16]}"
        request = self._request(row, sample_index, rollout_id)
        samples: dict[str, RolloutSample] = {}
        error: SampleError | None = None
        try:
            run = await self.backend.run_workflow(request)
            calls = await self.endpoint.collect(rollout_id)
            samples = join_samples(run, calls, request.label)
            error = run.error
            if error is None and not samples:
                error = SampleError(
                    category=ErrorCategory.VALIDATION_ERROR,
                    message=(
                        f"{self.entrypoint.workflow_cls.__name__}.run produced no samples: it "
                        "returned None, registered no sample source and made no policy call. "
                        "Return the conversation (a list of messages) or use an osmosis adapter"
                    ),
                    where="workflow",
                )
            await grade_samples(
                self.entrypoint, samples, request, self.grader_timeout_s, self._grader_limit
            )
        except asyncio.CancelledError:
            if _really_cancelled():
                await self._discard_calls(rollout_id)
                raise
            error = SampleError(
                category=ErrorCategory.CANCELLED,
                message="the rollout was cancelled from inside (an awaited task was cancelled)",
                where="runner",
            )
        except Exception as exc:  # a bug in the runner, the endpoint or a backend
            logger.exception("rollout %s failed inside the runner", rollout_id)
            error = classify_exception(exc, "runner")
            error.category = ErrorCategory.INTERNAL_ERROR
        return _outcome(row, sample_index, rollout_id, samples, error, started)

    async def _discard_calls(self, rollout_id: str) -> None:
        try:
            async with asyncio.timeout(_COLLECT_ON_CANCEL_S):
                await asyncio.shield(self.endpoint.collect(rollout_id))
        except BaseException:  # best effort while being cancelled
            logger.debug("could not discard the calls of cancelled rollout %s", rollout_id)


def _outcome(
    row: RolloutRow,
    sample_index: int,
    rollout_id: str,
    samples: dict[str, RolloutSample],
    error: SampleError | None,
    started: float,
) -> RolloutOutcome:
    statuses = [s.status for s in samples.values()]
    if error is not None:
        status = SampleStatus.FAILED
    elif SampleStatus.SUCCESS in statuses:
        status = SampleStatus.SUCCESS
    elif statuses and all(s is SampleStatus.SKIPPED for s in statuses):
        status = SampleStatus.SKIPPED
    else:
        status = SampleStatus.FAILED
        error = next((s.error for s in samples.values() if s.error is not None), None)
    return RolloutOutcome(
        rollout_id=rollout_id,
        row_index=row.row_index,
        sample_index=sample_index,
        samples=list(samples.values()),
        status=status,
        error=error,
        duration_ms=(time.perf_counter() - started) * 1000.0,
        label=row.label,
        metadata=dict(row.metadata),
        source_row_index=getattr(row, "source_row_index", None),
    )


async def _aiter(rows: Rows) -> AsyncIterator[RolloutRow]:
    if isinstance(rows, AsyncIterable):
        async for row in rows:
            yield row
    else:
        for row in rows:
            yield row


async def _work_items(rows: Rows, n_samples: int) -> AsyncGenerator[tuple[int, RolloutRow, int], None]:
    seq = 0
    async for row in _aiter(rows):
        for sample_index in range(n_samples):
            yield seq, row, sample_index
        seq += 1


async def _cancel_all(tasks: set[asyncio.Task[Any]]) -> None:
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()


def _places_workflows(served: Any) -> bool:
    """True when a served backend runs workflows somewhere of its own (not in-process)."""
    from osmosis_ai.rollout.backend import ExecutionBackend

    method = getattr(type(served), "runner_backend", None)
    return method is not None and method is not ExecutionBackend.runner_backend
