"""The assistant message and tool calls of a generation, parsed the way the model writes them.

A tokenizer that ships a ``response_template`` is parsed by transformers' own
``tokenizer.parse_response``; otherwise the family of its chat template (``hermes``,
``llama3_json``, ``mistral``; see :mod:`osmosis_ai.serving.toolcalls`) picks the parser.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from osmosis_ai.rollout import Message, ToolCall
from osmosis_ai.serving.toolcalls import (
    ToolFamily,
    assistant_message,
    detect_family,
    new_tool_call_id,
)
from osmosis_trainer._protocols import decode_text

if TYPE_CHECKING:
    from osmosis_trainer._protocols import ChatTokenizer, Tokenizer

__all__ = ["ResponseParser", "reply_text"]

logger = logging.getLogger("osmosis")


def reply_text(
    tokenizer: Tokenizer, ids: list[int], *, ended_by_token: bool, stop: list[str]
) -> str:
    """The text of generated ``ids`` as every engine reads it: special tokens kept (a family's
    tool-call markers may be special tokens), the ending token (EOS or end of turn) dropped
    when ``ended_by_token``, cut at the first of the ``stop`` strings."""
    text = decode_text(tokenizer, ids[:-1] if ended_by_token else ids, skip_special_tokens=False)
    if stop:
        cut = min((i for s in stop if (i := text.find(s)) != -1), default=-1)
        if cut != -1:
            text = text[:cut]
    return text


class ResponseParser:
    """Turns generated text into (assistant message, tool calls) for ``tokenizer``'s model."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None)
        self.family: ToolFamily = detect_family(template if isinstance(template, str) else None)
        self.native = getattr(tokenizer, "response_template", None) is not None

    def __call__(self, text: str, prompt_ids: list[int]) -> tuple[Message, list[ToolCall]]:
        if self.native:
            try:
                parsed = self.tokenizer.parse_response(text, prefix=prompt_ids)
            except Exception as exc:  # a reply the template's parser cannot read
                logger.debug("response_template could not parse a reply (%s)", exc)
            else:
                return _from_transformers(parsed, text)
        return assistant_message(text, family=self.family)


# ``parsed`` is the JSON object transformers' response parser builds: any shape.
def _from_transformers(parsed: dict[str, Any], text: str) -> tuple[Message, list[ToolCall]]:
    raw_calls = parsed.get("tool_calls") or []
    calls: list[ToolCall] = []
    for raw in raw_calls:
        fn = raw.get("function", raw) if isinstance(raw, dict) else {}
        name, args = fn.get("name"), fn.get("arguments", {})
        if not isinstance(name, str) or not name:
            return {"role": "assistant", "content": text}, []
        arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        calls.append(ToolCall(id=new_tool_call_id(), name=name, arguments=arguments))
    if not calls:
        return {"role": "assistant", "content": text}, []
    content = (parsed.get("content") or "").strip()
    message: Message = {
        "role": "assistant",
        "content": content or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }
    return message, calls
