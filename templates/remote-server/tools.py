"""The calculator's tools: OpenAI function schemas and the code that runs them."""

from __future__ import annotations

import json
import math
from typing import Any


def _schema(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "First number"},
                    "b": {"type": "number", "description": "Second number"},
                },
                "required": ["a", "b"],
            },
        },
    }


CALCULATOR_TOOLS: list[dict[str, Any]] = [
    _schema("add", "Add two numbers: a + b"),
    _schema("subtract", "Subtract two numbers: a - b"),
    _schema("multiply", "Multiply two numbers: a * b"),
    _schema("divide", "Divide two numbers: a / b"),
]

_OPERATIONS = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
}


def execute_tool(name: str, arguments: str | dict[str, Any]) -> str:
    """Run one tool call and return its result as text.

    Mistakes of the model (unknown tool, bad JSON, missing or non-numeric arguments, division
    by zero) come back as an error text the model can read and react to; they never raise.
    """
    operation = _OPERATIONS.get(name)
    if operation is None:
        return f"error: unknown tool {name!r}; available: {', '.join(_OPERATIONS)}"
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        a, b = float(args["a"]), float(args["b"])
    except (ValueError, TypeError, KeyError) as exc:
        return f"error: {name} needs numeric arguments a and b ({exc})"
    try:
        value = operation(a, b)
    except ZeroDivisionError:
        return "error: division by zero"
    if not math.isfinite(value):
        return "error: the result is not a finite number"
    return format_number(value)


def format_number(value: float) -> str:
    """``6.0`` -> ``"6"``; other values keep up to 10 significant digits."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
