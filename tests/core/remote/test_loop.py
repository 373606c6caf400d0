"""RolloutAgentLoop, RolloutContext and execute_rollout, with a scripted chat function."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError

from osmosis_ai.errors import PolicyCallError
from osmosis_ai.remote import (
    RolloutAgentLoop,
    RolloutContext,
    RolloutRequest,
    RolloutResult,
    RolloutStatus,
    execute_rollout,
    normalize_tools,
)
from osmosis_ai.rollout import ChatResult


def request(**kw: Any) -> RolloutRequest:
    return RolloutRequest(rollout_id="r", server_url="http://c", messages=[{"role": "user", "content": "q"}], **kw)


class Scripted:
    """A chat function replaying replies; records (messages, params). The prompt costs
    ``tokens`` per message, the completion 2 tokens."""

    def __init__(self, *replies: dict[str, Any] | Exception, tokens: int = 10) -> None:
        self.replies = list(replies)
        self.tokens = tokens
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    async def __call__(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> ChatResult:
        self.calls.append((messages, params))
        item = self.replies[min(len(self.calls), len(self.replies)) - 1]
        if isinstance(item, Exception):
            raise item
        return ChatResult(message=item, finish_reason="stop",
                          usage={"prompt_tokens": self.tokens * len(messages), "completion_tokens": 2})


class Looping(RolloutAgentLoop):
    name = "looping"

    def __init__(self, body: Any = None) -> None:
        self.body = body

    def get_tools(self, request: RolloutRequest) -> list[dict[str, Any]]:
        return []

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        if self.body is not None:
            return await self.body(ctx)  # type: ignore[no-any-return]
        messages = list(ctx.request.messages)
        while True:  # relies on max_turns / max_tokens_total to stop
            result = await ctx.chat(messages)
            messages.append(result.message)
            messages.append({"role": "tool", "tool_call_id": "t", "content": "1"})


TOOL = {"role": "assistant", "content": None, "tool_calls": [{"id": "t", "type": "function",
        "function": {"name": "f", "arguments": "{}"}}]}


def test_name_is_required_at_class_creation() -> None:
    with pytest.raises(TypeError, match="must set a class attribute 'name'"):
        class NoName(RolloutAgentLoop):  # noqa: F841
            def get_tools(self, request: RolloutRequest) -> list[dict[str, Any]]:
                return []

            async def run(self, ctx: RolloutContext) -> RolloutResult:
                return ctx.complete([])

    with pytest.raises(TypeError, match="non-empty string"):
        class Blank(RolloutAgentLoop):  # noqa: F841
            name = " "

    class AbstractBase(RolloutAgentLoop):  # no name needed while abstract
        def get_tools(self, request: RolloutRequest) -> list[dict[str, Any]]:
            return []

    assert AbstractBase.__abstractmethods__ == frozenset({"run"})


def test_request_validation() -> None:
    with pytest.raises(ValidationError, match="blank"):
        RolloutRequest(rollout_id="   ", server_url="http://c")
    with pytest.raises(ValidationError, match="http"):
        RolloutRequest(rollout_id="r", server_url="localhost:9000")
    with pytest.raises(ValidationError):
        RolloutRequest(rollout_id="r", server_url="http://c:notaport")
    with pytest.raises(ValidationError):
        RolloutRequest(rollout_id="x" * 257, server_url="http://c")
    req = RolloutRequest(rollout_id="r", server_url="http://c:80/")
    assert req.server_url == "http://c:80"
    assert (req.max_turns, req.max_tokens_total) == (10, 8192)
    assert req.dedup_key == "r"
    assert RolloutRequest(rollout_id="r", server_url="http://c", idempotency_key="k").dedup_key == "k"


def test_normalize_tools() -> None:
    assert normalize_tools([]) == []
    with pytest.raises(TypeError, match="returned None"):
        normalize_tools(None)
    with pytest.raises(TypeError, match="list"):
        normalize_tools({"type": "function"})
    with pytest.raises(TypeError, match=r"get_tools\(\)\[1\]"):
        normalize_tools([{}, "add"])
    with pytest.raises(TypeError, match="plain JSON"):
        normalize_tools([{"f": object()}])


async def test_chat_sends_params_tools_and_overrides() -> None:
    chat = Scripted({"role": "assistant", "content": "done"})
    ctx = RolloutContext(request(completion_params={"temperature": 0.2, "stop": ["x"]}),
                         [{"type": "function", "function": {"name": "f"}}], chat)
    result = await ctx.chat([{"role": "user", "content": "q"}], temperature=0.9)
    assert result.content == "done"
    _messages, params = chat.calls[0]
    assert params["temperature"] == 0.9 and params["stop"] == ["x"]
    assert params["tools"][0]["function"]["name"] == "f"
    assert "top_p" not in params  # unset params are not sent
    assert ctx.metrics.num_llm_calls == 1 and ctx.metrics.prompt_tokens == 10


async def test_max_turns_stops_a_loop_that_never_ends() -> None:
    chat = Scripted(TOOL)
    result = await execute_rollout(Looping(), request(max_turns=4), [], chat)
    assert result.status is RolloutStatus.COMPLETED
    assert result.finish_reason == "max_turns"
    assert len(chat.calls) == 4
    assert result.metrics is not None and result.metrics.num_llm_calls == 4
    # the refused call's history: prompt + 4 x (assistant, tool)
    assert len(result.final_messages) == 1 + 4 * 2


async def test_max_tokens_total_stops_the_loop() -> None:
    chat = Scripted(TOOL, tokens=50)
    result = await execute_rollout(Looping(), request(max_turns=100, max_tokens_total=100), [], chat)
    assert result.finish_reason == "max_tokens"
    # call 1: 1 message x 50 + 2 = 52 tokens; call 2: 3 messages -> 152 >= 100: no third call
    assert len(chat.calls) == 2
    assert result.metrics is not None and result.metrics.max_context_tokens == 152


async def test_a_loop_that_catches_the_limit_is_still_marked_truncated() -> None:
    async def body(ctx: RolloutContext) -> RolloutResult:
        messages = list(ctx.request.messages)
        try:
            while True:
                messages.append((await ctx.chat(messages)).message)
        except Exception:
            return ctx.complete(messages)

    result = await execute_rollout(Looping(body), request(max_turns=2), [], Scripted(TOOL))
    assert result.status is RolloutStatus.COMPLETED and result.finish_reason == "max_turns"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (lambda ctx: (_ for _ in ()).throw(KeyError("boom")), "agent loop raised KeyError"),
        (lambda ctx: asyncio.sleep(0, result={"not": "a result"}), "returned dict"),
        (lambda ctx: ctx.chat([]), "returned ChatResult"),
    ],
)
async def test_failures_become_error_results(body: Any, expected: str) -> None:
    async def run(ctx: RolloutContext) -> Any:
        out = body(ctx)
        return await out if asyncio.iscoroutine(out) else out

    result = await execute_rollout(Looping(run), request(), [], Scripted({"role": "assistant", "content": "x"}))
    assert result.status is RolloutStatus.ERROR
    assert result.finish_reason == "error"
    assert expected in (result.error_message or "")


async def test_llm_failure_and_timeout_and_bad_reward() -> None:
    failing = Scripted(PolicyCallError("503 forever", status_code=503))
    result = await execute_rollout(Looping(), request(), [], failing)
    assert result.status is RolloutStatus.ERROR
    assert result.error_message == "LLM call failed: 503 forever"

    async def slow(ctx: RolloutContext) -> RolloutResult:
        await asyncio.sleep(10)
        raise AssertionError("unreachable")

    result = await execute_rollout(Looping(slow), request(), [], Scripted(TOOL), timeout_s=0.05)
    assert result.error_message == "agent loop timed out after 0.05 s"

    async def nan_reward(ctx: RolloutContext) -> RolloutResult:
        return ctx.complete([], reward=float("nan"))

    result = await execute_rollout(Looping(nan_reward), request(), [], Scripted(TOOL))
    assert result.status is RolloutStatus.ERROR and "ValidationError" in (result.error_message or "")


async def test_non_json_messages_are_reported() -> None:
    async def weird(ctx: RolloutContext) -> RolloutResult:
        return ctx.complete([{"role": "assistant", "content": object()}])

    result = await execute_rollout(Looping(weird), request(), [], Scripted(TOOL))
    assert result.status is RolloutStatus.ERROR
    assert "not plain JSON" in (result.error_message or "")


async def test_error_keeps_the_last_messages_and_metrics() -> None:
    async def fails_after_a_call(ctx: RolloutContext) -> RolloutResult:
        await ctx.chat(list(ctx.request.messages))
        ctx.record_tool_call(latency_ms=3.0)
        return ctx.error("tool crashed")

    result = await execute_rollout(Looping(fails_after_a_call), request(), [],
                                   Scripted({"role": "assistant", "content": "a"}))
    assert result.status is RolloutStatus.ERROR and result.error_message == "tool crashed"
    assert [m["role"] for m in result.final_messages] == ["user", "assistant"]
    assert result.metrics is not None
    assert result.metrics.num_tool_calls == 1 and result.metrics.tool_latency_ms == 3.0
    assert result.metrics.total_latency_ms >= result.metrics.llm_latency_ms
