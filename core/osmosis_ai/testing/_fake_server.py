"""A scripted OpenAI-compatible chat-completions server for tests (no model, no network).

It listens on ``127.0.0.1`` (random port) in a background thread, so it serves any client on any
event loop: async tests, Strands' synchronous ``agent(...)`` (a fresh loop per call) and
``Runner.run_sync`` alike. It also implements the ``PolicyEndpoint`` protocol: rollouts route
their samples to ``/rollouts/{rollout_id}/samples/{sample_id}/v1`` and the server records one
:class:`~osmosis_ai.rollout.LLMCall` per answered request, with fake but consistent token ids
and logprobs, exactly as the policy gateway does with a real engine.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from osmosis_ai.rollout._scope import DEFAULT_SAMPLE_ID, PolicyRoute
from osmosis_ai.rollout._types import LLMCall, ToolCall
from osmosis_ai.testing._script import (
    EOS_ID,
    FakeReply,
    FakeRequest,
    HTTPFailure,
    Script,
    ScriptItem,
    fake_logprob,
    render_completion,
    render_prompt,
    tokenize,
)

__all__ = ["FakeOpenAIServer"]

_PATH_RE = re.compile(
    r"^(?:/rollouts/(?P<rid>[^/]+)/samples/(?P<sid>[^/]+))?/v1/(?P<op>chat/completions|models)/?$"
)


class FakeOpenAIServer:
    """A scripted OpenAI-compatible server that records token-level calls per sample.

    Args:
        script: what to answer. A sequence is walked separately by every
            ``(rollout_id, sample_id)``: a ``str`` is a text reply, a :class:`FakeReply` may carry
            tool calls, an :class:`HTTPFailure` (``rate_limited()``) answers an HTTP error. A
            callable gets a :class:`FakeRequest` and returns one of those. A sample that runs
            past the end of its script gets HTTP 400 (not retried), so a test fails loudly.
        model: the model name reported by ``route()`` and ``/v1/models``.
        latency_s: sleep this long before answering each request (simulated generation).
        stream_chunk_chars: size of the text pieces of a streamed answer.

    Use it as a context manager (sync or async)::

        with FakeOpenAIServer(script=[tool_call("add", a=2, b=3), "5"]) as server:
            route = server.route("r1", "main")   # base_url .../rollouts/r1/samples/main/v1
            ...
            calls = await server.collect("r1")   # {"main": [LLMCall, LLMCall]}
    """

    def __init__(
        self,
        script: Script = (),
        *,
        model: str = "osmosis-policy",
        latency_s: float = 0.0,
        stream_chunk_chars: int = 8,
    ) -> None:
        self.script = script
        self.model = model
        self.latency_s = latency_s
        self.stream_chunk_chars = max(1, stream_chunk_chars)
        self.requests: list[FakeRequest] = []
        """Every chat-completions request received (answered or failed), in arrival order."""
        self.calls: list[LLMCall] = []
        """Every recorded call, in order (``collect`` does not remove them from here)."""
        self.connections = 0
        """How many TCP connections clients opened (keep-alive reuse keeps this low)."""
        self.errors: list[Exception] = []
        """Exceptions raised by a script callable (each answered with HTTP 400)."""
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str], int] = {}
        self._pending: dict[str, dict[str, list[LLMCall]]] = {}
        self._fail_next: list[HTTPFailure] = []
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Start serving in a background thread (idempotent)."""
        if self._httpd is not None:
            return self
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="FakeOpenAIServer",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and drop open connections."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> FakeOpenAIServer:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (the server must be started)."""
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not running; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """The unscoped OpenAI-compatible base URL (``.../v1``)."""
        return self.url + "/v1"

    # --- PolicyEndpoint -------------------------------------------------------------------

    def route(self, rollout_id: str, sample_id: str) -> PolicyRoute:
        """The base URL scoped to one sample of one rollout."""
        return PolicyRoute(
            base_url=f"{self.url}/rollouts/{rollout_id}/samples/{sample_id}/v1",
            api_key="fake-key",
            model=self.model,
        )

    async def collect(self, rollout_id: str) -> dict[str, list[LLMCall]]:
        """Return and forget the calls recorded for ``rollout_id``, keyed by sample id."""
        with self._lock:
            return self._pending.pop(rollout_id, {})

    # --- test controls --------------------------------------------------------------------

    def fail_next(
        self, count: int = 1, *, status: int = 429, retry_after: float | None = 0.0
    ) -> None:
        """Answer the next ``count`` requests (any sample) with HTTP ``status``."""
        with self._lock:
            self._fail_next.extend(HTTPFailure(status, retry_after) for _ in range(count))

    def calls_for(self, rollout_id: str, sample_id: str = DEFAULT_SAMPLE_ID) -> list[LLMCall]:
        """Recorded calls of one sample (not removed)."""
        return [c for c in self.calls if c.rollout_id == rollout_id and c.sample_id == sample_id]

    # --- request handling (server thread) -------------------------------------------------

    def _next_item(
        self, rollout_id: str, sample_id: str, body: dict[str, Any]
    ) -> tuple[FakeRequest, ScriptItem]:
        with self._lock:
            key = (rollout_id, sample_id)
            index = self._counters.get(key, 0)
            request = FakeRequest(rollout_id, sample_id, index, body)
            self.requests.append(request)
            if self._fail_next:  # injected failures do not advance the sample's script
                return request, self._fail_next.pop(0)
            self._counters[key] = index + 1
        if callable(self.script):
            try:
                return request, self.script(request)
            except Exception as exc:  # a bug in the test's script: fail the call loudly, fast
                self.errors.append(exc)
                return request, HTTPFailure(
                    400, None, f"FakeOpenAIServer script raised {type(exc).__name__}: {exc}"
                )
        if index < len(self.script):
            return request, self.script[index]
        return request, HTTPFailure(
            400,
            None,
            f"FakeOpenAIServer script exhausted: rollout {rollout_id!r} sample {sample_id!r} "
            f"made request #{index + 1} but the script has {len(self.script)} item(s)",
        )

    def _answer(
        self, request: FakeRequest, item: str | FakeReply
    ) -> tuple[dict[str, Any], LLMCall]:
        """Build the completion body and the call record for one scripted reply."""
        reply = FakeReply(content=item) if isinstance(item, str) else item
        body = request.body
        calls = [
            (f"call_{uuid.uuid4().hex[:16]}", name, json.dumps(args, ensure_ascii=False))
            for name, args in reply.tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ]
        prompt_ids = tokenize(render_prompt(request.messages, request.tools))
        completion_ids = tokenize(render_completion(reply.content, calls)) + [EOS_ID]
        logprobs = [fake_logprob(t) for t in completion_ids]
        call_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        record = LLMCall(
            call_id=call_id,
            rollout_id=request.rollout_id,
            sample_id=request.sample_id,
            request_messages=request.messages,
            tools=request.tools or None,
            response_message=message,
            finish_reason=reply.finish,
            tool_calls=[ToolCall(id=cid, name=name, arguments=args) for cid, name, args in calls],
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
            logprobs=logprobs,
            model=str(body.get("model", self.model)),
            started_at=time.time(),
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(completion_ids),
        )
        completion: dict[str, Any] = {
            "id": call_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": record.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": reply.finish, "logprobs": None}
            ],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion_ids),
                "total_tokens": len(prompt_ids) + len(completion_ids),
            },
        }
        if body.get("logprobs") or body.get("top_logprobs"):
            completion["choices"][0]["logprobs"] = {
                "content": [
                    {"token": f"<{t}>", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for t, lp in zip(completion_ids, logprobs, strict=True)
                ]
            }
        if body.get("return_token_ids"):
            completion["prompt_token_ids"] = prompt_ids
            completion["choices"][0]["token_ids"] = completion_ids
        return completion, record

    def _record(self, record: LLMCall) -> None:
        with self._lock:
            self.calls.append(record)
            by_sample = self._pending.setdefault(record.rollout_id, {})
            by_sample.setdefault(record.sample_id, []).append(record)

    def _stream_chunks(
        self, completion: dict[str, Any], include_usage: bool
    ) -> Iterator[dict[str, Any]]:
        """Split a completion into chat.completion.chunk objects (vLLM-like)."""
        choice = completion["choices"][0]
        message = choice["message"]
        base = {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            return {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                ],
                **extra,
            }

        first_extra = (
            {"prompt_token_ids": completion["prompt_token_ids"]}
            if "prompt_token_ids" in completion
            else {}
        )
        yield chunk({"role": "assistant", "content": ""}, **first_extra)
        content = message.get("content") or ""
        step = self.stream_chunk_chars
        for i in range(0, len(content), step):
            yield chunk({"content": content[i : i + step]})
        for index, call in enumerate(message.get("tool_calls") or []):
            fn = call["function"]
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
            args = fn["arguments"]
            for i in range(0, len(args), step):
                yield chunk(
                    {
                        "tool_calls": [
                            {"index": index, "function": {"arguments": args[i : i + step]}}
                        ]
                    }
                )
        last = chunk({}, choice["finish_reason"])
        if "token_ids" in choice:
            last["choices"][0]["token_ids"] = choice["token_ids"]
        yield last
        if include_usage:
            yield {**base, "choices": [], "usage": completion["usage"]}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many rollouts open connections at once
    allow_reuse_address = True
    fake: FakeOpenAIServer

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def close_connections(self) -> None:
        with self.connections_lock:
            conns, self.connections = list(self.connections), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms stalls
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)
            self.server.fake.connections += 1

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Silence the default stderr access log."""

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, OSError):
            pass  # the client or stop() dropped the connection

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        match = _PATH_RE.match(self.path.split("?", 1)[0])
        if match is None or match["op"] != "models":
            self._send_json(
                404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
            )
            return
        model = self.server.fake.model
        self._send_json(
            200,
            {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "osmosis"}]},
        )

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        match = _PATH_RE.match(self.path.split("?", 1)[0])
        if match is None or match["op"] != "chat/completions":
            self._send_json(
                404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
            )
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send_json(
                400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
            )
            return
        fake = self.server.fake
        rollout_id = match["rid"] or ""
        sample_id = match["sid"] or DEFAULT_SAMPLE_ID
        request, item = fake._next_item(rollout_id, sample_id, body)
        if fake.latency_s > 0:
            time.sleep(fake.latency_s)
        if isinstance(item, HTTPFailure):
            self._send_failure(item)
            return
        completion, record = fake._answer(request, item)
        fake._record(record)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(fake._stream_chunks(completion, include_usage))
        else:
            self._send_json(200, completion)

    def _send_failure(self, failure: HTTPFailure) -> None:
        kind = "rate_limit_error" if failure.status == 429 else "invalid_request_error"
        headers = {} if failure.retry_after is None else {"Retry-After": f"{failure.retry_after:g}"}
        self._send_json(
            failure.status,
            {"error": {"message": failure.message, "type": kind, "code": kind}},
            headers,
        )

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self._write_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
