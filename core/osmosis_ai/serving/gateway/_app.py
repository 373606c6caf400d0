"""The gateway's FastAPI app: OpenAI-compatible routes, scoped per rollout sample."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import random
import re
import time
from collections import Counter
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from osmosis_ai.chat import as_message
from osmosis_ai.remote._limits import MAX_JSON_DEPTH, body_nests_too_deep
from osmosis_ai.rollout import LLMCall, Message
from osmosis_ai.serving._engine import (
    EngineError,
    GenerationRequest,
    GenerationResult,
    InferenceEngine,
)
from osmosis_ai.serving.gateway._wire import (
    ChatCompletionRequest,
    completion_body,
    error_body,
    sse_chunks,
    validation_message,
)

__all__ = ["UNSCOPED_ROLLOUT", "GatewayBusy", "GatewayState", "build_app"]

logger = logging.getLogger("osmosis")

UNSCOPED_ROLLOUT = "unscoped"
# Call ids: a private generator seeded from the OS once (uuid4 reads the OS per call, and the
# global `random` may be seeded by the user, which would repeat ids across runs).
_ids = random.Random(random.SystemRandom().getrandbits(64))
_ROLLOUT_HEADER = "x-osmosis-rollout-id"
_SAMPLE_HEADER = "x-osmosis-sample-id"
# Sample ids name trace files and samples downstream: checked here, where clients set them
# (the same rule as RolloutScope.claim_sample_id).
_SAMPLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# A body that may hold a surrogate code point: a \uD800-\uDFFF escape, or the raw UTF-8 bytes
# of one (json.loads decodes bytes with 'surrogatepass'). Only such bodies are walked.
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
# Any surrogate left in a decoded str is unpaired (json joins valid pairs into one character).
_SURROGATE = re.compile("[\ud800-\udfff]")


class GatewayBusy(Exception):
    """The gateway is swapping weights and the call waited too long."""


class GatewayState(Protocol):
    """What the routes need from the gateway (``PolicyGateway`` implements it); the app is
    built from this, so this module does not import the gateway that builds it."""

    engine: InferenceEngine
    api_key: str | None
    policy_name: str
    retry_after_s: int
    max_body_bytes: int
    stats: Counter[str]

    @property
    def stopping(self) -> bool: ...

    @property
    def model_name(self) -> str: ...

    def generation_request(
        self,
        req: ChatCompletionRequest,
        messages: list[Message],
        *,
        rollout_id: str | None = None,
        sample_id: str | None = None,
    ) -> GenerationRequest: ...

    async def admit(self) -> None: ...

    def release(self) -> None: ...

    def record(self, call: LLMCall) -> None: ...


def _json(body: dict[str, Any]) -> Response:
    return Response(json.dumps(body, ensure_ascii=False), media_type="application/json")


def build_app(gw: GatewayState) -> FastAPI:
    """Create the app serving ``gw``: chat completions and models, unscoped and scoped."""
    app = FastAPI(title="osmosis policy gateway", docs_url=None, redoc_url=None, openapi_url=None)
    _install_error_handlers(app)
    app.add_middleware(JsonOnly)

    async def chat_scoped(request: Request) -> Response:
        # Path parameters read from the match, not declared: FastAPI would validate them per
        # request (~20 us of a scripted call), and _chat checks both anyway.
        params = request.path_params
        return await _chat(gw, request, params["rollout_id"], params["sample_id"])

    async def chat_unscoped(request: Request) -> Response:
        rid = request.headers.get(_ROLLOUT_HEADER) or UNSCOPED_ROLLOUT
        sid = request.headers.get(_SAMPLE_HEADER, "main")
        return await _chat(gw, request, rid, sid)

    async def models(request: Request) -> Response:
        if (denied := _check_auth(gw, request)) is not None:
            return denied
        now = int(time.time())
        names = [gw.model_name, gw.policy_name]
        return _json(
            {
                "object": "list",
                "data": [
                    {"id": n, "object": "model", "created": now, "owned_by": "osmosis"}
                    for n in names
                ],
            }
        )

    async def health() -> Response:
        return _json({"status": "ok", "policy_version": gw.engine.policy_version})

    scoped = "/rollouts/{rollout_id}/samples/{sample_id}/v1"
    app.add_api_route("/v1/chat/completions", chat_unscoped, methods=["POST"])
    app.add_api_route(f"{scoped}/chat/completions", chat_scoped, methods=["POST"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    app.add_api_route(f"{scoped}/models", models, methods=["GET"])
    app.add_api_route("/health", health, methods=["GET"])
    return app


class JsonOnly:
    """Answers 415 to a POST whose ``Content-Type`` is not ``application/json``.

    A web page may POST ``text/plain`` (or a form) to any address without a CORS preflight;
    requiring JSON keeps a browser tab from driving the policy or the rollout callbacks. Plain
    ASGI (not ``BaseHTTPMiddleware``): it costs one header scan per request.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            ctype = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
            media = ctype.split(b";", 1)[0].strip().lower()
            if media != b"application/json":
                shown = ctype.decode("latin-1")[:100] or "none"
                reply = _reply(
                    415,
                    f"Content-Type {shown!r} is not supported: send 'application/json'",
                    "invalid_request_error",
                    code="unsupported_media_type",
                )
                await reply(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _install_error_handlers(app: FastAPI) -> None:
    async def http_error(_req: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        headers = dict(exc.headers) if exc.headers else None
        return _reply(exc.status_code, str(exc.detail), kind, headers=headers)

    async def validation_error(_req: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        err = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(p) for p in err.get("loc", ()))
        return _reply(
            400, f"{loc}: {err.get('msg', 'invalid')}", "invalid_request_error", param=loc
        )

    async def unexpected(_req: Request, exc: Exception) -> Response:
        logger.exception("gateway route failed", exc_info=exc)
        # The details are in the gateway's log; a client never sees internals.
        return _reply(500, "internal gateway error (see the gateway's log)", "server_error")

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected)


def _check_auth(gw: GatewayState, request: Request) -> Response | None:
    if gw.api_key is None:
        return None
    authorization = request.headers.get("authorization", "")
    expected = f"Bearer {gw.api_key}"
    # Constant time: the comparison must not reveal how much of a guessed key was right.
    if hmac.compare_digest(
        authorization.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    ):
        return None
    return _reply(
        401,
        "missing or wrong API key: send 'Authorization: Bearer <key>'",
        "authentication_error",
        code="invalid_api_key",
    )


async def _read_body(request: Request, limit: int) -> bytes | Response:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        # The caller left mid-body (its process stopped, say): a normal event, not a gateway
        # failure; nobody reads this reply.
        logger.debug("client disconnected before its request body arrived")
        return Response(status_code=499)
    return b"".join(chunks)


def _too_large(limit: int) -> Response:
    return _reply(413, f"request body is larger than {limit} bytes", "invalid_request_error",
                  code="request_too_large")


async def _parse(request: Request, limit: int) -> ChatCompletionRequest | Response:
    raw = await _read_body(request, limit)
    if isinstance(raw, Response):
        return raw
    if body_nests_too_deep(raw):  # before the parser recurses into it
        return _reply(400, f"request body nests deeper than {MAX_JSON_DEPTH} levels",
                      "invalid_request_error")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _reply(400, f"request body is not valid JSON: {exc}", "invalid_request_error")
    except (ValueError, RecursionError) as exc:  # e.g. an integer of 5,000 digits
        reason = "a number has too many digits" if "digits" in str(exc) else type(exc).__name__
        return _reply(400, f"request body is not valid JSON: {reason}", "invalid_request_error")
    if _MAYBE_SURROGATE.search(raw) and (where := _lone_surrogate(data)) is not None:
        return _reply(
            400,
            f"request body has invalid Unicode at {where or 'the top level'}: a lone surrogate "
            "(e.g. \\ud800) is not a character; send valid UTF-8 text",
            "invalid_request_error",
            param=where or None,
        )
    return _validate(data)


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (or key) holding an unpaired surrogate, else None.

    Such a string cannot be encoded as UTF-8: tokenizers and engines fail on it deep inside,
    so it is refused here, where the client can be told which field it was.
    """
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if _SURROGATE.search(key):  # the key itself is not echoed: it cannot be encoded
                return f"{path}.<key>" if path else "<key>"
            if (found := _lone_surrogate(item, sub)) is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if (found := _lone_surrogate(item, f"{path}.{i}" if path else str(i))) is not None:
                return found
    return None


def _validate(data: Any) -> ChatCompletionRequest | Response:
    if not isinstance(data, dict):
        return _reply(400, "request body must be a JSON object", "invalid_request_error")
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message(exc)
        return _reply(400, message, "invalid_request_error", param=param)


def _reply(
    status: int,
    message: str,
    type_: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(
        error_body(message, type_, param=param, code=code), status_code=status, headers=headers
    )


async def _chat(gw: GatewayState, request: Request, rollout_id: str, sample_id: str) -> Response:
    if (denied := _check_auth(gw, request)) is not None:
        return denied
    if not _SAMPLE_ID.fullmatch(sample_id) or not 0 < len(rollout_id) <= 256:
        return _reply(
            400, f"invalid sample id {sample_id[:140]!r} or rollout id: a sample id is 1-128 "
            "letters, digits, '_', '.', '-' (starting with a letter or digit)",
            "invalid_request_error", param="sample_id",
        )
    parsed = await _parse(request, gw.max_body_bytes)
    if isinstance(parsed, Response):
        return parsed
    done = await _complete(gw, parsed, rollout_id, sample_id)
    if isinstance(done, Response):
        return done
    call_id, created, result = done
    model = gw.model_name
    token_ids = bool(parsed.return_token_ids)
    if parsed.stream:
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        chunks = sse_chunks(
            call_id, created, model, result, include_usage=include_usage, token_ids=token_ids
        )
        return StreamingResponse(chunks, media_type="text/event-stream")
    return _json(
        completion_body(
            call_id, created, model, result, logprobs=bool(parsed.logprobs), token_ids=token_ids
        )
    )


async def _complete(
    gw: GatewayState, parsed: ChatCompletionRequest, rollout_id: str, sample_id: str
) -> Response | tuple[str, int, GenerationResult]:
    """Generate and record one call: ``(call_id, created, result)`` or an error reply."""
    messages = [as_message(m.model_dump(exclude_none=True)) for m in parsed.messages]
    gen = gw.generation_request(parsed, messages, rollout_id=rollout_id, sample_id=sample_id)
    started, t0 = time.time(), time.perf_counter()
    try:
        await gw.admit()
    except GatewayBusy:
        return _reply(
            429,
            "the policy is being updated; retry shortly",
            "rate_limit_error",
            code="policy_swapping",
            headers={"Retry-After": str(gw.retry_after_s)},
        )
    try:
        result = await gw.engine.generate(gen)
    except EngineError as exc:
        gw.stats["engine_errors"] += 1
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        if exc.status_code == 429:
            kind = "rate_limit_error"
        headers = None if exc.retry_after_s is None else {"Retry-After": f"{exc.retry_after_s:g}"}
        return _reply(exc.status_code, str(exc), kind, code=exc.code, headers=headers)
    except asyncio.CancelledError:
        if not gw.stopping:
            raise
        # A call still running when the shutdown grace ends (Ctrl-C mid-call) is cancelled by
        # uvicorn, which would log the cancellation as a traceback: answer it instead.
        return _reply(503, "the policy gateway is shutting down", "server_error",
                      code="shutting_down")
    except Exception as exc:  # the engine failed: answer 502, never 500
        gw.stats["engine_errors"] += 1
        logger.exception("policy engine %s failed", gw.engine.name)
        return _reply(502, f"policy engine failed: {exc!r}", "server_error", code="engine_error")
    finally:
        gw.release()
    call_id = f"chatcmpl-{_ids.getrandbits(128):032x}"
    gw.record(_record(call_id, rollout_id, sample_id, messages, parsed, result, gw, started, t0))
    return call_id, int(started), result


def _record(
    call_id: str,
    rollout_id: str,
    sample_id: str,
    messages: list[Message],
    parsed: ChatCompletionRequest,
    result: GenerationResult,
    gw: GatewayState,
    started: float,
    t0: float,
) -> LLMCall:
    version = result.policy_version
    return LLMCall(
        call_id=call_id,
        rollout_id=rollout_id,
        sample_id=sample_id,
        request_messages=messages,
        tools=parsed.tools,
        response_message=result.message,
        finish_reason=result.finish_reason,
        tool_calls=result.tool_calls,
        prompt_token_ids=result.prompt_token_ids,
        completion_token_ids=result.completion_token_ids,
        logprobs=result.logprobs,
        model=result.model or gw.model_name,
        policy_version=version if version is not None else gw.engine.policy_version,
        latency_ms=(time.perf_counter() - t0) * 1000.0,
        started_at=started,
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
    )
