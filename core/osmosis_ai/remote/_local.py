"""Run an agent loop in-process over dataset rows (``osmosis test``), without a cluster.

Each row becomes a :class:`RolloutRequest` whose LLM calls go to ``server_url_for(rollout_id)``
(the policy gateway's route for that rollout); the result is what the loop returned, exactly as
the server would post it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from osmosis_ai.chat import ChatResult, Message
from osmosis_ai.remote._client import ClusterClient
from osmosis_ai.remote._execute import execute_rollout
from osmosis_ai.remote._loop import RolloutAgentLoop, resolve_tools
from osmosis_ai.remote._protocol import RolloutRequest, RolloutResult, RolloutStatus

__all__ = ["ChatHook", "LocalOutcome", "LocalRow", "QuitRequested", "build_request", "run_local_rollouts"]


class QuitRequested(BaseException):
    """Raised by a :class:`ChatHook` to stop every rollout at once (the debugger's ``q``).

    A ``BaseException`` so that the loop's own ``except Exception`` does not swallow it.
    """


class LocalRow(Protocol):
    """What a dataset row must offer (``osmosis_ai.data.DatasetRow`` does)."""

    @property
    def row_index(self) -> int: ...

    @property
    def prompt(self) -> list[Message]: ...

    @property
    def label(self) -> str | None: ...

    @property
    def metadata(self) -> dict[str, Any]: ...


class ChatHook(Protocol):
    """Called around every LLM call (the interactive debugger implements it)."""

    async def before(self, request: RolloutRequest, turn: int, messages: list[Message],
                     params: dict[str, Any]) -> None: ...

    async def after(self, request: RolloutRequest, turn: int, result: ChatResult) -> None: ...


@dataclass
class LocalOutcome:
    """One row's result."""

    row_index: int
    rollout_id: str
    label: str | None
    result: RolloutResult
    tools: list[dict[str, Any]] = field(default_factory=list)
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.result.status is RolloutStatus.COMPLETED

    def summary(self) -> dict[str, Any]:
        m = self.result.metrics
        return {
            "row_index": self.row_index,
            "rollout_id": self.rollout_id,
            "status": self.result.status.value,
            "finish_reason": self.result.finish_reason,
            "reward": self.result.reward,
            "label": self.label,
            "llm_calls": m.num_llm_calls if m else 0,
            "tool_calls": m.num_tool_calls if m else 0,
            "tokens": (m.prompt_tokens + m.response_tokens) if m else 0,
            "duration_ms": round(self.duration_ms, 1),
            "error": self.result.error_message,
        }


def build_request(row: LocalRow, rollout_id: str, server_url: str, *, api_key: str | None,
                  completion_params: dict[str, Any], max_turns: int,
                  max_tokens_total: int) -> RolloutRequest:
    """The init request a cluster would send for ``row`` (the label travels as
    ``metadata["ground_truth"]``)."""
    metadata = dict(row.metadata)
    if row.label is not None:
        metadata["ground_truth"] = row.label
    return RolloutRequest(
        rollout_id=rollout_id, server_url=server_url, messages=list(row.prompt),
        completion_params=completion_params, max_turns=max_turns,  # type: ignore[arg-type]
        max_tokens_total=max_tokens_total, metadata=metadata, api_key=api_key,
    )


async def run_local_rollouts(
    loop: RolloutAgentLoop,
    rows: Iterable[LocalRow],
    *,
    server_url_for: Callable[[str], str],
    client: ClusterClient,
    api_key: str | None = None,
    completion_params: dict[str, Any] | None = None,
    max_turns: int = 10,
    max_tokens_total: int = 8192,
    concurrency: int = 1,
    hook: ChatHook | None = None,
    after_rollout: Callable[[str], Awaitable[None]] | None = None,
    timeout_s: float | None = None,
) -> AsyncIterator[LocalOutcome]:
    """Run ``loop`` once per row, ``concurrency`` at a time; yield outcomes as they finish.

    ``after_rollout(rollout_id)`` runs when a rollout ends (e.g. to collect the gateway's
    records). With a ``hook``, rows run one at a time, in order.
    """
    params = dict(completion_params or {})
    width = 1 if hook is not None else max(1, concurrency)
    queue: asyncio.Queue[LocalOutcome] = asyncio.Queue()
    sem = asyncio.Semaphore(width)
    stamp = time.strftime("%H%M%S")

    async def one(row: LocalRow) -> None:
        async with sem:
            rid = f"test-{stamp}-{row.row_index}"
            req = build_request(row, rid, server_url_for(rid), api_key=api_key,
                                completion_params=params, max_turns=max_turns,
                                max_tokens_total=max_tokens_total)
            outcome = await _run_one(loop, req, row, client, hook, timeout_s)
            if after_rollout is not None:
                await after_rollout(rid)
            await queue.put(outcome)

    tasks: list[asyncio.Task[None]] = []
    try:
        for row in rows:
            tasks.append(asyncio.create_task(one(row)))
            if hook is not None:  # interactive: strictly one row after another
                await tasks[-1]
                yield await queue.get()
        if hook is None:
            for _ in range(len(tasks)):
                yield await queue.get()
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _run_one(loop: RolloutAgentLoop, req: RolloutRequest, row: LocalRow,
                   client: ClusterClient, hook: ChatHook | None,
                   timeout_s: float | None) -> LocalOutcome:
    t0 = time.perf_counter()
    try:
        tools = await resolve_tools(loop, req)
    except Exception as exc:
        result = RolloutResult(status=RolloutStatus.ERROR, finish_reason="error",
                               error_message=f"get_tools() raised {type(exc).__name__}: {exc}")
        return LocalOutcome(row.row_index, req.rollout_id, row.label, result)
    turn = 0

    async def chat(messages: list[Message], body: dict[str, Any]) -> ChatResult:
        nonlocal turn
        turn += 1
        if hook is not None:
            await hook.before(req, turn, messages, body)
        result = await client.chat(req.server_url, req.api_key, req.rollout_id, messages, body)
        if hook is not None:
            await hook.after(req, turn, result)
        return result

    result = await execute_rollout(loop, req, tools, chat, timeout_s=timeout_s)
    return LocalOutcome(row.row_index, req.rollout_id, row.label, result, tools,
                        (time.perf_counter() - t0) * 1000.0)
