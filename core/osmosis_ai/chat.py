"""One policy call on the wire: a chat message and a parsed chat completion.

Shared by the rollout API (``ctx.chat``) and the remote-rollout protocol (the server calling
the trainer's ``/v1/chat/completions``); both rooms import it, neither imports the other for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from osmosis_ai.errors import PolicyCallError

__all__ = ["ChatResult", "Message", "ChatToolCall", "as_message", "parse_chat_completion"]


@with_config(ConfigDict(extra="allow"))
class ChatToolCall(TypedDict, total=False):
    """A tool call of an assistant message: ``{"id", "type": "function", "function": {"name",
    "arguments"}}`` (``arguments`` a JSON string, as OpenAI sends it)."""

    id: str | None
    type: str | None
    function: dict[str, Any]


@with_config(ConfigDict(extra="allow"))
class Message(TypedDict, total=False):
    """A chat message: the OpenAI chat-completions keys typed, every key optional, and other
    keys kept (frameworks add their own: Strands content blocks, Agents SDK items). ``content``
    is a string, a list of content parts, or ``None`` (an assistant message with tool calls)."""

    role: str
    content: Any
    # None is allowed where providers send null for "absent"; validation stays as lenient as
    # the plain dicts it replaced (framework-native histories travel in this type too).
    tool_calls: list[ChatToolCall] | None
    tool_call_id: str | None
    name: str | None
    reasoning_content: str | None


def as_message(raw: Mapping[str, Any]) -> Message:
    """A copy of ``raw`` as a :class:`Message` (keys are not checked: frameworks add their own)."""
    return cast(Message, dict(raw))


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
    def tool_calls(self) -> list[ChatToolCall]:
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
        message=as_message({k: v for k, v in message.items() if v is not None or k == "content"}),
        finish_reason=str(choice.get("finish_reason") or "stop"),
        usage=dict(data.get("usage") or {}),
        token_ids=choice.get("token_ids"),
        logprobs=logprobs,
        raw=data,
    )
