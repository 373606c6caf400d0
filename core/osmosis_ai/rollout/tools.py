"""osmosis-ai 0.2's tool-call helpers for hand-written agent loops (chat-completions shape).

::

    for call in message["tool_calls"]:
        call_id, name, args = get_tool_call_info(call)
        result = TOOLS[name](**args)
        messages.append(create_tool_result(call_id, serialize_tool_result(result)))
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from osmosis_ai.errors import OsmosisError

__all__ = [
    "ToolArgumentError",
    "ToolExecutionError",
    "create_tool_error_result",
    "create_tool_result",
    "execute_tool_calls",
    "get_tool_call_info",
    "parse_tool_arguments",
    "serialize_tool_result",
]


class ToolArgumentError(OsmosisError, ValueError):
    """A tool call's arguments are not a JSON object (or the call has no name or id)."""


class ToolExecutionError(OsmosisError):
    """A tool failed; send ``create_tool_error_result`` back to the model instead of raising."""


def create_tool_result(tool_call_id: str, content: str) -> dict[str, str]:
    """The ``tool`` message answering one tool call."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": content}


def create_tool_error_result(tool_call_id: str, error_message: str) -> dict[str, str]:
    """A ``tool`` message that tells the model the call failed (so it can try again)."""
    return create_tool_result(tool_call_id, f"Error: {error_message}")


def serialize_tool_result(result: Any) -> str:
    """A tool's return value as message text: strings as-is, the rest as JSON (else ``str``)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


def parse_tool_arguments(arguments: str | dict[str, Any]) -> dict[str, Any]:
    """A call's arguments (a JSON string or a dict) as a dict.

    Raises:
        ToolArgumentError: not JSON, or not a JSON object.
    """
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        raise ToolArgumentError(
            f"tool arguments must be a JSON string or a dict, got {type(arguments).__name__}"
        )
    if not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ToolArgumentError(f"tool arguments are not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ToolArgumentError(
            f"tool arguments must be a JSON object, got {type(parsed).__name__}"
        )
    return parsed


def get_tool_call_info(tool_call: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``(call id, function name, arguments)`` of one chat-completions tool call.

    Raises:
        ToolArgumentError: the call has no id or no function name, or bad arguments.
    """
    call_id = tool_call.get("id")
    function = tool_call.get("function") or {}
    name = function.get("name")
    if not call_id or not name:
        raise ToolArgumentError(f"tool call without an id or a function name: {tool_call!r}")
    return str(call_id), str(name), parse_tool_arguments(function.get("arguments") or "{}")


async def execute_tool_calls(
    tool_calls: list[dict[str, Any]],
    executor: Callable[[dict[str, Any]], Awaitable[dict[str, str]]],
) -> list[dict[str, str]]:
    """Run ``executor`` on every tool call concurrently; the tool messages, in call order."""
    if not tool_calls:
        return []
    return list(await asyncio.gather(*(executor(call) for call in tool_calls)))
