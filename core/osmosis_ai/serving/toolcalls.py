"""Hermes/Qwen-style tool calls: parsing them out of generated text, and rendering them back.

The model writes each call as::

    <tool_call>
    {"name": "add", "arguments": {"a": 1, "b": 2}}
    </tool_call>

Several blocks per reply are allowed. A block whose JSON does not parse (or lacks a name) is
kept as text in the message content: it is the model's real mistake, and silently repairing it
would hide it from training.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from osmosis_ai.rollout import Message, ToolCall

__all__ = [
    "assistant_message",
    "new_tool_call_id",
    "parse_tool_calls",
    "render_tool_call",
    "tools_system_block",
]

_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_ARGS_KEY_RE = re.compile(r'"arguments"\s*:\s*')
_DECODER = json.JSONDecoder()


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _raw_arguments(body: str, parsed: dict[str, Any]) -> str:
    """The arguments exactly as the model wrote them (so a client echoing them back re-renders
    the same text), falling back to canonical JSON when the raw span cannot be located."""
    args = parsed.get("arguments", {})
    if isinstance(args, str):
        return args
    for match in _ARGS_KEY_RE.finditer(body):
        try:
            value, end = _DECODER.raw_decode(body, match.end())
        except json.JSONDecodeError:
            continue
        if value == args:
            return body[match.end() : end]
    return json.dumps(args, ensure_ascii=False)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split generated ``text`` into (remaining content, parsed tool calls).

    Valid blocks are removed from the content; malformed ones stay in it verbatim.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK_RE.finditer(text):
        body = match.group(1).strip()
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError:
            parsed = None
        name = parsed.get("name") if isinstance(parsed, dict) else None
        args = parsed.get("arguments", {}) if isinstance(parsed, dict) else None
        if not isinstance(name, str) or not name or not isinstance(args, dict | str):
            continue  # malformed: stays in the content
        assert isinstance(parsed, dict)
        kept.append(text[pos : match.start()])
        pos = match.end()
        calls.append(
            ToolCall(id=new_tool_call_id(), name=name, arguments=_raw_arguments(body, parsed))
        )
    kept.append(text[pos:])
    return "".join(kept), calls


def assistant_message(text: str, *, parse_tools: bool = True) -> tuple[Message, list[ToolCall]]:
    """Build the OpenAI-shaped assistant message for generated ``text``."""
    content, calls = parse_tool_calls(text) if parse_tools else (text, [])
    if not calls:
        return {"role": "assistant", "content": text}, []
    stripped = content.strip()
    message: Message = {
        "role": "assistant",
        "content": stripped or None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in calls
        ],
    }
    return message, calls


def render_tool_call(name: str, arguments: str) -> str:
    """The Hermes block for one call, as a prefix-stable template renders it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def tools_system_block(tools: list[dict[str, Any]]) -> str:
    """A Hermes-style tools section for models whose chat template ignores ``tools``."""
    sigs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{sigs}\n</tools>\n\nFor each function call, return a json object with function name "
        "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )
