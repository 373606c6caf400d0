"""The FastAPI app of a remote rollout server: :func:`create_app`.

Routes (every one needs ``Authorization: Bearer <key>`` unless auth is off):

- ``POST /v1/rollout/init`` → 202 :class:`InitResponse`; runs the loop in the background.
- ``GET /v1/rollout/{rollout_id}`` → state and result (for a cluster that missed the callback).
- ``GET /health`` → ``{status, agent_loop, active_rollouts, ...}``.

Client errors are answered with a JSON body ``{"error": ..., "detail": ...}``: 400 bad JSON
(or nested deeper than 64 levels), 401 no key, 403 wrong key or callback host not allowed,
404 unknown rollout, 408 body not sent in time, 409 conflicting init, 413 body too large,
422 invalid request, 429 full (``Retry-After``), 503 shutting down.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osmosis_ai._asgi import send_json
from osmosis_ai.errors import MissingExtraError
from osmosis_ai.remote._admission import AdmissionError
from osmosis_ai.remote._client import ClusterClient
from osmosis_ai.remote._limits import MAX_JSON_DEPTH, body_nests_too_deep
from osmosis_ai.remote._loop import RolloutAgentLoop
from osmosis_ai.remote._protocol import InitResponse, RolloutRecordView, RolloutRequest
from osmosis_ai.remote._registry import RolloutRegistry
from osmosis_ai.remote._settings import ClientSettings, ServerSettings
from osmosis_ai.remote._trace import TraceWriter

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["API_KEY_ENV", "create_app"]

logger = logging.getLogger("osmosis")

API_KEY_ENV = "OSMOSIS_ROLLOUT_API_KEY"

Scope = MutableMapping[str, Any]
AsgiEvent = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[AsgiEvent]]
Send = Callable[[AsgiEvent], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Hook = Callable[[], Any]


def _with_shortcuts(
    settings: ServerSettings | None, max_concurrent: int | None, record_ttl_seconds: float | None
) -> ServerSettings:
    """``settings`` (default: from the environment) with the shortcut arguments that are set."""
    shortcuts = {"max_concurrent_rollouts": max_concurrent, "record_ttl_seconds": record_ttl_seconds}
    return (settings or ServerSettings.from_env()).model_copy(
        update={k: v for k, v in shortcuts.items() if v is not None}
    )


def _api_key(api_key: str | None) -> tuple[str, bool]:
    """The key clients must send, and whether it was generated (then it is logged once)."""
    key = api_key or os.environ.get(API_KEY_ENV) or None
    return (secrets.token_urlsafe(24), True) if key is None else (key, False)


def _traces(log_dir: str | Path | None, debug_dir: str | Path | None) -> TraceWriter | None:
    if debug_dir is not None and log_dir is not None:
        raise TypeError("create_app: give log_dir or debug_dir (its 0.2 name), not both")
    folder = debug_dir if debug_dir is not None else log_dir
    return TraceWriter(folder) if folder is not None else None


def create_app(
    agent_loop: RolloutAgentLoop | type[RolloutAgentLoop] | str,
    *,
    api_key: str | None = None,
    auth: bool = True,
    settings: ServerSettings | None = None,
    client_settings: ClientSettings | None = None,
    max_concurrent: int | None = None,
    record_ttl_seconds: float | None = None,
    log_dir: str | Path | None = None,
    on_startup: Hook | None = None,
    on_shutdown: Hook | None = None,
    debug_dir: str | Path | None = None,
) -> FastAPI:
    """Build the FastAPI app that serves ``agent_loop`` over the remote-rollout protocol.

    Args:
        agent_loop: the loop (an instance, a subclass built with no arguments, or
            ``"module:attr"``).
        api_key: the key clients must send; default ``$OSMOSIS_ROLLOUT_API_KEY``, else a random
            key that is logged at startup and kept on ``app.state.api_key``.
        auth: ``False`` serves without authentication (local development only).
        settings: server limits; default from ``OSMOSIS_ROLLOUT_SERVER_*`` variables.
        client_settings: LLM/callback retry policy; default from ``OSMOSIS_ROLLOUT_CLIENT_*``.
        max_concurrent: shortcut for ``settings.max_concurrent_rollouts``.
        record_ttl_seconds: shortcut for ``settings.record_ttl_seconds``.
        log_dir: one JSONL trace per rollout under ``log_dir/<timestamp>/`` (0.2: ``debug_dir``).
        on_startup: called (and awaited if async) when the server starts.
        on_shutdown: called after in-flight rollouts finished or were reported.

    Raises:
        MissingExtraError: FastAPI is not installed (``pip install "osmosis-ai[server]"``).
    """
    try:
        from fastapi import FastAPI
    except ImportError as exc:
        raise MissingExtraError("create_app", "server", "fastapi") from exc
    from osmosis_ai.remote._loader import coerce_agent_loop

    loop = coerce_agent_loop(agent_loop)
    server_settings = _with_shortcuts(settings, max_concurrent, record_ttl_seconds)
    key, generated = _api_key(api_key) if auth else (None, False)
    registry = RolloutRegistry(
        loop,
        settings=server_settings,
        client=ClusterClient(client_settings),
        traces=_traces(log_dir, debug_dir),
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if generated:
            logger.warning("rollout server API key (generated): %s", key)
        await _call(on_startup)
        try:
            yield
        finally:
            await registry.shutdown()
            await _call(on_shutdown)

    app = FastAPI(
        title=f"osmosis rollout server: {loop.name}",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.registry = registry
    app.state.agent_loop = loop
    app.state.api_key = key
    app.state.trace_folder = registry.traces.folder if registry.traces else None
    _add_routes(app, registry)
    _add_error_handlers(app)
    # Outermost first: auth sees every request, then the size limit buffers the body.
    app.add_middleware(
        _BodyLimit, max_bytes=server_settings.max_body_bytes,
        read_timeout_s=server_settings.body_read_timeout_seconds,
    )
    app.add_middleware(_BearerAuth, api_key=key)
    app.add_middleware(_QuietCancel)
    return app


async def _call(hook: Hook | None) -> None:
    if hook is not None:
        out = hook()
        if hasattr(out, "__await__"):
            await out


def _add_routes(app: FastAPI, registry: RolloutRegistry) -> None:
    from fastapi import Request, Response
    from fastapi.responses import JSONResponse

    async def init_rollout(request: RolloutRequest, http: Request) -> Any:
        """Admit a rollout (idempotent on ``idempotency_key``, else ``rollout_id``)."""
        peer = http.client.host if http.client is not None else None
        try:
            return await registry.admit(request, peer=peer)
        except AdmissionError as exc:
            headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
            return JSONResponse({"error": exc.message}, status_code=exc.status, headers=headers)

    # Request is imported here (FastAPI is optional): resolve the postponed annotation.
    init_rollout.__annotations__["http"] = Request
    app.post(
        "/v1/rollout/init",
        status_code=202,
        response_model=InitResponse,
        responses={
            400: {"description": "Body is not JSON, or nests too deep"},
            401: {"description": "No API key"},
            403: {"description": "Wrong API key, or server_url host not allowed"},
            408: {"description": "Body not sent in time"},
            409: {"description": "Conflicts with an earlier init (same id or key, other body)"},
            413: {"description": "Body too large"},
            422: {"description": "Invalid request, or get_tools() failed for it"},
            429: {"description": "Too many unfinished rollouts; see Retry-After"},
            503: {"description": "Shutting down; see Retry-After"},
        },
    )(init_rollout)

    @app.get(
        "/v1/rollout/{rollout_id:path}",
        response_model=RolloutRecordView,
        responses={404: {"description": "Unknown or expired rollout"}},
    )
    async def rollout_status(rollout_id: str) -> Any:
        """State of a rollout and, once finished, its result."""
        view = registry.view(rollout_id)
        if view is None:
            return JSONResponse({"error": f"no rollout {rollout_id!r} on this server"}, status_code=404)
        return view

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness and counters."""
        return registry.health()

    @app.head("/health", include_in_schema=False)
    async def health_head() -> Response:
        return Response(status_code=200)


def _add_error_handlers(app: FastAPI) -> None:
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    async def on_validation(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        if any(e["type"] == "json_invalid" for e in errors):
            return JSONResponse({"error": "request body is not valid JSON", "detail": errors}, status_code=400)
        return JSONResponse({"error": "invalid request", "detail": errors}, status_code=422)

    async def on_http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return JSONResponse(
            {"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
        )

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)


class _QuietCancel:
    """A request cancelled by the server's shutdown (a stalled client past the graceful
    timeout) ends quietly: no traceback in the log for what is an orderly stop."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking_send(message: AsgiEvent) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            logger.info("request %s %s cancelled at shutdown", scope.get("method"), scope.get("path"))
            if not started and scope["type"] == "http":
                await send_json(send, 503, {"error": "server shutting down"},
                                [(b"connection", b"close")])


class _BearerAuth:
    """Require ``Authorization: Bearer <key>`` (or the bare key) on every HTTP request."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.key = api_key.encode() if api_key is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.key is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        if raw is None or not raw.strip():
            await send_json(
                send, 401,
                {"error": "missing API key", "detail": "send 'Authorization: Bearer <key>' "
                 "(osmosis serve prints the key at startup)"},
                [(b"www-authenticate", b"Bearer")],
            )
            return
        token = raw.strip()
        if token[:7].lower() == b"bearer ":
            token = token[7:].strip()
        if not hmac.compare_digest(token, self.key):
            await send_json(send, 403, {"error": "wrong API key"})
            return
        await self.app(scope, receive, send)


class _BodyLimit:
    """Answer 413 for bodies over ``max_bytes`` (by Content-Length or by counting chunks)."""

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        chunks: list[bytes] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout_s
        while True:
            try:  # a stalled client must not hold a request (and shutdown) forever
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                await send_json(send, 408, {
                    "error": "request body not received in time",
                    "detail": f"send the whole body within {self.read_timeout_s:g} s "
                    "(OSMOSIS_ROLLOUT_SERVER_BODY_READ_TIMEOUT_SECONDS)",
                }, [(b"connection", b"close")])
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body_nests_too_deep(body):  # before any parser recurses into it
            await send_json(send, 400, {
                "error": f"request body nests deeper than {MAX_JSON_DEPTH} levels of lists/objects",
                "detail": "flatten messages, metadata and completion_params",
            })
            return
        replayed = False

        async def replay() -> AsgiEvent:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await send_json(
            send, 413,
            {"error": "request body too large",
             "detail": f"the limit is {self.max_bytes} bytes (osmosis serve --max-body-bytes, "
                       "or OSMOSIS_ROLLOUT_SERVER_MAX_BODY_BYTES)"},
        )
