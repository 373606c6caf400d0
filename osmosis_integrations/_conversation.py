"""Helpers over the chat-format conversation an adapter records as its sample."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["final_answer"]


def final_answer(chat: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last assistant message ("" when it has no plain-text content)."""
    for message in reversed(chat):
        if message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""
