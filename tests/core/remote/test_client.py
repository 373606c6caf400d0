"""ClusterClient: retry policy of LLM calls and completion callbacks (no sockets)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from osmosis_ai.errors import PolicyCallError
from osmosis_ai.remote import (
    CallbackDeliveryError,
    ClientSettings,
    ClusterClient,
    RolloutResponse,
    RolloutStatus,
)

OK = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


def client_for(answers: list[Callable[[httpx.Request], httpx.Response]], seen: list[httpx.Request],
               **settings: float) -> ClusterClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1](request)

    cfg = ClientSettings(retry_backoff_seconds=0.001, retry_backoff_max_seconds=0.01, **settings)  # type: ignore[arg-type]
    return ClusterClient(cfg, http=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


def status(code: int, body: object = None, headers: dict[str, str] | None = None) -> Callable[[httpx.Request], httpx.Response]:
    return lambda _r: httpx.Response(code, json=body if body is not None else {"error": "x"}, headers=headers)


def timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("slow", request=request)


async def test_chat_retries_5xx_and_timeouts_then_succeeds() -> None:
    seen: list[httpx.Request] = []
    client = client_for([status(500), timeout, status(503), status(200, OK)], seen)
    result = await client.chat("http://c", "k", "r1", [{"role": "user", "content": "x"}], {"temperature": 0.3})
    await client.aclose()
    assert result.content == "hi" and result.usage["prompt_tokens"] == 5
    assert len(seen) == 4
    body = json.loads(seen[0].content)
    assert body["rollout_id"] == "r1" and body["temperature"] == 0.3 and body["model"] == "default"
    assert seen[0].url == "http://c/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer k"


async def test_chat_gives_up_after_max_retries() -> None:
    seen: list[httpx.Request] = []
    client = client_for([status(502)], seen, max_retries=2)
    with pytest.raises(PolicyCallError, match=r"HTTP 502 after 3 attempt\(s\)") as info:
        await client.chat("http://c", None, "r", [], {})
    assert info.value.status_code == 502
    assert len(seen) == 3
    assert "authorization" not in seen[0].headers


async def test_chat_timeouts_exhausted_name_the_cause() -> None:
    seen: list[httpx.Request] = []
    client = client_for([timeout], seen, max_retries=1)
    with pytest.raises(PolicyCallError, match="ReadTimeout"):
        await client.chat("http://c", None, "r", [], {})
    assert len(seen) == 2


@pytest.mark.parametrize("code", [400, 401, 403, 404, 422])
async def test_chat_4xx_is_not_retried(code: int) -> None:
    seen: list[httpx.Request] = []
    client = client_for([status(code)], seen)
    with pytest.raises(PolicyCallError, match=f"HTTP {code}"):
        await client.chat("http://c", None, "r", [], {})
    assert len(seen) == 1


async def test_429_is_retried_honouring_retry_after() -> None:
    seen: list[httpx.Request] = []
    client = client_for([status(429, headers={"Retry-After": "0"}), status(200, OK)], seen)
    assert (await client.chat("http://c", None, "r", [], {})).content == "hi"
    assert len(seen) == 2


async def test_malformed_reply_is_an_error() -> None:
    seen: list[httpx.Request] = []
    client = client_for([status(200, {"nothing": True})], seen)
    with pytest.raises(PolicyCallError, match="not a chat completion"):
        await client.chat("http://c", None, "r", [], {})
    bad = client_for([lambda _r: httpx.Response(200, content=b"<html>")], [])
    with pytest.raises(PolicyCallError, match="non-JSON"):
        await bad.chat("http://c", None, "r", [], {})


async def test_completion_callback_retries_then_fails_without_retrying_4xx() -> None:
    response = RolloutResponse(rollout_id="r", status=RolloutStatus.COMPLETED, reward=0.5)
    seen: list[httpx.Request] = []
    client = client_for([status(500), timeout, status(200, {"ok": True})], seen)
    await client.complete("http://c", "k", response)
    assert len(seen) == 3
    assert json.loads(seen[0].content)["reward"] == 0.5
    assert seen[0].url == "http://c/v1/rollout/completed"
    seen.clear()
    client = client_for([status(404)], seen)
    with pytest.raises(CallbackDeliveryError, match="HTTP 404"):
        await client.complete("http://c", "k", response)
    assert len(seen) == 1
    seen.clear()
    client = client_for([status(503)], seen, completion_retries=1)
    with pytest.raises(CallbackDeliveryError, match=r"after 2 attempt\(s\)"):
        await client.complete("http://c", "k", response)
