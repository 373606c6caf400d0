"""One policy call on the wire: a chat message and a parsed chat completion.

Shared by the rollout API (``ctx.chat``) and the remote-rollout protocol (the server calling
the trainer's ``/v1/chat/completions``); both rooms import it, neither imports the other for it.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from osmosis_ai.errors import PolicyCallError

__all__ = ["ChatResult", "Message", "parse_chat_completion"]

Message = dict[str, Any]
"""A chat message (OpenAI chat-completions shape unless a framework says otherwise)."""


class ChatResult(BaseModel):
    """The result of one policy call made with ``ctx.chat(...)``."""

    message: Message
    finish_reason: str
    usage: dict[str, int] = Field(default_factory=dict)
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    raw: dict[str, Any] = Field(default_factory=dict, repr=False)

    @property
    def content(self) -> str:
        c = self.message.get("content")
        return c if isinstance(c, str) else ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)


def parse_chat_completion(data: dict[str, Any]) -> ChatResult:
    """The first choice of an OpenAI chat-completions reply; a reply of another shape is a
    :class:`PolicyCallError` quoting it."""
    try:
        choice = data["choices"][0]
        message = dict(choice["message"])
    except (KeyError, IndexError, TypeError) as exc:
        raise PolicyCallError(
            f"policy reply is not a chat completion: {json.dumps(data)[:300]}"
        ) from exc
    logprobs = None
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        logprobs = [float(t["logprob"]) for t in lp["content"]]
    message.setdefault("role", "assistant")
    return ChatResult(
        message={k: v for k, v in message.items() if v is not None or k == "content"},
        finish_reason=str(choice.get("finish_reason") or "stop"),
        usage=dict(data.get("usage") or {}),
        token_ids=choice.get("token_ids"),
        logprobs=logprobs,
        raw=data,
    )
