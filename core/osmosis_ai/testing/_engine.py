"""ScriptedEngine: the one scripted inference engine of the test doubles.

It is what ``FakeOpenAIServer`` serves behind the real policy gateway, and what gateway,
trajectory and training tests put behind a ``PolicyGateway`` of their own: only the model is
scripted, so the gateway's routes, validation, streaming, recording and tool-call parsing are
the real ones.

Token data is fake but consistent: prompts are rendered with a ChatML template and encoded by
:class:`FakeTokenizer`, which is exactly invertible, so multi-turn trajectories built from the
calls merge the way a prefix-stable real model's would. A reply is rendered to text (tool calls
as Hermes blocks), truncated at the request's ``max_tokens`` and parsed back, as a real engine's.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID
from osmosis_ai.serving import (
    ContextLengthError,
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
)
from osmosis_ai.serving.toolcalls import assistant_message, render_tool_call
from osmosis_ai.testing._script import FakeReply, FakeRequest, HTTPFailure, Script, ScriptItem
from osmosis_ai.testing._tokenizer import FakeTokenizer

__all__ = ["ScriptedEngine"]


class ScriptedEngine:
    """An :class:`~osmosis_ai.serving.InferenceEngine` whose replies come from a script.

    Args:
        script: ``str`` / :class:`FakeReply` replies, :class:`HTTPFailure` answers, exceptions
            to raise, or a callable ``(FakeRequest) -> item`` called for every request (its
            ``generation`` is the engine request). A callable that raises answers HTTP 400
            (recorded in :attr:`errors`), so a broken test script fails loudly and fast.
        per_sample: walk a sequence script separately for every ``(rollout_id, sample_id)``
            (concurrent rollouts get deterministic answers); ``False``: one walk in arrival
            order.
        cycle: start the script over when it runs out, instead of answering HTTP 400.
        latency_s: simulated generation (and adapter load) time per request.
        context_window: prompts longer than this (in fake tokens) raise ContextLengthError.
        name: the engine's name; replies report ``model = f"{name}-v{policy_version}"``.
    """

    provides_token_ids = True

    def __init__(
        self,
        script: Script = (),
        *,
        per_sample: bool = True,
        cycle: bool = False,
        latency_s: float = 0.0,
        context_window: int = 1_000_000,
        name: str = "scripted",
    ) -> None:
        self.script = script
        self.per_sample = per_sample
        self.cycle = cycle
        self.latency_s = latency_s
        self.context_window = context_window
        self.name = name
        self.tokenizer = FakeTokenizer()
        self.requests: list[FakeRequest] = []
        """Every request received (answered or failed), in arrival order."""
        self.errors: list[Exception] = []
        """Exceptions raised by a script callable (each answered with HTTP 400)."""
        self.adapters: list[tuple[str, int]] = []
        """Every ``load_adapter(path, version)``, in order."""
        self.closed = False
        self._version = 0
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, str], int] = {}
        self._fail_next: list[HTTPFailure] = []

    @property
    def policy_version(self) -> int:
        return self._version

    def fail_next(self, failures: list[HTTPFailure]) -> None:
        """Answer the next requests (any sample) with these failures, in order."""
        with self._lock:
            self._fail_next.extend(failures)

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        if self.closed:
            raise EngineError("the scripted engine is closed", status_code=503)
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
        if isinstance(item, BaseException):
            raise item
        return self._result(req, FakeReply(content=item) if isinstance(item, str) else item)

    def _next_item(self, req: GenerationRequest) -> tuple[FakeRequest, ScriptItem]:
        rollout_id, sample_id = req.rollout_id or "", req.sample_id or DEFAULT_SAMPLE_ID
        key = (rollout_id, sample_id) if self.per_sample else ("", "")
        body = req.client_body if req.client_body is not None else _body_of(req)
        with self._lock:
            index = self._counters.get(key, 0)
            request = FakeRequest(rollout_id, sample_id, index, body, generation=req)
            self.requests.append(request)
            if self._fail_next:  # injected failures do not advance the script
                return request, self._fail_next.pop(0)
            self._counters[key] = index + 1
        if callable(self.script):
            try:
                return request, self.script(request)
            except Exception as exc:  # a bug in the test's script: fail the call loudly, fast
                self.errors.append(exc)
                return request, HTTPFailure(
                    400, None, f"the test script raised {type(exc).__name__}: {exc}"
                )
        if self.cycle and self.script:
            index %= len(self.script)
        if index < len(self.script):
            return request, self.script[index]
        walk = f"rollout {rollout_id!r} sample {sample_id!r}" if self.per_sample else "the engine"
        return request, HTTPFailure(
            400,
            None,
            f"script exhausted: {walk} made request #{index + 1} but the script has "
            f"{len(self.script)} item(s); add replies or pass cycle=True",
        )

    def _result(self, req: GenerationRequest, reply: FakeReply) -> GenerationResult:
        tok = self.tokenizer
        tools = None if req.tool_choice == "none" else req.tools
        prompt_ids = tok.encode(tok.render(req.messages, tools))
        if len(prompt_ids) > self.context_window:
            raise ContextLengthError(
                f"prompt has {len(prompt_ids)} tokens; the context window is {self.context_window}"
            )
        generated = reply.content + "".join(
            render_tool_call(name, json.dumps(args, ensure_ascii=False))
            for name, args in reply.tool_calls
        )
        ids = tok.encode(generated) + [tok.eos_id]
        finish: FinishReason = "stop"
        if req.max_tokens is not None and len(ids) > req.max_tokens:
            ids, finish = ids[: req.max_tokens], "length"
        out_text = tok.decode([t for t in ids if t != tok.eos_id])
        # Tool calls are parsed back as a real engine does: when the request offers tools, or
        # when the script itself answers with a call (the test meant one).
        message, calls = assistant_message(out_text, parse_tools=bool(tools or reply.tool_calls))
        if calls and finish == "stop":
            finish = "tool_calls"
        if reply.finish_reason is not None:
            finish = reply.finish_reason  # type: ignore[assignment]
        return GenerationResult(
            message=message,
            text=out_text,
            finish_reason=finish,
            tool_calls=calls,
            prompt_token_ids=prompt_ids,
            completion_token_ids=ids,
            logprobs=[_fake_logprob(t, i) for i, t in enumerate(ids)],
            model=f"{self.name}-v{self._version}",
            policy_version=self._version,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(ids),
        )

    async def load_adapter(self, path: str, version: int) -> None:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        self.adapters.append((path, version))
        self._version = version

    async def close(self) -> None:
        self.closed = True


def _fake_logprob(token_id: int, position: int) -> float:
    """A deterministic, token-dependent negative number (distinct per position)."""
    return -0.01 - ((token_id * 2654435761 + position * 40503) % 1000) / 500.0


def _body_of(req: GenerationRequest) -> dict[str, Any]:
    """The request as a client body (when the gateway did not keep the one sent)."""
    body: dict[str, Any] = {"messages": req.messages, "temperature": req.temperature}
    for key in ("tools", "tool_choice", "max_tokens", "stop", "seed"):
        if (value := getattr(req, key)) is not None:
            body[key] = value
    return body
