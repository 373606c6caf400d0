"""What a scripted engine answers: replies, tool calls and HTTP failures, and the request a
script callable sees (see :class:`~osmosis_ai.testing.ScriptedEngine`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from osmosis_ai.serving import GenerationRequest

__all__ = [
    "FakeReply",
    "FakeRequest",
    "HTTPFailure",
    "Script",
    "ScriptItem",
    "http_error",
    "rate_limited",
    "reply",
    "text",
    "tool_call",
]


@dataclass(frozen=True)
class FakeReply:
    """One scripted assistant reply: optional text, then zero or more tool calls.

    ``finish_reason`` defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``.
    """

    content: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    finish_reason: str | None = None

    @property
    def finish(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


@dataclass(frozen=True)
class HTTPFailure:
    """A scripted HTTP error answer (429 by default), e.g. the gateway swapping weights."""

    status: int = 429
    retry_after: float | None = 0.0
    message: str = "rate limited (scripted by FakeOpenAIServer)"


@dataclass(frozen=True)
class FakeRequest:
    """One chat-completions request as the script callable sees it.

    Attributes:
        rollout_id: from the scoped URL (``""`` for the unscoped ``/v1`` route).
        sample_id: from the scoped URL (``"main"`` for the unscoped route).
        index: how many requests this ``(rollout_id, sample_id)`` (with ``per_sample=False``:
            the engine) received before this one.
        body: the JSON body as sent.
    """

    rollout_id: str
    sample_id: str
    index: int
    body: dict[str, Any] = field(repr=False)
    generation: GenerationRequest | None = field(default=None, repr=False, compare=False)
    """The engine request itself (sampling parameters, ids, ...)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools") or [])

    @property
    def tool_results(self) -> list[str]:
        """Contents of the ``tool`` messages in the request, in order."""
        return [content_text(m.get("content")) for m in self.messages if m.get("role") == "tool"]

    @property
    def new_tool_results(self) -> list[str]:
        """Contents of the ``tool`` messages after the last ``user`` message (this turn's)."""
        results: list[str] = []
        for message in self.messages:
            if message.get("role") == "user":
                results = []
            elif message.get("role") == "tool":
                results.append(content_text(message.get("content")))
        return results

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return content_text(message.get("content"))
        return ""


ScriptItem = str | FakeReply | HTTPFailure | BaseException
"""A reply, an HTTP failure answered with its status, or an exception the engine raises."""
Script = Sequence[ScriptItem] | Callable[[FakeRequest], ScriptItem]


def text(content: str) -> FakeReply:
    """A plain text reply."""
    return FakeReply(content=content)


def tool_call(name: str, /, **arguments: Any) -> FakeReply:
    """A reply holding one tool call ``name(**arguments)``."""
    return FakeReply(tool_calls=((name, arguments),))


def reply(content: str = "", tool_calls: Sequence[tuple[str, dict[str, Any]]] = ()) -> FakeReply:
    """A reply with text and several (parallel) tool calls."""
    return FakeReply(content=content, tool_calls=tuple(tool_calls))


def rate_limited(retry_after: float | None = 0.0) -> HTTPFailure:
    """A 429 answer with a ``Retry-After`` header (seconds); ``None`` sends no header."""
    return HTTPFailure(status=429, retry_after=retry_after)


def http_error(status: int, message: str = "scripted error") -> HTTPFailure:
    """Any other HTTP error answer."""
    return HTTPFailure(status=status, retry_after=None, message=message)


def content_text(content: Any) -> str:
    """The text of a chat ``content`` field (a string or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""
