"""Tool schemas the trainer's tests send, in OpenAI's function-tool format."""

from __future__ import annotations

from typing import Any


def add_tool(*, a_description: str | None = None) -> dict[str, Any]:
    """``add(a, b)``: two required numbers; ``a_description`` documents ``a`` when given."""
    a: dict[str, Any] = {"type": "number"}
    if a_description is not None:
        a["description"] = a_description
    return {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": a, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
