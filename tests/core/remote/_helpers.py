"""Agent loops and helpers shared by the remote-rollout tests (and the benchmark)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from osmosis_ai.remote import (
    ClientSettings,
    RolloutAgentLoop,
    RolloutContext,
    RolloutRequest,
    RolloutResult,
    ServerSettings,
    create_app,
)
from osmosis_ai.rollout import ChatResult, Message

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}

ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
}


class ToolLoop(RolloutAgentLoop):
    """Calls the LLM until it answers without tools; runs ``add``; reward 1.0 if 'ok' in text.

    Counts its runs per rollout id (tests check that nothing runs twice).
    """

    name = "tool-loop"

    def __init__(self, *, gate: asyncio.Event | None = None, tools_delay_s: float = 0.0) -> None:
        self.runs: Counter[str] = Counter()
        self.tools_calls = 0
        self.gate = gate
        self.tools_delay_s = tools_delay_s

    async def get_tools(self, request: RolloutRequest) -> list[dict[str, Any]]:
        self.tools_calls += 1
        if self.tools_delay_s:
            await asyncio.sleep(self.tools_delay_s)
        if request.metadata.get("break_tools"):
            raise RuntimeError("tools unavailable for this row")
        return [ADD_TOOL]

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        self.runs[ctx.rollout_id] += 1
        if self.gate is not None:
            await self.gate.wait()
        messages = list(ctx.request.messages)
        result = await chat_running_add(ctx, messages)
        return ctx.complete(messages, reward=1.0 if "ok" in result.content else 0.0)


async def chat_running_add(ctx: RolloutContext, messages: list[Message]) -> ChatResult:
    """Call the LLM until it answers without tool calls, running each ``add`` call (appended
    to ``messages``, recorded as a tool call); return the last answer."""
    while True:
        result = await ctx.chat(messages)
        messages.append(result.message)
        if not result.has_tool_calls:
            return result
        for call in result.tool_calls:
            args = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": str(args["a"] + args["b"])})
            ctx.record_tool_call(latency_ms=1.0)


def fast_client() -> ClientSettings:
    """Retries without real waiting. Timeouts stay long: on a loaded CI machine a healthy
    call must never time out (tests that need a timeout inject a hang past it)."""
    return ClientSettings(
        timeout_seconds=30.0, connect_timeout_seconds=10.0, max_retries=3,
        retry_backoff_seconds=0.01, retry_backoff_max_seconds=0.05,
        completion_retries=2, completion_timeout_seconds=30.0,
    )


def init_body(rollout_id: str, server_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "rollout_id": rollout_id,
        "server_url": server_url,
        "messages": [{"role": "user", "content": "1+2?"}],
        **extra,
    }


@asynccontextmanager
async def asgi_server(loop: RolloutAgentLoop, **kwargs: Any) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """``create_app`` with its lifespan running, and an httpx client bound to it (no socket)."""
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("client_settings", fast_client())
    kwargs.setdefault("settings", ServerSettings(shutdown_grace_seconds=2.0))
    app = create_app(loop, **kwargs)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rollout.test") as client:
            yield app, client


async def wait_until(predicate: Any, timeout_s: float = 120.0) -> None:
    """Wait for ``predicate`` (the deadline is a safety net against a hang, never the test)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)
