"""A framework-free policy call: ``await ctx.chat(messages)`` within a rollout."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from osmosis_ai._http import loop_client
from osmosis_ai.chat import ChatResult, Message, parse_chat_completion
from osmosis_ai.errors import PolicyCallError
from osmosis_ai.rollout.scope import PolicyRoute

__all__ = ["chat_completion"]

_RETRY_STATUSES = {429, 502, 503, 504}


async def chat_completion(
    route: PolicyRoute,
    messages: list[Message],
    *,
    tools: list[dict[str, Any]] | None = None,
    timeout_s: float = 600.0,
    max_attempts: int = 6,
    **params: Any,
) -> ChatResult:
    """POST one non-streaming chat completion to ``route`` and parse the reply.

    429/5xx answers (the gateway answers 429 while it swaps weights) are retried honouring
    ``Retry-After``; other 4xx answers raise :class:`PolicyCallError` at once.
    """
    body: dict[str, Any] = {"model": route.model, "messages": messages, **params}
    if tools:
        body["tools"] = tools
    url = route.base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {route.api_key}"}
    # The loop's keep-alive client, not a client per call (see _http).
    client = await loop_client()

    async def post() -> _Answer:
        resp = await client.post(url, json=body, headers=headers, timeout=timeout_s)
        return _Answer(resp.status_code, resp.text, resp.headers.get("retry-after"))

    answer = await _retrying(url, max_attempts, post)
    return _parse_answer(answer)


class _Answer:
    """A reply's status, body text and ``Retry-After`` header."""

    def __init__(self, status: int, text: str, retry_after: str | None) -> None:
        self.status, self.text, self.retry_after = status, text, retry_after


async def _retrying(
    url: str, max_attempts: int, send: Callable[[], Awaitable[_Answer]]
) -> _Answer:
    """``send()`` until an answer that is not retried."""
    import asyncio

    delay = 0.2
    for attempt in range(1, max_attempts + 1):
        try:
            answer = await send()
        except httpx.TransportError as exc:
            if attempt == max_attempts:
                raise PolicyCallError(f"policy call to {url} failed: {exc!r}") from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if answer.status in _RETRY_STATUSES and attempt < max_attempts:
            await asyncio.sleep(_parse_retry_after(answer.retry_after, delay))
            delay = min(delay * 2, 5.0)
            continue
        if answer.status >= 400:
            raise PolicyCallError(
                f"policy call to {url} answered HTTP {answer.status}: {answer.text[:500]}",
                status_code=answer.status,
                body=answer.text[:2000],
            )
        return answer
    raise AssertionError("unreachable")  # pragma: no cover


def _parse_retry_after(value: str | None, default: float) -> float:
    try:
        return min(max(float(value), 0.05), 30.0) if value is not None else default
    except ValueError:
        return default


def _parse_answer(answer: _Answer) -> ChatResult:
    try:
        data = json.loads(answer.text)
    except json.JSONDecodeError as exc:
        raise PolicyCallError(f"policy reply is not JSON: {answer.text[:300]}") from exc
    return parse_chat_completion(data)
