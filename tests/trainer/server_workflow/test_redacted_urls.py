"""The remote bridge names the rollout server without its credentials in every message that
lands in failures.jsonl, the status error, train.log and the dashboard; a token in the query
of ``[remote] server_url`` still reaches the server (issue 41 §4)."""

from __future__ import annotations

import httpx
import pytest

from osmosis_ai.errors import PolicyCallError
from osmosis_ai.remote import RolloutRequest
from osmosis_trainer.server_workflow import RemoteCallbacks
from osmosis_trainer.server_workflow._workflow import RemoteRolloutConfig, _post_init

PASSWORD = "pw-planted-4d2a"
TOKEN = "tok-planted-e5f0"
URL = f"http://alice:{PASSWORD}@127.0.0.1:9/base?access_token={TOKEN}"


def _cfg() -> RemoteRolloutConfig:
    return RemoteRolloutConfig(
        server_url=URL, callbacks=RemoteCallbacks(api_key="k"), init_retries=0
    )


def _request() -> RolloutRequest:
    return RolloutRequest(
        rollout_id="r1",
        server_url="http://127.0.0.1:8/x",
        messages=[{"role": "user", "content": "hi"}],
        completion_params={},
    )


@pytest.mark.parametrize("answer", ["unreachable", "http 500"])
async def test_init_failures_name_the_server_redacted(answer: str) -> None:
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        if answer == "unreachable":
            raise httpx.ConnectError(f"cannot connect to {request.url}", request=request)
        return httpx.Response(500, text="boom")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        with pytest.raises(PolicyCallError) as exc:
            await _post_init(http, _cfg(), _request())
    message = str(exc.value)
    assert "127.0.0.1:9/base/v1/rollout/init" in message
    assert PASSWORD not in message and TOKEN not in message, message
    # The server itself still gets the path under server_url and its query.
    assert seen[0].path == "/base/v1/rollout/init"
    assert seen[0].params["access_token"] == TOKEN
