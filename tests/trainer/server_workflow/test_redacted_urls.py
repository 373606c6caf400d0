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


def test_failure_examples_never_quote_a_url_credential() -> None:
    """Whatever a rollout's error quotes (an HTTP client's message), failures.jsonl, the
    status error and train.log get it with the URL redacted."""
    from osmosis_ai.rollout import ErrorCategory, SampleError, SampleStatus
    from osmosis_ai.rollout.running import RolloutOutcome
    from osmosis_trainer.loop._rollouts import StepRollouts
    from osmosis_trainer.loop._source import GatewayRolloutSource

    error = SampleError(category=ErrorCategory.HTTP_ERROR, message=f"ConnectError: {URL}")
    outcome = RolloutOutcome(
        rollout_id="r1", row_index=0, sample_index=0, status=SampleStatus.FAILED, error=error
    )
    out = StepRollouts()
    GatewayRolloutSource._add_outcome(None, out, 0, outcome)  # type: ignore[arg-type]
    [example] = out.failure_examples
    assert "127.0.0.1:9/base" in example and PASSWORD not in example and TOKEN not in example
