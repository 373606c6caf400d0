"""Tool calls per model family, parsed from what each family's real chat template renders.

Hermes/Qwen 2.5 and Llama 3.1/3.2 use the chat templates TRL ships (the models' own
templates, installed with the ``trl`` dev dependency); Mistral uses a template written for
these tests in the Mistral v3 tool format (``templates/mistral_v3_tools.jinja``). Each test
renders an assistant tool call with the template, cuts out the assistant turn (what the model
would generate) and parses it back: with osmosis's family parser and, where TRL knows the
family, with transformers' own ``parse_response``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.serving.toolcalls import assistant_message, detect_family, parse_tool_calls
from osmosis_trainer.engines._response import ResponseParser

HERE = Path(__file__).parent
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
ARGS = {"a": 12, "b": 30}


def _trl_template(name: str) -> str:
    trl = pytest.importorskip("trl")
    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


def _tokenizer(model_dir: Path, template: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok.chat_template = template
    return tok


def _generated(tok: Any, end: str) -> tuple[str, list[int]]:
    """The assistant turn the template renders for a call of ``add`` (the model's output),
    without its end-of-turn marker, and the prompt ids before it."""
    convo = [{"role": "user", "content": "What is 12 + 30?"}]
    call = {"id": "abcdefghi", "type": "function", "function": {"name": "add", "arguments": ARGS}}
    prompt = tok.apply_chat_template(convo, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(
        [*convo, {"role": "assistant", "content": "", "tool_calls": [call]}],
        tools=TOOLS, tokenize=False,
    )
    assert full.startswith(prompt), "the template re-renders the prompt differently"
    completion = full[len(prompt):]
    assert end in completion
    return completion[: completion.rindex(end)], tok(prompt, add_special_tokens=False)["input_ids"]


FAMILIES = [
    ("qwen2_5", "hermes", "<|im_end|>"),
    ("llama3_1", "llama3_json", "<|eot_id|>"),
    ("llama3_2", "llama3_json", "<|eot_id|>"),
]


@pytest.mark.parametrize(("template", "family", "end"), FAMILIES)
def test_real_templates_round_trip(
    tiny_model_dir: Path, template: str, family: str, end: str
) -> None:
    tok = _tokenizer(tiny_model_dir, _trl_template(template))
    parser = ResponseParser(tok)
    assert parser.family == family and not parser.native
    text, prompt_ids = _generated(tok, end)
    message, calls = parser(text, prompt_ids)
    assert [c.name for c in calls] == ["add"] and json.loads(calls[0].arguments) == ARGS
    assert message["tool_calls"][0]["function"]["name"] == "add"
    assert not message["content"]


@pytest.mark.parametrize(("template", "family", "end"), FAMILIES)
def test_transformers_response_parsing_agrees(
    tiny_model_dir: Path, template: str, family: str, end: str
) -> None:
    """Where the tokenizer has a response_template, transformers parses; same calls."""
    chat_template = _trl_template(template)  # skips without trl
    from trl.chat_template_utils import add_response_schema

    tok = add_response_schema(_tokenizer(tiny_model_dir, chat_template))
    parser = ResponseParser(tok)
    assert parser.native
    text, prompt_ids = _generated(tok, end)
    _, ours = assistant_message(text, family=family)  # type: ignore[arg-type]
    _, theirs = parser(text, prompt_ids)
    assert [c.name for c in theirs] == [c.name for c in ours] == ["add"]
    assert json.loads(theirs[0].arguments) == json.loads(ours[0].arguments) == ARGS


def test_mistral_v3_template_round_trip(tiny_model_dir: Path) -> None:
    tok = _tokenizer(tiny_model_dir, (HERE / "templates" / "mistral_v3_tools.jinja").read_text())
    parser = ResponseParser(tok)
    assert parser.family == "mistral"
    text, prompt_ids = _generated(tok, tok.eos_token)
    assert text.startswith("[TOOL_CALLS]")
    _, calls = parser(text, prompt_ids)
    assert [c.name for c in calls] == ["add"] and json.loads(calls[0].arguments) == ARGS


def test_llama3_forms() -> None:
    content, calls = parse_tool_calls(
        '<|python_tag|>{"name": "add", "parameters": {"a": 1,  "b": 2}}; '
        '{"name": "mul", "parameters": {"x": 3}}',
        "llama3_json",
    )
    assert content == "" and [c.name for c in calls] == ["add", "mul"]
    assert calls[0].arguments == '{"a": 1,  "b": 2}'  # as written
    # Prose, or JSON that is not a call, stays the reply.
    for text in ("The answer is 42.", '{"answer": 42}', '{"name": "add", "parameters": {'):
        assert parse_tool_calls(text, "llama3_json") == (text, [])


def test_mistral_forms() -> None:
    content, calls = parse_tool_calls(
        'Sure.[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}, '
        '{"name": "mul", "arguments": {"x": 2}}]',
        "mistral",
    )
    assert content == "Sure." and [c.name for c in calls] == ["add", "mul"]
    assert json.loads(calls[1].arguments) == {"x": 2}
    # v11+ tokenizers: name[ARGS]{...}, one marker per call.
    _, calls = parse_tool_calls('[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]mul[ARGS]{"x": 2}', "mistral")
    assert [(c.name, c.arguments) for c in calls] == [("add", '{"a": 1}'), ("mul", '{"x": 2}')]
    broken = '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}'
    assert parse_tool_calls(broken, "mistral") == (broken, [])


def test_family_detection() -> None:
    assert detect_family(None) == "hermes"
    assert detect_family("{{ '<tool_call>' }}") == "hermes"
    assert detect_family((HERE / "templates" / "mistral_v3_tools.jinja").read_text()) == "mistral"
