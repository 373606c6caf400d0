"""Admission and lifecycle of remote rollouts, independent of the HTTP framework.

One record per rollout id (and per ``idempotency_key`` when one is given; keys and ids are
looked up separately): a duplicate init (same body) awaits the first one's answer and never
starts a second run; a conflicting one (same id or key, another body or id) is answered 409.
Admitted rollouts wait for one of ``max_concurrent_rollouts`` slots; more than
``max_pending_rollouts`` unfinished rollouts are refused with 429. Each rollout ends with
exactly one completion callback attempt series, and its result stays readable
(``GET /v1/rollout/{id}``) for ``record_ttl_seconds``.

The pieces live by concern: :mod:`._admission` (refusals, callback hosts), :mod:`._records`
(the memory of rollouts), :mod:`._slots` (run slots, shutdown grace); this module runs a
rollout from its init to its callback.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from osmosis_ai.chat import Message
from osmosis_ai.remote._admission import SHUTTING_DOWN, AdmissionError, check_callback_host
from osmosis_ai.remote._client import CallbackDeliveryError, ClusterClient
from osmosis_ai.remote._execute import execute_rollout, to_response
from osmosis_ai.remote._loop import RolloutAgentLoop, resolve_tools
from osmosis_ai.remote._protocol import (
    InitResponse,
    RolloutRecordView,
    RolloutRequest,
    RolloutResult,
    RolloutStatus,
    redact_url,
)
from osmosis_ai.remote._records import RecordStore, RolloutRecord, fingerprint
from osmosis_ai.remote._settings import ServerSettings
from osmosis_ai.remote._slots import Slots
from osmosis_ai.remote._trace import TraceWriter

__all__ = ["RolloutRegistry"]

logger = logging.getLogger("osmosis")


class RolloutRegistry:
    """Admits, runs, reports and remembers the rollouts of one agent loop."""

    def __init__(
        self,
        agent_loop: RolloutAgentLoop,
        *,
        settings: ServerSettings | None = None,
        client: ClusterClient | None = None,
        traces: TraceWriter | None = None,
    ) -> None:
        self.agent_loop = agent_loop
        self.settings = settings or ServerSettings.from_env()
        self.client = client or ClusterClient()
        self.traces = traces
        self.records = RecordStore(self.settings)
        self._background: set[asyncio.Task[Any]] = set()
        self._slots: Slots | None = None
        self._pruner: asyncio.Task[None] | None = None
        self.pending = 0
        self.running = 0
        self.counts = {"completed": 0, "errored": 0, "delivered": 0, "delivery_failed": 0}

    # -- lifecycle ---------------------------------------------------------------------------

    def _started(self) -> Slots:
        """The slots (made on first use, inside the server's event loop) and the pruner."""
        if self._slots is None:
            self._slots = Slots(self.settings.max_concurrent_rollouts)
        if self._pruner is None:
            self._pruner = asyncio.create_task(self._prune_forever())
        return self._slots

    @property
    def closing(self) -> bool:
        return self._slots is not None and self._slots.closing.is_set()

    @property
    def finished_bytes(self) -> int:
        """Bytes the results of the remembered finished rollouts take (as JSON)."""
        return self.records.finished_bytes

    async def shutdown(self, *, hurry: bool = False) -> None:
        """Stop admitting; let running loops finish within the grace period, then report the
        rest as ERROR ``"server shutting down"`` (queued ones are never started).

        ``hurry`` (a second Ctrl-C): no grace period, and reports get a few seconds at most.
        """
        slots = self._started()
        slots.closing.set()
        if hurry:
            slots.hurried.set()
        drives = [r.drive_task for r in self.records if r.drive_task and not r.drive_task.done()]
        if drives:
            await self._wind_down(slots, drives)
        for task in list(self._background):
            task.cancel()
        if self._pruner is not None:
            self._pruner.cancel()
            await asyncio.gather(self._pruner, return_exceptions=True)
        await self.client.aclose()

    async def _wind_down(self, slots: Slots, drives: list[asyncio.Task[None]]) -> None:
        """Grace period for ``drives``, then cancel the loops still running and give their
        error reports a bounded time to be delivered."""
        grace = self.settings.shutdown_grace_seconds
        if not slots.hurried.is_set():
            logger.warning(
                "shutting down: %d rollout(s) in flight get up to %g s to finish "
                "(press Ctrl-C again to report them as stopped now)", len(drives), grace,
            )
        pending = await slots.grace(drives, grace)
        hurry = slots.hurried.is_set()
        for rec in self.records:
            if rec.run_task is not None and not rec.run_task.done():
                rec.run_task.cancel()
        if pending:
            s = self.client.settings
            budget = s.completion_timeout_seconds * (s.completion_retries + 1) + 1.0
            _, stuck = await asyncio.wait(pending, timeout=min(budget, 5.0 if hurry else 60.0))
            for task in stuck:
                task.cancel()
            if stuck:
                await asyncio.wait(stuck, timeout=5.0)

    def hurry(self) -> None:
        """End a shutdown's grace period now (a second Ctrl-C): report what still runs."""
        if self._slots is not None:
            self._slots.hurried.set()

    async def _prune_forever(self) -> None:
        every = min(60.0, self.settings.record_ttl_seconds / 2)
        while True:
            await asyncio.sleep(every)
            self.prune()

    def prune(self, now: float | None = None) -> int:
        """Forget finished rollouts older than ``record_ttl_seconds``; returns how many."""
        return self.records.prune(now)

    async def finished(self, rollout_id: str) -> RolloutRecordView | None:
        """Wait until ``rollout_id`` reached a terminal state; its view (``None`` if unknown)."""
        rec = self.records.get(rollout_id)
        if rec is None:
            return None
        await rec.done.wait()
        return self.view(rollout_id)

    # -- admission ---------------------------------------------------------------------------

    async def admit(self, request: RolloutRequest, peer: str | None = None) -> InitResponse:
        """Admit ``request`` (or find the same rollout) and return its init answer.

        ``peer`` is the address the init came from: it may always be named as ``server_url``.

        Raises:
            AdmissionError: 503 while shutting down, 429 when full, 422 when ``get_tools`` fails,
                409 for a conflicting duplicate, 403 for a callback host not allowed.
        """
        self._started()
        print_ = fingerprint(request)
        rec = self.records.find(request, print_)
        if rec is None:
            check_callback_host(request, peer, self.settings.allowed_callback_hosts)
            if self.closing:
                raise AdmissionError(503, SHUTTING_DOWN, self.settings.retry_after_seconds)
            if self.pending >= self.settings.max_pending_rollouts:
                raise AdmissionError(
                    429,
                    f"server is at its limit of {self.settings.max_pending_rollouts} unfinished "
                    "rollouts; retry later",
                    self.settings.retry_after_seconds,
                )
            rec = self._new_record(request, print_)
        return await asyncio.shield(rec.init)

    def _new_record(self, request: RolloutRequest, print_: str) -> RolloutRecord:
        future: asyncio.Future[InitResponse] = asyncio.get_running_loop().create_future()
        # A waiter may go away (client disconnect); mark errors as seen so none is logged twice.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        rec = RolloutRecord(
            key=request.idempotency_key, request=request, init=future, fingerprint=print_
        )
        self.records.add(rec)
        self.pending += 1
        # Resolve in a task of its own: a disconnecting first caller must not strand duplicates.
        self._spawn(self._resolve_init(rec))
        return rec

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _refuse(self, rec: RolloutRecord, error: AdmissionError) -> None:
        """Answer ``rec``'s init with ``error`` and forget it (it never ran)."""
        self.records.forget(rec)
        self.pending -= 1
        rec.done.set()
        rec.init.set_exception(error)

    async def _resolve_init(self, rec: RolloutRecord) -> None:
        try:
            await self._answer_init(rec)
        finally:
            if not rec.init.done():  # cancelled at shutdown or a bug: refuse, never strand
                self._refuse(rec, AdmissionError(503, SHUTTING_DOWN, self.settings.retry_after_seconds))

    async def _answer_init(self, rec: RolloutRecord) -> None:
        try:
            rec.tools = await resolve_tools(self.agent_loop, rec.request)
        except Exception as exc:  # the user's get_tools failed: refuse this init, forget it
            logger.warning("get_tools failed for rollout %s: %s", rec.rollout_id, exc)
            self._refuse(rec, AdmissionError(422, f"get_tools() raised {type(exc).__name__}: {exc}"))
            return
        # From here on the rollout has its 202: the drive task owns it to a terminal state.
        rec.drive_task = asyncio.create_task(self._drive(rec))
        rec.init.set_result(InitResponse(rollout_id=rec.rollout_id, tools=rec.tools))

    # -- running -----------------------------------------------------------------------------

    async def _run(self, rec: RolloutRecord) -> RolloutResult:
        slots = self._started()
        if not await slots.acquire():
            return _shutdown_result([])
        rec.state = "running"
        rec.runs += 1
        self.running += 1
        req = rec.request

        async def chat(messages: list[Message], params: dict[str, Any]) -> Any:
            return await self.client.chat(req.server_url, req.api_key, req.rollout_id, messages, params)

        events = self.traces.sink(req.rollout_id) if self.traces else None
        rec.run_task = asyncio.create_task(
            execute_rollout(
                self.agent_loop, req, rec.tools, chat,
                timeout_s=self.settings.request_timeout_seconds, events=events,
            )
        )
        try:
            return await rec.run_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return _shutdown_result(list(req.messages))
        finally:
            self.running -= 1
            slots.release()

    async def _drive(self, rec: RolloutRecord) -> None:
        """Run ``rec`` and report its result: every admitted rollout ends here, in a terminal
        state, whatever fails on the way."""
        try:
            self._trace(rec, "init", {"request": _traced_request(rec.request)})
            try:
                result = await self._run(rec)
            except Exception as exc:  # a bug of ours: still a result, never a stuck record
                logger.exception("rollout %s failed inside the server", rec.rollout_id)
                result = _internal_error_result(exc)
            rec.response = to_response(rec.rollout_id, result)
            self.counts["completed" if result.status is RolloutStatus.COMPLETED else "errored"] += 1
            rec.state = "delivering"
            self._trace(rec, "result", rec.response.model_dump(mode="json"))
            await self._deliver(rec)
            self._trace(rec, "callback", {"state": rec.state, "error": rec.delivery_error})
        except asyncio.CancelledError:
            rec.state = "delivery_failed"
            rec.delivery_error = rec.delivery_error or "cancelled at shutdown"
            self.counts["delivery_failed"] += 1
            raise
        finally:
            rec.finished_at = time.monotonic()
            self.pending -= 1
            # Records live for record_ttl_seconds: keep the result, drop the prompt.
            rec.request = rec.request.model_copy(update={"messages": [], "metadata": {}})
            self.records.remember_finished(rec)
            rec.done.set()

    async def _deliver(self, rec: RolloutRecord) -> None:
        """Post the completion callback; a failure is the record's state, never raised."""
        assert rec.response is not None
        try:
            await self.client.complete(rec.request.server_url, rec.request.api_key, rec.response)
        except CallbackDeliveryError as exc:
            rec.state, rec.delivery_error = "delivery_failed", str(exc)
            self.counts["delivery_failed"] += 1
            logger.warning("rollout %s: %s", rec.rollout_id, exc)
        except Exception as exc:  # e.g. a body or header that cannot be encoded
            rec.state = "delivery_failed"
            rec.delivery_error = f"completion callback could not be sent: {type(exc).__name__}"
            self.counts["delivery_failed"] += 1
            logger.warning("rollout %s: %s: %s", rec.rollout_id, rec.delivery_error, exc)
        else:
            rec.state = "delivered"
            self.counts["delivered"] += 1

    def _trace(self, rec: RolloutRecord, event: str, data: dict[str, Any]) -> None:
        if self.traces is None:
            return
        try:
            self.traces.write(rec.rollout_id, event, data)
        except Exception as exc:  # a trace is a debugging aid: never fail the rollout for it
            logger.warning("could not trace rollout %s: %s", rec.rollout_id, exc)

    # -- queries -----------------------------------------------------------------------------

    def view(self, rollout_id: str) -> RolloutRecordView | None:
        """State and (once known) result of a rollout, or ``None`` if unknown or forgotten."""
        rec = self.records.get(rollout_id)
        if rec is None or not rec.init.done() or rec.init.exception() is not None:
            return None
        return RolloutRecordView(
            rollout_id=rec.rollout_id, state=rec.state, result=rec.response,
            delivery_error=rec.delivery_error,
        )

    def runs_of(self, rollout_id: str) -> int:
        """How many times the loop ran for ``rollout_id`` (0 or 1; tests check it)."""
        rec = self.records.get(rollout_id)
        return rec.runs if rec else 0

    def health(self) -> dict[str, Any]:
        return {
            "status": "shutting_down" if self.closing else "healthy",
            "agent_loop": self.agent_loop.name,
            "active_rollouts": self.running,
            "pending_rollouts": self.pending,
            "completed_rollouts": self.counts["completed"],
            "errored_rollouts": self.counts["errored"],
            "delivery_failed": self.counts["delivery_failed"],
        }


def _traced_request(req: RolloutRequest) -> dict[str, Any]:
    """The init as traced: no API key, callback URLs without credentials."""
    dump = req.model_dump(mode="json", exclude={"api_key"})
    dump["server_url"] = redact_url(req.server_url)
    if req.tool_server_url:
        dump["tool_server_url"] = redact_url(req.tool_server_url)
    return dump


def _internal_error_result(exc: BaseException) -> RolloutResult:
    return RolloutResult(
        status=RolloutStatus.ERROR, final_messages=[], finish_reason="error",
        error_message=f"rollout server error: {type(exc).__name__}",
    )


def _shutdown_result(messages: list[Message]) -> RolloutResult:
    return RolloutResult(
        status=RolloutStatus.ERROR, final_messages=messages, finish_reason="error",
        error_message=SHUTTING_DOWN,
    )
