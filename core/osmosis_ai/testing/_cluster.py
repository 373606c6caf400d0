"""A fake training cluster for testing rollout servers (yours and ours) on 127.0.0.1.

It answers ``/v1/chat/completions`` from a script, records ``/v1/rollout/completed`` callbacks
and can inject faults (HTTP 500s and hangs) into a fraction of either::

    async with FakeCluster(reply=lambda body: "42") as cluster:
        ...post /v1/rollout/init to your server with server_url=cluster.url...
        result = await cluster.wait_for("rollout-1")
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from osmosis_ai.errors import MissingExtraError

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError("osmosis_ai.testing.FakeCluster", "server", "fastapi") from _exc

__all__ = ["FakeCluster", "serve_in_loop", "tool_call_message"]

Reply = Callable[[dict[str, Any]], "dict[str, Any] | str"]


def tool_call_message(name: str, arguments: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    """An assistant message that calls one tool (for scripted replies)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id or f"call_{random.getrandbits(40):x}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


class FakeCluster:
    """A scripted training cluster served by uvicorn on ``127.0.0.1`` (a free port).

    Args:
        reply: maps a chat request body to the assistant message (or its text). Default: the
            text ``"done"``.
        api_key: if set, every request must carry ``Authorization: Bearer <api_key>``.
        llm_fault_rate: fraction of chat calls that fail: ``hang_fraction`` of them hang for
            ``hang_seconds`` or until the cluster closes (then answer normally, too late for a
            short client timeout), the others answer 500.
        callback_fault_rate: the same for completion callbacks (a hung callback is still
            recorded, as a real cluster that processed it but whose answer was lost would).
        seed: seeds the fault choice.

    Attributes:
        chat_calls: every chat request body received, in order.
        callbacks: completion callbacks received, per rollout id (more than one when a
            retried callback had in fact arrived).
    """

    def __init__(
        self,
        reply: Reply | None = None,
        *,
        api_key: str | None = None,
        llm_fault_rate: float = 0.0,
        callback_fault_rate: float = 0.0,
        hang_seconds: float = 2.0,
        hang_fraction: float = 0.5,
        seed: int = 0,
    ) -> None:
        self.reply = reply or (lambda _body: "done")
        self.api_key = api_key
        self.llm_fault_rate = llm_fault_rate
        self.callback_fault_rate = callback_fault_rate
        self.hang_seconds = hang_seconds
        self.hang_fraction = hang_fraction
        self.chat_calls: list[dict[str, Any]] = []
        self.callbacks: dict[str, list[dict[str, Any]]] = {}
        self.faults = {"llm_500": 0, "llm_hang": 0, "callback_500": 0, "callback_hang": 0}
        self._rng = random.Random(seed)
        self._waiters: dict[str, asyncio.Event] = {}
        self._serving: Any = None
        # Set on close: a hung request ends then, so leaving the block never waits out a hang.
        self._closing = asyncio.Event()
        self.url = ""
        self.app = self._build_app()

    # -- app ---------------------------------------------------------------------------------

    def _build_app(self) -> Any:
        app = FastAPI()

        def authorized(request: Request) -> bool:
            if self.api_key is None:
                return True
            return request.headers.get("authorization") == f"Bearer {self.api_key}"

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            if not authorized(request):
                return JSONResponse({"error": "bad key"}, status_code=401)
            body = await request.json()
            self.chat_calls.append(body)
            fault = await self._maybe_fault(self.llm_fault_rate, "llm")
            if fault is not None:
                return fault
            return self._completion(body)

        @app.get("/v1/models")
        async def models() -> Any:
            return {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "osmosis"}]}

        @app.post("/v1/rollout/completed")
        async def completed(request: Request) -> Any:
            if not authorized(request):
                return JSONResponse({"error": "bad key"}, status_code=401)
            body = await request.json()
            fault = await self._maybe_fault(self.callback_fault_rate, "callback")
            if fault is not None and fault.status_code >= 500:
                return fault
            self.record_callback(body)
            return {"ok": True}

        return app

    async def _maybe_fault(self, rate: float, what: str) -> Any:
        if rate <= 0 or self._rng.random() >= rate:
            return None
        if self._rng.random() >= self.hang_fraction:
            self.faults[f"{what}_500"] += 1
            return JSONResponse({"error": "injected fault"}, status_code=500)
        self.faults[f"{what}_hang"] += 1
        with suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), self.hang_seconds)
        return None

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        out = self.reply(body)
        message = {"role": "assistant", "content": out} if isinstance(out, str) else dict(out)
        prompt_tokens = sum(len(str(m.get("content") or "")) // 4 + 4 for m in body.get("messages", []))
        completion_tokens = max(len(str(message.get("content") or "")) // 4, 1)
        return {
            "id": f"chatcmpl-{len(self.chat_calls)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def record_callback(self, body: dict[str, Any]) -> None:
        rid = str(body.get("rollout_id"))
        self.callbacks.setdefault(rid, []).append(body)
        self._waiters.setdefault(rid, asyncio.Event()).set()

    async def wait_for(self, rollout_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait for the first completion callback of ``rollout_id`` and return its body."""
        event = self._waiters.setdefault(rollout_id, asyncio.Event())
        await asyncio.wait_for(event.wait(), timeout_s)
        return self.callbacks[rollout_id][0]

    # -- serving -----------------------------------------------------------------------------

    async def __aenter__(self) -> FakeCluster:
        self._serving = serve_in_loop(self.app)
        self.url = await self._serving.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()
        await self._serving.__aexit__(None, None, None)


@asynccontextmanager
async def serve_in_loop(app: Any, *, host: str = "127.0.0.1", lifespan: str = "on") -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn as a task of the running loop; yields ``http://host:port``.

    The port is picked by the OS. Leaving the block stops the server (running the app's
    shutdown, e.g. a rollout server's graceful shutdown).
    """
    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=0, log_level="warning", lifespan=lifespan,  # type: ignore[arg-type,unused-ignore]
        timeout_keep_alive=75, backlog=4096,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
