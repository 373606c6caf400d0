"""OpenAI chat-completions wire format: request validation, replies, SSE chunks, error bodies."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from osmosis_ai.serving._engine import GenerationResult

__all__ = [
    "ChatCompletionRequest",
    "completion_body",
    "error_body",
    "sse_chunks",
    "validation_message",
]


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """The fields of ``POST /v1/chat/completions`` the gateway reads; others are ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    return_token_ids: bool | None = None


def validation_message(exc: ValidationError) -> tuple[str, str | None]:
    """A one-line message and the offending parameter path for the first validation error."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    extra = f" ({len(exc.errors()) - 1} more problems)" if len(exc.errors()) > 1 else ""
    return f"{loc or 'body'}: {err.get('msg', 'invalid value')}{extra}", loc or None


def error_body(
    message: str, type_: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _usage(result: GenerationResult) -> dict[str, int]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


def _logprobs_block(result: GenerationResult) -> dict[str, Any] | None:
    if result.logprobs is None or result.completion_token_ids is None:
        return None
    # Token strings are given as "token_id:N" (vLLM's return_tokens_as_token_ids convention):
    # exact, and free of detokenisation ambiguity.
    return {
        "content": [
            {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(result.completion_token_ids, result.logprobs, strict=True)
        ]
    }


def completion_body(
    call_id: str,
    created: int,
    model: str,
    result: GenerationResult,
    *,
    logprobs: bool,
    token_ids: bool,
) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": result.message,
        "finish_reason": result.finish_reason,
        "logprobs": _logprobs_block(result) if logprobs else None,
    }
    body: dict[str, Any] = {
        "id": call_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": _usage(result),
    }
    if token_ids:
        body["prompt_token_ids"] = result.prompt_token_ids
        choice["token_ids"] = result.completion_token_ids
    return body


def _chunk(
    call_id: str,
    created: int,
    model: str,
    delta: dict[str, Any],
    top: dict[str, Any] | None = None,
    **choice: Any,
) -> str:
    payload = {
        "id": call_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": None, **choice}],
        **(top or {}),
    }
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def sse_chunks(
    call_id: str,
    created: int,
    model: str,
    result: GenerationResult,
    *,
    include_usage: bool,
    token_ids: bool,
) -> Iterator[str]:
    """The SSE events of a streamed reply to a generation that already finished.

    With ``token_ids``, the first chunk carries ``prompt_token_ids`` and the last one the
    completion's ``token_ids``, as vLLM streams them.
    """
    top = {"prompt_token_ids": result.prompt_token_ids} if token_ids else None
    yield _chunk(call_id, created, model, {"role": "assistant", "content": ""}, top)
    content = result.message.get("content")
    if content:
        yield _chunk(call_id, created, model, {"content": content})
    for i, tc in enumerate(result.message.get("tool_calls") or []):
        yield _chunk(call_id, created, model, {"tool_calls": [{"index": i, **tc}]})
    final: dict[str, Any] = {"finish_reason": result.finish_reason}
    if token_ids:
        final["token_ids"] = result.completion_token_ids
    yield _chunk(call_id, created, model, {}, **final)
    if include_usage:
        usage = {
            "id": call_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": _usage(result),
        }
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"
