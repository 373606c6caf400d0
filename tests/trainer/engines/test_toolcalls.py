from __future__ import annotations

import json

from osmosis_ai.serving.toolcalls import assistant_message, parse_tool_calls
from tests.trainer._tools import add_tool


def test_parses_several_blocks_and_keeps_raw_arguments() -> None:
    text = (
        'Let me add.<tool_call>\n{"name": "add", "arguments": {"a":1,  "b": [2, 3]}}\n</tool_call>'
        '<tool_call>{"name": "mul", "arguments": {"x": "y"}}</tool_call>'
    )
    content, calls = parse_tool_calls(text)
    assert content == "Let me add."
    assert [c.name for c in calls] == ["add", "mul"]
    # The arguments are the exact span the model wrote (spacing kept), valid JSON.
    assert calls[0].arguments == '{"a":1,  "b": [2, 3]}'
    assert json.loads(calls[1].arguments) == {"x": "y"}
    assert calls[0].id != calls[1].id


def test_malformed_json_stays_text_and_is_not_repaired() -> None:
    text = 'ok <tool_call>{"name": "add", "arguments": {"a": 1,}</tool_call>'
    message, calls = assistant_message(text)
    assert calls == []
    assert message == {"role": "assistant", "content": text}


def test_mixed_valid_and_malformed_blocks() -> None:
    bad = '<tool_call>{"arguments": {}}</tool_call>'  # no name
    good = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    message, calls = assistant_message(bad + good)
    assert [c.name for c in calls] == ["f"]
    assert message["content"] == bad
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}


def test_string_arguments_are_kept_verbatim() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"q\\": 1}"}</tool_call>')
    assert calls[0].arguments == '{"q": 1}'


def test_parse_tools_false_keeps_everything_as_text() -> None:
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    message, calls = assistant_message(text, parse_tools=False)
    assert calls == [] and message["content"] == text


def test_tool_signature_lines() -> None:
    """The injected tools block lists each tool as one signature line, every part of its
    schema a model needs kept: required vs optional, enums, unions, arrays, descriptions."""
    from osmosis_ai.serving.toolcalls import tool_signature, tools_system_block

    add = add_tool(a_description="the first number.")
    assert tool_signature(add) == "add(a: number, b: number): Add two numbers. a: the first number."
    search = {
        "name": "search",
        "parameters": {
            "properties": {
                "q": {"type": "string"},
                "mode": {"enum": ["fast", "deep"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "where": {"type": "object", "properties": {"x": {"type": "integer"}}},
            },
            "required": ["q"],
        },
    }
    assert tool_signature(search) == (
        'search(q: string, mode?: "fast" | "deep", tags?: string[], limit?: integer | null, '
        'where?: {"type":"object","properties":{"x":{"type":"integer"}}})'
    )
    assert tool_signature({"function": {"name": "now"}}) == "now()"
    block = tools_system_block([add, search])
    assert "<tools>\nadd(a: number, b: number)" in block and "search(q: string" in block
    assert '{"name": <function-name>, "arguments": <args-json-object>}' in block
