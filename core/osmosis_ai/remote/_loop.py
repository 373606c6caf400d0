"""The user's side of a remote rollout: :class:`RolloutAgentLoop` and :class:`RolloutContext`."""

from __future__ import annotations

import inspect
import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from osmosis_ai.chat import ChatResult, Message
from osmosis_ai.errors import OsmosisError
from osmosis_ai.remote._protocol import (
    RolloutMetrics,
    RolloutRequest,
    RolloutResult,
    RolloutStatus,
)

__all__ = [
    "ChatFn",
    "EventSink",
    "RolloutAgentLoop",
    "RolloutContext",
    "RolloutLimitExceeded",
    "normalize_tools",
]

ChatFn = Callable[[list[Message], dict[str, Any]], Awaitable[ChatResult]]
"""How a context reaches the LLM: ``await chat_fn(messages, params) -> ChatResult``.

``params`` holds the completion parameters (``temperature``, ``max_tokens``, ``tools`` ...)."""


class EventSink(Protocol):
    """Receives the trace events of one rollout (``--log DIR`` writes them as JSON lines)."""

    def __call__(self, event_type: str, data: dict[str, Any]) -> None: ...


class RolloutLimitExceeded(OsmosisError):
    """Raised by ``ctx.chat`` when the rollout used up ``max_turns`` or ``max_tokens_total``.

    The server turns it into a COMPLETED result with ``finish_reason`` ``"max_turns"`` or
    ``"max_tokens"`` and the messages of the refused call; loops need not catch it.
    """

    def __init__(self, reason: str, messages: list[Message], detail: str) -> None:
        self.reason = reason
        self.messages = messages
        super().__init__(detail)


def normalize_tools(tools: Any) -> list[dict[str, Any]]:
    """Turn ``get_tools()``'s answer into plain JSON dicts (pydantic models are dumped).

    Raises:
        TypeError: ``tools`` is not a list of dicts/models, or is not JSON-serialisable.
    """
    if tools is None:
        raise TypeError("get_tools() returned None; return a list of tool schemas ([] for none)")
    if not isinstance(tools, list | tuple):
        raise TypeError(f"get_tools() must return a list of tool schemas, not {type(tools).__name__}")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if isinstance(tool, BaseModel):
            tool = tool.model_dump(exclude_none=True)
        if not isinstance(tool, dict):
            raise TypeError(f"get_tools()[{i}] is a {type(tool).__name__}; each tool must be a dict")
        out.append(tool)
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"get_tools() returned tools that are not plain JSON: {exc}") from exc
    return out


class RolloutContext:
    """What an agent loop gets for one rollout.

    Attributes:
        request: the init request (``messages``, ``completion_params``, ``max_turns``,
            ``metadata`` ...).
        tools: the tools ``get_tools`` returned for this request; sent with every ``chat`` call
            unless the call passes its own ``tools``.
        metrics: counters kept as the loop runs (LLM calls, tokens, latencies).
    """

    def __init__(
        self,
        request: RolloutRequest,
        tools: list[dict[str, Any]],
        chat_fn: ChatFn,
        *,
        events: EventSink | None = None,
    ) -> None:
        self.request = request
        self.tools = tools
        self.metrics = RolloutMetrics()
        self.last_messages: list[Message] = list(request.messages)
        self.limit_reason: str | None = None
        self._chat_fn = chat_fn
        self._events = events
        self._last_context_tokens = 0
        self._started = time.perf_counter()

    @property
    def rollout_id(self) -> str:
        return self.request.rollout_id

    async def chat(self, messages: list[Message], **params: Any) -> ChatResult:
        """Call the training cluster's LLM once with the full history ``messages``.

        Keyword arguments override ``request.completion_params`` (``temperature``,
        ``max_tokens``, ``stop``, ``tools`` ...).

        Raises:
            RolloutLimitExceeded: ``max_turns`` calls were already made, or the last call
                reached ``max_tokens_total``; the rollout then ends as truncated.
            osmosis_ai.errors.PolicyCallError: the LLM call failed after its retries.
        """
        messages = list(messages)
        self._check_limits(messages)
        body: dict[str, Any] = self.request.completion_params.model_dump(exclude_none=True)
        if self.tools:
            body["tools"] = self.tools
        body.update(params)
        self.log_event("llm_request", turn=self.metrics.num_llm_calls + 1, messages=messages)
        t0 = time.perf_counter()
        result = await self._chat_fn(messages, body)
        latency = (time.perf_counter() - t0) * 1000.0
        self._account(result, latency)
        self.last_messages = [*messages, result.message]
        self.log_event(
            "llm_response", message=result.message, finish_reason=result.finish_reason,
            usage=result.usage, latency_ms=round(latency, 3),
        )
        return result

    def _check_limits(self, messages: list[Message]) -> None:
        req = self.request
        if self.metrics.num_llm_calls >= req.max_turns:
            self.limit_reason = "max_turns"
            raise RolloutLimitExceeded(
                "max_turns", messages,
                f"rollout {req.rollout_id} made {req.max_turns} LLM calls (max_turns)",
            )
        if self._last_context_tokens >= req.max_tokens_total:
            self.limit_reason = "max_tokens"
            raise RolloutLimitExceeded(
                "max_tokens", messages,
                f"rollout {req.rollout_id} reached {self._last_context_tokens} tokens "
                f"(max_tokens_total={req.max_tokens_total})",
            )

    def _account(self, result: ChatResult, latency_ms: float) -> None:
        m = self.metrics
        prompt = int(result.usage.get("prompt_tokens", 0) or 0)
        completion = int(result.usage.get("completion_tokens", 0) or 0)
        m.num_llm_calls += 1
        m.llm_latency_ms += latency_ms
        m.prompt_tokens += prompt
        m.response_tokens += completion
        self._last_context_tokens = prompt + completion
        m.max_context_tokens = max(m.max_context_tokens, self._last_context_tokens)

    def record_tool_call(self, latency_ms: float = 0.0, **data: Any) -> None:
        """Count one tool call (and its latency) in the metrics; ``data`` goes to the trace."""
        self.metrics.num_tool_calls += 1
        if math.isfinite(latency_ms) and latency_ms > 0:
            self.metrics.tool_latency_ms += latency_ms
        self.log_event("tool_call", latency_ms=latency_ms, **data)

    def log_event(self, event_type: str, **data: Any) -> None:
        """Append an event to this rollout's trace (written only with ``osmosis serve --log``)."""
        if self._events is not None:
            self._events(event_type, data)

    def complete(
        self,
        final_messages: list[Message],
        finish_reason: str = "stop",
        reward: float | None = None,
    ) -> RolloutResult:
        """A COMPLETED result with the final history (and the reward, if the loop computes one)."""
        return RolloutResult(
            status=RolloutStatus.COMPLETED,
            final_messages=list(final_messages),
            finish_reason=finish_reason,
            reward=reward,
            metrics=self.finish_metrics(),
        )

    def error(self, error_message: str, final_messages: list[Message] | None = None) -> RolloutResult:
        """An ERROR result: the rollout failed for ``error_message`` (a failure, not reward 0)."""
        return RolloutResult(
            status=RolloutStatus.ERROR,
            final_messages=list(final_messages if final_messages is not None else self.last_messages),
            finish_reason="error",
            error_message=error_message,
            metrics=self.finish_metrics(),
        )

    def finish_metrics(self) -> RolloutMetrics:
        """A copy of the metrics with ``total_latency_ms`` set to the time since the start."""
        total = (time.perf_counter() - self._started) * 1000.0
        return self.metrics.model_copy(update={"total_latency_ms": total})


class RolloutAgentLoop(ABC):
    """An agent loop served by ``osmosis serve`` / :func:`create_app`.

    Subclasses set the class attribute ``name`` and implement :meth:`get_tools` and
    :meth:`run`. One instance serves every rollout, so keep per-rollout state in ``run``.

    Example::

        class Calculator(RolloutAgentLoop):
            name = "calculator"

            def get_tools(self, request):
                return TOOLS

            async def run(self, ctx):
                messages = list(ctx.request.messages)
                for _ in range(ctx.request.max_turns):
                    result = await ctx.chat(messages)
                    messages.append(result.message)
                    if not result.has_tool_calls:
                        break
                    ...  # run the tools, append their results
                return ctx.complete(messages)
    """

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        concrete = not any(
            getattr(getattr(cls, m, None), "__isabstractmethod__", False)
            for m in ("get_tools", "run")
        )
        name = getattr(cls, "name", None)
        if concrete and name is None:
            raise TypeError(
                f"{cls.__qualname__} must set a class attribute 'name', "
                f'e.g. name = "{cls.__name__.lower()}"'
            )
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TypeError(f"{cls.__qualname__}.name must be a non-empty string, got {name!r}")

    @abstractmethod
    def get_tools(
        self, request: RolloutRequest
    ) -> list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]:
        """The OpenAI function-tool schemas offered for ``request`` (called once per init).

        May also be ``async``. Keep it fast: it runs while the init request waits.
        """

    @abstractmethod
    async def run(self, ctx: RolloutContext) -> RolloutResult:
        """Run the loop; return ``ctx.complete(messages)`` or ``ctx.error(message)``.

        Messages must only ever be appended to: the trainer matches each call's prompt against
        the previous one.
        """


async def resolve_tools(loop: RolloutAgentLoop, request: RolloutRequest) -> list[dict[str, Any]]:
    """Call ``loop.get_tools(request)`` (sync or async) and normalise the answer."""
    tools: Any = loop.get_tools(request)
    if inspect.isawaitable(tools):
        tools = await tools
    return normalize_tools(tools)
