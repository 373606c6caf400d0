"""ScriptedEngine: an inference engine that answers from a script, with fake token data.

It is what ``FakeOpenAIServer`` serves behind the real policy gateway, so tests exercise the
gateway's own routes, validation, streaming and recording; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from typing import Any

from osmosis_ai.rollout._types import Message, ToolCall
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID
from osmosis_ai.serving import EngineError, FinishReason, GenerationRequest, GenerationResult
from osmosis_ai.testing._script import (
    EOS_ID,
    FakeReply,
    FakeRequest,
    HTTPFailure,
    Script,
    ScriptItem,
    fake_logprob,
    render_completion,
    render_prompt,
    tokenize,
)

__all__ = ["ScriptedEngine"]


class ScriptedEngine:
    """An :class:`~osmosis_ai.serving.InferenceEngine` whose replies come from a script.

    A sequence script is walked separately by every ``(rollout_id, sample_id)``, so concurrent
    rollouts get deterministic answers; a callable gets a :class:`FakeRequest`. Token ids come
    from a deterministic tokenizer over a ChatML rendering, so a turn's prompt extends the
    previous turn's prompt + completion whenever the client replays the history verbatim.

    Args:
        script: ``str`` / :class:`FakeReply` replies, :class:`HTTPFailure` answers, or a
            callable ``(FakeRequest) -> item``. Running past the end of a sample's script, or a
            callable that raises, answers HTTP 400 (not retried), so a test fails loudly.
        latency_s: simulated generation time per request.
    """

    name = "scripted"
    provides_token_ids = True

    def __init__(self, script: Script = (), *, latency_s: float = 0.0) -> None:
        self.script = script
        self.latency_s = latency_s
        self.requests: list[FakeRequest] = []
        """Every request received (answered or failed), in arrival order."""
        self.errors: list[Exception] = []
        """Exceptions raised by a script callable (each answered with HTTP 400)."""
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str], int] = {}
        self._fail_next: list[HTTPFailure] = []

    @property
    def policy_version(self) -> int:
        return 0

    def fail_next(self, failures: list[HTTPFailure]) -> None:
        """Answer the next requests (any sample) with these failures, in order."""
        with self._lock:
            self._fail_next.extend(failures)

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        request, item = self._next_item(req)
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        if isinstance(item, HTTPFailure):
            raise EngineError(
                item.message,
                status_code=item.status,
                code="rate_limit_exceeded" if item.status == 429 else "scripted_error",
                retry_after_s=item.retry_after,
            )
        return _result(request, FakeReply(content=item) if isinstance(item, str) else item)

    def _next_item(self, req: GenerationRequest) -> tuple[FakeRequest, ScriptItem]:
        rollout_id, sample_id = req.rollout_id or "", req.sample_id or DEFAULT_SAMPLE_ID
        body = req.client_body if req.client_body is not None else _body_of(req)
        with self._lock:
            index = self._counters.get((rollout_id, sample_id), 0)
            request = FakeRequest(rollout_id, sample_id, index, body)
            self.requests.append(request)
            if self._fail_next:  # injected failures do not advance the sample's script
                return request, self._fail_next.pop(0)
            self._counters[(rollout_id, sample_id)] = index + 1
        if callable(self.script):
            try:
                return request, self.script(request)
            except Exception as exc:  # a bug in the test's script: fail the call loudly, fast
                self.errors.append(exc)
                return request, HTTPFailure(
                    400, None, f"the test script raised {type(exc).__name__}: {exc}"
                )
        if index < len(self.script):
            return request, self.script[index]
        return request, HTTPFailure(
            400,
            None,
            f"script exhausted: rollout {rollout_id!r} sample {sample_id!r} made request "
            f"#{index + 1} but the script has {len(self.script)} item(s)",
        )

    async def load_adapter(self, path: str, version: int) -> None:
        raise EngineError("a scripted engine has no weights", status_code=400)

    async def close(self) -> None:
        return None


def _body_of(req: GenerationRequest) -> dict[str, Any]:
    """The request as a client body (when the gateway did not keep the one sent)."""
    body: dict[str, Any] = {"messages": req.messages, "temperature": req.temperature}
    for key in ("tools", "tool_choice", "max_tokens", "stop", "seed"):
        if (value := getattr(req, key)) is not None:
            body[key] = value
    return body


def _result(request: FakeRequest, reply: FakeReply) -> GenerationResult:
    calls = [
        ToolCall(id=f"call_{uuid.uuid4().hex[:16]}", name=name, arguments=json.dumps(args, ensure_ascii=False))
        for name, args in reply.tool_calls
    ]
    message: Message = {"role": "assistant", "content": reply.content or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    prompt_ids = tokenize(render_prompt(request.messages, request.tools))
    completion_ids = tokenize(
        render_completion(reply.content, [(c.id, c.name, c.arguments) for c in calls])
    ) + [EOS_ID]
    finish: FinishReason = reply.finish  # type: ignore[assignment]
    return GenerationResult(
        message=message,
        text=reply.content,
        finish_reason=finish,
        tool_calls=calls,
        prompt_token_ids=prompt_ids,
        completion_token_ids=completion_ids,
        logprobs=[fake_logprob(t) for t in completion_ids],
        prompt_tokens=len(prompt_ids),
        completion_tokens=len(completion_ids),
    )
