"""Turning an OpenAI-compatible chat reply (vLLM, hosted APIs) into a GenerationResult."""

from __future__ import annotations

import logging
from typing import Any

from osmosis_ai.chat import as_message
from osmosis_ai.rollout import Message, ToolCall
from osmosis_ai.serving._engine import FinishReason, GenerationResult
from osmosis_ai.serving.toolcalls import assistant_message, new_tool_call_id

__all__ = ["result_from_openai"]

logger = logging.getLogger("osmosis")


def _finish(value: Any) -> FinishReason:
    if value in ("length", "tool_calls"):
        return value  # type: ignore[no-any-return]
    return "stop"


def _server_tool_calls(raw: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[ToolCall]]:
    wire: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for tc in raw:
        fn = tc.get("function") or {}
        call = ToolCall(
            id=str(tc.get("id") or new_tool_call_id()),
            name=str(fn.get("name") or ""),
            arguments=str(fn.get("arguments") or "{}"),
        )
        calls.append(call)
        wire.append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
        )
    return wire, calls


def result_from_openai(
    data: dict[str, Any], *, parse_tools: bool, model: str, policy_version: int | None
) -> GenerationResult:
    """Build a result from a chat-completion body; token data only when it is complete.

    Reads vLLM's ``prompt_token_ids`` / ``choices[0].token_ids`` (``return_token_ids``) and
    ``choices[0].logprobs.content[*].logprob``. Tool calls parsed by the server are kept;
    otherwise Hermes ``<tool_call>`` blocks are parsed from the text.
    """
    choice = data["choices"][0]
    raw_msg: dict[str, Any] = choice.get("message") or {}
    text = raw_msg.get("content") or ""
    message: Message
    if raw_msg.get("tool_calls"):
        wire, calls = _server_tool_calls(raw_msg["tool_calls"])
        message = as_message({"role": "assistant", "content": text or None, "tool_calls": wire})
    else:
        message, calls = assistant_message(text, parse_tools=parse_tools)
    finish = _finish(choice.get("finish_reason"))
    if calls and finish == "stop":
        finish = "tool_calls"
    prompt_ids = data.get("prompt_token_ids")
    completion_ids = choice.get("token_ids")
    logprobs = None
    lp_block = choice.get("logprobs")
    if isinstance(lp_block, dict) and isinstance(lp_block.get("content"), list):
        logprobs = [float(t.get("logprob", 0.0)) for t in lp_block["content"]]
    if completion_ids is not None and logprobs is not None and len(logprobs) != len(completion_ids):
        logger.warning(
            "server returned %d token ids but %d logprobs; recording the call without tokens",
            len(completion_ids),
            len(logprobs),
        )
        prompt_ids = completion_ids = logprobs = None
    usage = data.get("usage") or {}
    return GenerationResult(
        message=message,
        text=text,
        finish_reason=finish,
        tool_calls=calls,
        prompt_token_ids=list(prompt_ids) if prompt_ids is not None else None,
        completion_token_ids=list(completion_ids) if completion_ids is not None else None,
        logprobs=logprobs if completion_ids is not None else None,
        model=str(data.get("model") or model),
        policy_version=policy_version,
        prompt_tokens=int(usage.get("prompt_tokens") or len(prompt_ids or [])),
        completion_tokens=int(usage.get("completion_tokens") or len(completion_ids or [])),
    )
