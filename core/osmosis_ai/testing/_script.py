"""What the fake OpenAI-compatible server answers, and the fake token data it records.

Replies are scripted per sample: every ``(rollout_id, sample_id)`` walks the script on its own,
so concurrent rollouts get deterministic answers. Token ids come from a tiny deterministic
tokenizer over a ChatML rendering of the conversation, so a turn's prompt ids extend the
previous turn's prompt + completion whenever the client replays the history verbatim (as a
prefix-stable real model would).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FakeReply",
    "FakeRequest",
    "HTTPFailure",
    "Script",
    "ScriptItem",
    "fake_logprob",
    "http_error",
    "rate_limited",
    "render_prompt",
    "reply",
    "text",
    "tokenize",
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
        index: how many requests this ``(rollout_id, sample_id)`` made before this one.
        body: the JSON body as sent.
    """

    rollout_id: str
    sample_id: str
    index: int
    body: dict[str, Any] = field(repr=False)

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


ScriptItem = str | FakeReply | HTTPFailure
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


# --- fake tokens ------------------------------------------------------------------------

_SPECIAL = {"<|im_start|>": 1, "<|im_end|>": 2}
EOS_ID = _SPECIAL["<|im_end|>"]
_PIECE_RE = re.compile(r"<\|im_start\|>|<\|im_end\|>|\w+|\s+|[^\w\s]")
_VOCAB = 32000


def tokenize(rendered: str) -> list[int]:
    """Deterministic fake token ids: special tokens, words, spaces and punctuation."""
    ids: list[int] = []
    for piece in _PIECE_RE.findall(rendered):
        special = _SPECIAL.get(piece)
        ids.append(special if special is not None else 100 + zlib.crc32(piece.encode()) % _VOCAB)
    return ids


def fake_logprob(token_id: int) -> float:
    """A deterministic, plausible sampler logprob for a token id."""
    return -0.01 - (token_id % 97) / 40.0


def _render_message(message: dict[str, Any]) -> str:
    role = str(message.get("role", "user"))
    body = content_text(message.get("content"))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        body += render_tool_call(str(fn.get("name", "")), str(fn.get("arguments", "")))
    return f"<|im_start|>{role}\n{body}<|im_end|>\n"


def render_tool_call(name: str, arguments_json: str) -> str:
    """Hermes-style tool-call text, as a real chat template would render it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments_json}}}\n</tool_call>'


def render_prompt(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> str:
    """ChatML rendering of a request (tools in a leading system block), ending in the
    assistant header the completion continues."""
    head = ""
    if tools:
        head = (
            "<|im_start|>system\n# Tools\n"
            + json.dumps(list(tools), sort_keys=True)
            + "<|im_end|>\n"
        )
    return head + "".join(_render_message(m) for m in messages) + "<|im_start|>assistant\n"


def render_completion(content: str, calls: Sequence[tuple[str, str, str]]) -> str:
    """The completion text: content then tool calls (``(id, name, arguments_json)``)."""
    return content + "".join(render_tool_call(name, args) for _id, name, args in calls)
