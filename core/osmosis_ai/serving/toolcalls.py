"""Tool calls in generated text, per model family: parsing them out, and rendering them back.

Each family writes calls its own way (the format its chat template teaches):

- ``hermes`` (Hermes, Qwen 2.5/3, and models whose template ignores tools, which are shown a
  Hermes tools block): ``<tool_call>{"name": "add", "arguments": {...}}</tool_call>``, several
  blocks per reply allowed.
- ``llama3_json`` (Llama 3.1/3.2): the whole reply is one JSON object (or several separated by
  ``;``) with ``"name"`` and ``"parameters"``, optionally after ``<|python_tag|>``.
- ``mistral``: ``[TOOL_CALLS]`` followed by a JSON array of ``{"name", "arguments"}`` objects
  (v3 tokenizers), or by ``name[ARGS]{...}`` (v11+ tokenizers).

The family names are vLLM's ``--tool-call-parser`` names, so the vLLM engine is started with
the parser of the same family. A call whose JSON does not parse (or lacks a name) is kept as
text in the message content: it is the model's real mistake, and silently repairing it would
hide it from training.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Literal

from osmosis_ai.rollout import Message, ToolCall

__all__ = [
    "ToolFamily",
    "assistant_message",
    "detect_family",
    "new_tool_call_id",
    "parse_tool_calls",
    "render_tool_call",
    "tool_signature",
    "tools_system_block",
]

ToolFamily = Literal["hermes", "llama3_json", "mistral"]

_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_ARGS_KEY_RE = {
    key: re.compile(rf'"{key}"\s*:\s*') for key in ("arguments", "parameters")
}
_PYTHON_TAG = "<|python_tag|>"
_MISTRAL_CALLS = "[TOOL_CALLS]"
_MISTRAL_ARGS = "[ARGS]"
_DECODER = json.JSONDecoder()


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def detect_family(chat_template: str | None) -> ToolFamily:
    """The tool-call format a chat template teaches (``hermes`` when it shows none)."""
    text = chat_template or ""
    if _MISTRAL_CALLS in text:
        return "mistral"
    if "<|start_header_id|>" in text and '"parameters"' in text:
        return "llama3_json"
    return "hermes"


def _raw_arguments(body: str, parsed: dict[str, Any], key: str = "arguments") -> str:
    """The arguments exactly as the model wrote them (so a client echoing them back re-renders
    the same text), falling back to canonical JSON when the raw span cannot be located."""
    args = parsed.get(key, {})
    if isinstance(args, str):
        return args
    for match in _ARGS_KEY_RE[key].finditer(body):
        try:
            value, end = _DECODER.raw_decode(body, match.end())
        except json.JSONDecodeError:
            continue
        if value == args:
            return body[match.end() : end]
    return json.dumps(args, ensure_ascii=False)


def parse_tool_calls(text: str, family: ToolFamily = "hermes") -> tuple[str, list[ToolCall]]:
    """Split generated ``text`` into (remaining content, parsed tool calls) for ``family``.

    Valid calls are removed from the content; malformed ones stay in it verbatim.
    """
    if family == "llama3_json":
        return _parse_llama3(text)
    if family == "mistral":
        return _parse_mistral(text)
    return _parse_hermes(text)


def _call(name: Any, args: Any, body: str, parsed: dict[str, Any], key: str) -> ToolCall | None:
    if not isinstance(name, str) or not name or not isinstance(args, dict | str):
        return None
    return ToolCall(id=new_tool_call_id(), name=name, arguments=_raw_arguments(body, parsed, key))


def _json_objects(text: str, sep: str) -> list[tuple[str, Any]] | None:
    """``text`` as JSON values separated by ``sep`` (and whitespace): (raw span, value) each,
    or ``None`` when anything else is in between."""
    out: list[tuple[str, Any]] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return out or None
        try:
            value, stop = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        out.append((text[pos:stop], value))
        pos = stop
        while pos < end and text[pos].isspace():
            pos += 1
        if pos < end:
            if not sep or text[pos] != sep:
                return None
            pos += 1


def _parse_llama3(text: str) -> tuple[str, list[ToolCall]]:
    body = text.strip().removeprefix(_PYTHON_TAG)
    values = _json_objects(body, ";")
    if not values:
        return text, []
    calls: list[ToolCall] = []
    for raw, value in values:
        if not isinstance(value, dict):
            return text, []
        key = "parameters" if "parameters" in value else "arguments"
        call = _call(value.get("name"), value.get(key, {}), raw, value, key)
        if call is None:
            return text, []  # not a call after all: the reply stays as written
        calls.append(call)
    return "", calls


def _parse_mistral(text: str) -> tuple[str, list[ToolCall]]:
    head, marker, rest = text.partition(_MISTRAL_CALLS)
    if not marker:
        return text, []
    calls: list[ToolCall] = []
    for chunk in rest.split(_MISTRAL_CALLS):
        if _MISTRAL_ARGS in chunk:  # v11+: name[ARGS]{...}
            name, _, args_text = chunk.partition(_MISTRAL_ARGS)
            values = _json_objects(args_text, "")
            if not values or not isinstance(values[0][1], dict):
                return text, []
            raw, args = values[0]
            calls.append(ToolCall(id=new_tool_call_id(), name=name.strip(), arguments=raw))
            continue
        values = _json_objects(chunk, "")
        if not values or not isinstance(values[0][1], list):
            return text, []
        raw_array, array = values[0]
        for item in array:
            if not isinstance(item, dict):
                return text, []
            call = _call(item.get("name"), item.get("arguments", {}), raw_array, item, "arguments")
            if call is None:
                return text, []
            calls.append(call)
    return head, calls


def _parse_hermes(text: str) -> tuple[str, list[ToolCall]]:
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


def assistant_message(
    text: str, *, parse_tools: bool = True, family: ToolFamily = "hermes"
) -> tuple[Message, list[ToolCall]]:
    """Build the OpenAI-shaped assistant message for generated ``text``."""
    content, calls = parse_tool_calls(text, family) if parse_tools else (text, [])
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
    """The tools section shown to a model whose chat template ignores ``tools``.

    Hermes-shaped (the ``<tools>`` list, then how to write a ``<tool_call>``), but each tool is
    one signature line (:func:`tool_signature`) instead of its JSON schema: the strands
    template's four tools take 207 tokens instead of 444 with SmolLM2's tokenizer, and this
    block is most of every prompt such a model sees in training, eval and deploy (BENCHMARKS.md,
    "learning").
    """
    lines = "\n".join(tool_signature(t) for t in tools)
    return (
        "# Tools\n\nYou may call these functions, listed within <tools></tools> XML tags:\n"
        f"<tools>\n{lines}\n</tools>\n\nFor each function call, return a json object with "
        "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def tool_signature(tool: dict[str, Any]) -> str:
    """One tool as a line: ``name(a: number, b?: string): What it does. a: …; b: …``.

    Accepts an OpenAI tool (``{"type": "function", "function": {...}}``) or its function
    object. ``?`` marks a parameter the schema does not require; enums, unions and arrays are
    written out; an object parameter with its own properties is shown as compact JSON.
    """
    fn: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
    params: dict[str, Any] = fn["parameters"] if isinstance(fn.get("parameters"), dict) else {}
    props: dict[str, Any] = (
        params["properties"] if isinstance(params.get("properties"), dict) else {}
    )
    required: list[Any] = params["required"] if isinstance(params.get("required"), list) else []
    args = ", ".join(
        f"{name}{'' if name in required else '?'}: {_schema_type(schema)}"
        for name, schema in props.items()
    )
    text = f"{fn.get('name', '?')}({args})"
    notes = [str(fn["description"]).strip()] if fn.get("description") else []
    notes += [
        f"{name}: {str(schema['description']).strip()}"
        for name, schema in props.items()
        if isinstance(schema, dict) and schema.get("description")
    ]
    return f"{text}: {' '.join(notes)}" if notes else text


def _schema_type(schema: Any) -> str:
    """A JSON schema as a short type: ``number``, ``"a" | "b"``, ``string[]``, ``int | null``."""
    if not isinstance(schema, dict):
        return "any"
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_schema_type(s) for s in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind == "array":
        return f"{_schema_type(schema.get('items'))}[]"
    if kind == "object" and schema.get("properties"):
        inner = {k: v for k, v in schema.items() if k != "description"}
        return json.dumps(inner, ensure_ascii=False, separators=(",", ":"))
    return str(kind) if kind else "any"
