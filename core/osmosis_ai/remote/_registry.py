"""Admission and lifecycle of remote rollouts, independent of the HTTP framework.

One record per rollout id (and per ``idempotency_key`` when one is given; keys and ids are
looked up separately): a duplicate init (same body) awaits the first one's answer and never
starts a second run; a conflicting one (same id or key, another body or id) is answered 409. Admitted rollouts
wait for one of ``max_concurrent_rollouts`` slots; more than ``max_pending_rollouts`` unfinished
rollouts are refused with 429. Each rollout ends with exactly one completion callback attempt
series, and its result stays readable (``GET /v1/rollout/{id}``) for ``record_ttl_seconds``.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from osmosis_ai.chat import Message
from osmosis_ai.remote._client import CallbackDeliveryError, ClusterClient
from osmosis_ai.remote._execute import execute_rollout, to_response
from osmosis_ai.remote._loop import RolloutAgentLoop, resolve_tools
from osmosis_ai.remote._protocol import (
    InitResponse,
    RolloutRecordView,
    RolloutRequest,
    RolloutResponse,
    RolloutResult,
    RolloutState,
    RolloutStatus,
    redact_url,
)
from osmosis_ai.remote._settings import ServerSettings
from osmosis_ai.remote._trace import TraceWriter

__all__ = ["AdmissionError", "RolloutRegistry"]

logger = logging.getLogger("osmosis")

SHUTTING_DOWN = "server shutting down"


class AdmissionError(Exception):
    """An init that is refused: carries the HTTP status, a message and an optional Retry-After."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        self.status = status
        self.message = message
        self.retry_after = retry_after
        super().__init__(message)


@dataclass(eq=False)
class _Record:
    key: str | None
    request: RolloutRequest
    init: asyncio.Future[InitResponse]
    fingerprint: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    size: int = 0
    state: RolloutState = "queued"
    tools: list[dict[str, Any]] = field(default_factory=list)
    response: RolloutResponse | None = None
    delivery_error: str | None = None
    run_task: asyncio.Task[RolloutResult] | None = None
    drive_task: asyncio.Task[None] | None = None
    finished_at: float | None = None
    runs: int = 0

    @property
    def rollout_id(self) -> str:
        return self.request.rollout_id


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
        self._by_key: dict[str, _Record] = {}
        self._by_rid: dict[str, _Record] = {}
        self._finished: OrderedDict[_Record, int] = OrderedDict()
        """Finished records, oldest first, with the bytes their result takes (as JSON)."""
        self.finished_bytes = 0
        self._background: set[asyncio.Task[Any]] = set()
        self._sem: asyncio.Semaphore | None = None
        self._closing: asyncio.Event | None = None
        self._hurry: asyncio.Event | None = None
        self._pruner: asyncio.Task[None] | None = None
        self.pending = 0
        self.running = 0
        self.counts = {"completed": 0, "errored": 0, "delivered": 0, "delivery_failed": 0}

    # -- lifecycle ---------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.settings.max_concurrent_rollouts)
            self._closing = asyncio.Event()
            self._hurry = asyncio.Event()
        if self._pruner is None:
            self._pruner = asyncio.create_task(self._prune_forever())

    @property
    def closing(self) -> bool:
        return self._closing is not None and self._closing.is_set()

    async def shutdown(self, *, hurry: bool = False) -> None:
        """Stop admitting; let running loops finish within the grace period, then report the
        rest as ERROR ``"server shutting down"`` (queued ones are never started).

        ``hurry`` (a second Ctrl-C): no grace period, and reports get a few seconds at most.
        """
        self._ensure_started()
        assert self._closing is not None and self._hurry is not None
        self._closing.set()
        if hurry:
            self._hurry.set()
        drives = [r.drive_task for r in self._by_rid.values() if r.drive_task and not r.drive_task.done()]
        if drives:
            grace = self.settings.shutdown_grace_seconds
            if not self._hurry.is_set():
                logger.warning(
                    "shutting down: %d rollout(s) in flight get up to %g s to finish "
                    "(press Ctrl-C again to report them as stopped now)", len(drives), grace,
                )
            pending = await self._grace(drives, grace)
            hurry = self._hurry.is_set()
            for rec in list(self._by_rid.values()):
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
        for task in list(self._background):
            task.cancel()
        if self._pruner is not None:
            self._pruner.cancel()
            await asyncio.gather(self._pruner, return_exceptions=True)
        await self.client.aclose()

    def hurry(self) -> None:
        """End a shutdown's grace period now (a second Ctrl-C): report what still runs."""
        if self._hurry is not None:
            self._hurry.set()

    async def _grace(self, drives: list[asyncio.Task[None]], grace: float) -> set[asyncio.Task[None]]:
        """Wait up to ``grace`` seconds (or until :meth:`hurry`) for ``drives``; the rest."""
        assert self._hurry is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        pending = set(drives)
        hurry = asyncio.ensure_future(self._hurry.wait())
        try:
            while pending and not self._hurry.is_set() and (left := deadline - loop.time()) > 0:
                done, _ = await asyncio.wait(
                    {*pending, hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending -= done
        finally:
            hurry.cancel()
        return pending

    async def _prune_forever(self) -> None:
        every = min(60.0, self.settings.record_ttl_seconds / 2)
        while True:
            await asyncio.sleep(every)
            self.prune()

    def prune(self, now: float | None = None) -> int:
        """Forget finished rollouts older than ``record_ttl_seconds``; returns how many."""
        now = time.monotonic() if now is None else now
        ttl = self.settings.record_ttl_seconds
        old = [r for r in self._finished if r.finished_at is not None and now - r.finished_at > ttl]
        for rec in old:
            self._forget(rec)
        return len(old)

    def _forget(self, rec: _Record) -> None:
        if rec.key is not None and self._by_key.get(rec.key) is rec:
            del self._by_key[rec.key]
        if self._by_rid.get(rec.rollout_id) is rec:
            del self._by_rid[rec.rollout_id]
        self.finished_bytes -= self._finished.pop(rec, 0)

    def _remember_finished(self, rec: _Record) -> None:
        """Keep ``rec`` readable, forgetting the oldest finished records beyond the count and
        byte bounds (the newest one always stays)."""
        try:
            size = len(rec.response.model_dump_json()) if rec.response is not None else 0
        except Exception:  # unserializable results were already turned into errors
            size = 0
        self._finished[rec] = size
        self.finished_bytes += size
        s = self.settings
        while len(self._finished) > 1 and (
            len(self._finished) > s.max_finished_records or self.finished_bytes > s.max_finished_bytes
        ):
            self._forget(next(iter(self._finished)))

    async def finished(self, rollout_id: str) -> RolloutRecordView | None:
        """Wait until ``rollout_id`` reached a terminal state; its view (``None`` if unknown)."""
        rec = self._by_rid.get(rollout_id)
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
        self._ensure_started()
        fingerprint = _fingerprint(request)
        rec = self._find(request, fingerprint)
        if rec is None:
            self._check_callback_host(request, peer)
            if self.closing:
                raise AdmissionError(503, SHUTTING_DOWN, self.settings.retry_after_seconds)
            if self.pending >= self.settings.max_pending_rollouts:
                raise AdmissionError(
                    429,
                    f"server is at its limit of {self.settings.max_pending_rollouts} unfinished "
                    "rollouts; retry later",
                    self.settings.retry_after_seconds,
                )
            rec = self._new_record(request, fingerprint)
        return await asyncio.shield(rec.init)

    def _find(self, request: RolloutRequest, fingerprint: str) -> _Record | None:
        """The record this init duplicates, or None; AdmissionError 409 when it conflicts."""
        key = request.idempotency_key
        by_key = self._by_key.get(key) if key is not None else None
        by_rid = self._by_rid.get(request.rollout_id)
        if by_key is not None and by_key.rollout_id != request.rollout_id:
            raise AdmissionError(
                409, f"idempotency_key {key!r} was already used for rollout "
                f"{by_key.rollout_id!r}; use a new key for a new rollout",
            )
        rec = by_key or by_rid
        if rec is not None and rec.fingerprint != fingerprint:
            raise AdmissionError(
                409, f"rollout {request.rollout_id!r} was already started with a different "
                "request; a retried init must repeat the same body",
            )
        return rec

    def _check_callback_host(self, request: RolloutRequest, peer: str | None) -> None:
        allowed = self.settings.allowed_callback_hosts
        if allowed is None:
            return
        host = (urlsplit(request.server_url).hostname or "").lower()
        if (peer is not None and host == peer.lower()) or _host_allowed(host, allowed):
            return
        raise AdmissionError(
            403, f"server_url host {host!r} is not allowed: it must be the address the init "
            "comes from or be listed in allowed_callback_hosts (start the server with "
            f"'osmosis serve --allowed-callback-host {host}', or add it to "
            "OSMOSIS_ROLLOUT_SERVER_ALLOWED_CALLBACK_HOSTS)",
        )

    def _new_record(self, request: RolloutRequest, fingerprint: str) -> _Record:
        future: asyncio.Future[InitResponse] = asyncio.get_running_loop().create_future()
        # A waiter may go away (client disconnect); mark errors as seen so none is logged twice.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        rec = _Record(
            key=request.idempotency_key, request=request, init=future, fingerprint=fingerprint
        )
        if rec.key is not None:
            self._by_key[rec.key] = rec
        self._by_rid[rec.rollout_id] = rec
        self.pending += 1
        # Resolve in a task of its own: a disconnecting first caller must not strand duplicates.
        self._spawn(self._resolve_init(rec))
        return rec

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _resolve_init(self, rec: _Record) -> None:
        try:
            await self._resolve_init_inner(rec)
        finally:
            if not rec.init.done():  # cancelled at shutdown or a bug: refuse, never strand
                self._forget(rec)
                self.pending -= 1
                rec.done.set()
                rec.init.set_exception(
                    AdmissionError(503, SHUTTING_DOWN, self.settings.retry_after_seconds)
                )

    async def _resolve_init_inner(self, rec: _Record) -> None:
        try:
            rec.tools = await resolve_tools(self.agent_loop, rec.request)
        except Exception as exc:  # the user's get_tools failed: refuse this init, forget it
            self._forget(rec)
            self.pending -= 1
            rec.done.set()
            logger.warning("get_tools failed for rollout %s: %s", rec.rollout_id, exc)
            rec.init.set_exception(
                AdmissionError(422, f"get_tools() raised {type(exc).__name__}: {exc}")
            )
            return
        # From here on the rollout has its 202: the drive task owns it to a terminal state.
        rec.drive_task = asyncio.create_task(self._drive(rec))
        rec.init.set_result(InitResponse(rollout_id=rec.rollout_id, tools=rec.tools))

    # -- running -----------------------------------------------------------------------------

    async def _acquire_slot(self) -> bool:
        assert self._sem is not None and self._closing is not None
        if self._closing.is_set():
            return False
        if not self._sem.locked():  # a free slot: no need to watch for shutdown
            await self._sem.acquire()
            return True
        acquire = asyncio.ensure_future(self._sem.acquire())
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            await asyncio.wait({acquire, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
            if not acquire.done():
                acquire.cancel()
                await asyncio.gather(acquire, return_exceptions=True)
        got = acquire.done() and not acquire.cancelled()
        if got and self._closing.is_set():
            self._sem.release()
            return False
        return got

    async def _run(self, rec: _Record) -> RolloutResult:
        if not await self._acquire_slot():
            return _shutdown_result([])
        assert self._sem is not None
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
            self._sem.release()

    async def _drive(self, rec: _Record) -> None:
        try:
            req = rec.request
            request_dump = req.model_dump(mode="json", exclude={"api_key"})
            request_dump["server_url"] = redact_url(req.server_url)
            if req.tool_server_url:
                request_dump["tool_server_url"] = redact_url(req.tool_server_url)
            self._trace(rec, "init", {"request": request_dump})
            try:
                result = await self._run(rec)
            except Exception as exc:  # a bug of ours: still a result, never a stuck record
                logger.exception("rollout %s failed inside the server", rec.rollout_id)
                result = _internal_error_result(exc)
            rec.response = to_response(rec.rollout_id, result)
            self.counts["completed" if result.status is RolloutStatus.COMPLETED else "errored"] += 1
            rec.state = "delivering"
            self._trace(rec, "result", rec.response.model_dump(mode="json"))
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
            self._remember_finished(rec)
            rec.done.set()

    def _trace(self, rec: _Record, event: str, data: dict[str, Any]) -> None:
        if self.traces is None:
            return
        try:
            self.traces.write(rec.rollout_id, event, data)
        except Exception as exc:  # a trace is a debugging aid: never fail the rollout for it
            logger.warning("could not trace rollout %s: %s", rec.rollout_id, exc)

    # -- queries -----------------------------------------------------------------------------

    def view(self, rollout_id: str) -> RolloutRecordView | None:
        """State and (once known) result of a rollout, or ``None`` if unknown or forgotten."""
        rec = self._by_rid.get(rollout_id)
        if rec is None or not rec.init.done() or rec.init.exception() is not None:
            return None
        return RolloutRecordView(
            rollout_id=rec.rollout_id, state=rec.state, result=rec.response,
            delivery_error=rec.delivery_error,
        )

    def runs_of(self, rollout_id: str) -> int:
        """How many times the loop ran for ``rollout_id`` (0 or 1; tests check it)."""
        rec = self._by_rid.get(rollout_id)
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


def _fingerprint(request: RolloutRequest) -> str:
    """Identifies a request body (its idempotency key aside): retries must repeat it."""
    dump = request.model_dump_json(exclude={"idempotency_key"})
    return hashlib.sha256(dump.encode()).hexdigest()


def _host_allowed(host: str, allowed: list[str]) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    for entry in allowed:
        entry = entry.strip().lower()
        if entry == host:
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


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
