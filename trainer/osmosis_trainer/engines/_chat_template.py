"""Render chat requests to prompt token ids with a model's own chat template.

Chat templates differ in what they understand. Some ignore ``tools`` (SmolLM2), some ignore an
assistant message's ``tool_calls``, some expect the arguments as a dict rather than a JSON string.
The renderer probes the template once and adapts the messages, so every model sees its tools
and its own earlier tool calls in the Hermes ``<tool_call>`` format it is asked to produce.
"""

from __future__ import annotations

import copy
import json
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, cast

from osmosis_ai.chat import ChatToolCall
from osmosis_ai.rollout import Message
from osmosis_ai.serving import EngineError
from osmosis_ai.serving.toolcalls import render_tool_call, tools_system_block

if TYPE_CHECKING:
    from osmosis_trainer._protocols import ChatTokenizer

__all__ = ["ChatRenderer", "as_template_input", "content_text"]

logger = logging.getLogger("osmosis")

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "osmosis_probe_tool",
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}
_PROBE_ARGS = '{"osmosis_probe_arg": 7}'
_RECENT_PROMPTS = 256

# Tool schemas and tool calls below are ``dict[str, Any]``: OpenAI-shaped JSON objects, any depth.


def content_text(content: object) -> str:
    """Message content as plain text (text parts joined; ``None`` as empty)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return str(content)



def as_template_input(messages: list[Message]) -> list[dict[str, Any]]:
    """``messages`` as transformers' ``apply_chat_template`` types its conversation (plain dicts;
    a TypedDict is not one to mypy, and the objects are the same at run time)."""
    return cast(list[dict[str, Any]], messages)

class ChatRenderer:
    """Turns (messages, tools) into prompt text and ids with ``tokenizer``'s chat template."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer
        if getattr(tokenizer, "chat_template", None) is None:
            raise EngineError(
                "the tokenizer has no chat template; save one with the model "
                "(tokenizer.chat_template = ...) before serving it",
                status_code=503,
                code="no_chat_template",
            )
        self.renders_tools = self._probe_tools()
        self.renders_tool_calls, self.string_arguments = self._probe_tool_calls()
        self._recent: OrderedDict[str, list[int]] = OrderedDict()
        if not self.renders_tools:
            logger.info("chat template ignores 'tools'; injecting a Hermes tools block")

    def _try(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
        try:
            out = self.tokenizer.apply_chat_template(
                as_template_input(messages), tools=tools, tokenize=False, add_generation_prompt=True
            )
        except Exception:  # a template that cannot render the probe lacks the feature
            return ""
        return str(out)

    def _probe_tools(self) -> bool:
        return "osmosis_probe_tool" in self._try([{"role": "user", "content": "x"}], [_PROBE_TOOL])

    def _probe_tool_calls(self) -> tuple[bool, bool]:
        def conv(args: str | dict[str, object]) -> list[Message]:
            call: ChatToolCall = {
                "id": "c1",
                "type": "function",
                "function": {"name": "osmosis_probe_fn", "arguments": args},
            }
            return [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "y"},
            ]

        out = self._try(conv(_PROBE_ARGS), None)
        if "osmosis_probe_fn" in out and _PROBE_ARGS in out:
            return True, True
        out = self._try(conv(json.loads(_PROBE_ARGS)), None)
        if "osmosis_probe_fn" in out:
            return True, False
        return False, True

    def prepare(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[Message]:
        """Adapt ``messages`` to what the template understands (see the module docstring)."""
        out: list[Message] = []
        for m in messages:
            msg = copy.copy(m)
            if msg.get("role") == "developer":
                msg["role"] = "system"
            msg["content"] = content_text(msg.get("content"))
            calls = msg.get("tool_calls")
            if calls:
                if self.renders_tool_calls:
                    msg["tool_calls"] = [self._call_for_template(c) for c in calls]
                else:
                    blocks = "".join(
                        render_tool_call(
                            str(c.get("function", {}).get("name")),
                            str(c.get("function", {}).get("arguments") or "{}"),
                        )
                        for c in calls
                    )
                    msg["content"] = msg["content"] + blocks
                    del msg["tool_calls"]
            out.append(msg)
        if tools and not self.renders_tools:
            block = tools_system_block(tools)
            if out and out[0].get("role") == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{block}"}
            else:
                out.insert(0, {"role": "system", "content": block})
        return out

    def _call_for_template(self, call: ChatToolCall) -> ChatToolCall:
        if self.string_arguments:
            return call
        fn = dict(call.get("function", {}))
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                fn["arguments"] = json.loads(args)
            except json.JSONDecodeError:
                pass  # keep the raw string: the template prints what it can
        return {**call, "function": fn}

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
        """The prompt text, ending with the assistant generation prompt."""
        prepared = self.prepare(messages, tools)
        try:
            text = self.tokenizer.apply_chat_template(
                as_template_input(prepared),
                tools=tools if (tools and self.renders_tools) else None,
                tokenize=False,
                add_generation_prompt=True,
            )
        except Exception as exc:
            raise EngineError(
                f"the chat template could not render the messages: {exc}",
                status_code=400,
                code="template_error",
            ) from exc
        return str(text)

    def encode(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        """Prompt token ids (the template supplies any BOS token itself).

        The last few hundred prompts are remembered: the samples of a GRPO group send the same
        first prompt, and rendering plus tokenising costs far more than the lookup key.
        """
        key = json.dumps([messages, tools], sort_keys=True, default=str)
        ids = self._recent.get(key)
        if ids is None:
            text = self.render(messages, tools)
            ids = [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]]
            self._recent[key] = ids
            if len(self._recent) > _RECENT_PROMPTS:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(key)
        return list(ids)
