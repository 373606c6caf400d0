"""An in-process :class:`~osmosis_ai.rollout.PolicyEndpoint` for unit tests of the runner.

It serves no HTTP: routes point at an unreachable host. Tests (or the workflow under test)
record calls on it with :meth:`RecordingEndpoint.record`, and the runner collects them like it
collects the gateway's. Use ``FakeOpenAIServer`` when the workflow makes real HTTP calls.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from osmosis_ai.rollout._types import LLMCall, Message
from osmosis_ai.rollout.scope import PolicyRoute

__all__ = ["RecordingEndpoint"]


class RecordingEndpoint:
    """A policy endpoint that only records: ``route()`` builds gateway-shaped URLs
    (``{base_url}/rollouts/{rid}/samples/{sid}/v1``) and ``collect()`` pops what was recorded.

    Attributes:
        routes: every ``(rollout_id, sample_id)`` a route was asked for, in order.
        collected: every rollout id that was collected, in order.
    """

    def __init__(self, base_url: str = "http://osmosis-endpoint.invalid") -> None:
        self.base_url = base_url.rstrip("/")
        self._calls: dict[str, dict[str, list[LLMCall]]] = {}
        self.routes: list[tuple[str, str]] = []
        self.collected: list[str] = []

    def route(self, rollout_id: str, sample_id: str) -> PolicyRoute:
        self.routes.append((rollout_id, sample_id))
        return PolicyRoute(base_url=f"{self.base_url}/rollouts/{rollout_id}/samples/{sample_id}/v1")

    async def collect(self, rollout_id: str) -> dict[str, list[LLMCall]]:
        self.collected.append(rollout_id)
        return self._calls.pop(rollout_id, {})

    def pending(self) -> dict[str, dict[str, list[LLMCall]]]:
        """Calls recorded but not collected yet, by rollout id then sample id."""
        return {rid: {sid: list(c) for sid, c in by.items()} for rid, by in self._calls.items()}

    def record(
        self,
        rollout_id: str,
        sample_id: str,
        request_messages: list[Message],
        response: str | Message,
        *,
        token_ids: bool = True,
        **fields: Any,
    ) -> LLMCall:
        """Record one policy call as the gateway would (with fake token data by default)."""
        message = {"role": "assistant", "content": response} if isinstance(response, str) else response
        content = str(message.get("content") or "")
        tokens: dict[str, Any] = {}
        if token_ids:
            prompt_ids = [len(str(m.get("content", ""))) % 97 for m in request_messages]
            completion_ids = [ord(ch) % 251 for ch in content] or [0]
            tokens = {
                "prompt_token_ids": prompt_ids,
                "completion_token_ids": completion_ids,
                "logprobs": [-0.5] * len(completion_ids),
            }
        call = LLMCall(
            call_id=f"call-{uuid.uuid4().hex[:12]}",
            rollout_id=rollout_id,
            sample_id=sample_id,
            request_messages=list(request_messages),
            response_message=message,
            finish_reason=str(fields.pop("finish_reason", "stop")),
            started_at=time.time(),
            **tokens,
            **fields,
        )
        self._calls.setdefault(rollout_id, {}).setdefault(sample_id, []).append(call)
        return call
