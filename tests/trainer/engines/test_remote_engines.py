"""LiteLLMEngine and OpenAIServerEngine (vLLM attach mode) against a local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from osmosis_ai.errors import ConfigError, MissingExtraError
from osmosis_ai.serving import (
    EngineError,
    GenerationRequest,
    LiteLLMEngine,
    OpenAIServerEngine,
    create_engine,
)
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine, tool_call

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
REQ = GenerationRequest(messages=[{"role": "user", "content": "2+3?"}], tools=TOOLS, max_tokens=500)


async def test_litellm_engine_gives_untrainable_results(litellm_worker_stopped: None) -> None:
    upstream = ScriptedEngine(per_sample=False, script=[tool_call("add", a=2, b=3), "5"])
    async with PolicyGateway(upstream) as up:
        engine = LiteLLMEngine("openai/osmosis-policy", api_base=f"{up.url}/v1", api_key="x")
        assert engine.provides_token_ids is False
        first = await engine.generate(REQ)
        assert first.finish_reason == "tool_calls"
        assert json.loads(first.tool_calls[0].arguments) == {"a": 2, "b": 3}
        assert first.message["tool_calls"][0]["function"]["name"] == "add"
        assert first.completion_token_ids is None and first.logprobs is None
        second = await engine.generate(REQ)
        assert second.message["content"] == "5" and second.completion_tokens > 0
        # Served behind a gateway, its calls are recorded but not trainable.
        async with PolicyGateway(engine) as gw:
            import httpx

            async with httpx.AsyncClient() as c:
                r = await c.post(
                    gw.url + "/v1/chat/completions",
                    json={"messages": [{"role": "user", "content": "x"}]},
                )
            # upstream script exhausted (its 400) -> passed on as the client's error, not 500
            assert r.status_code == 400 and "script exhausted" in r.text
        with pytest.raises(EngineError, match="cannot load adapters"):
            await engine.load_adapter("/a", 1)


async def test_vllm_engine_attach_mode_reads_token_ids() -> None:
    upstream = ScriptedEngine(per_sample=False, script=[tool_call("add", a=1, b=1), "two"])
    async with PolicyGateway(upstream, policy_name="served") as up:
        engine = OpenAIServerEngine(f"{up.url}/v1")
        res = await engine.generate(REQ)
        assert engine._base_model == "served@v0"  # discovered from /v1/models
        assert res.completion_token_ids == upstream_calls_ids(await up.collect("unscoped"))
        assert res.logprobs is not None and len(res.logprobs) == len(res.completion_token_ids or [])
        assert res.prompt_token_ids and res.finish_reason == "tool_calls"
        assert res.tool_calls[0].name == "add"
        res2 = await engine.generate(REQ)
        assert res2.message["content"] == "two"
        await engine.close()


def upstream_calls_ids(calls: dict[str, list]) -> list[int]:  # type: ignore[type-arg]
    return list(calls["main"][0].completion_token_ids)


async def test_vllm_engine_unreachable_server_is_a_503() -> None:
    engine = OpenAIServerEngine("http://127.0.0.1:9", model="m")
    with pytest.raises(EngineError) as info:
        await engine.generate(REQ)
    assert info.value.status_code == 503


def test_create_engine_dispatch(tmp_path: Path) -> None:
    assert isinstance(create_engine("http://127.0.0.1:8000/v1"), OpenAIServerEngine)
    assert isinstance(create_engine("openai/gpt-4o-mini"), LiteLLMEngine)
    with pytest.raises(ConfigError, match="looks like a local path"):
        create_engine(str(tmp_path / "missing") + "/")


def test_create_engine_local_folder(tiny_model_dir: Path) -> None:
    from osmosis_trainer.engines import HFEngine

    engine = create_engine(str(tiny_model_dir), device="cpu")
    assert isinstance(engine, HFEngine) and engine.provides_token_ids


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "litellm" else real(name, *a)
    )
    with pytest.raises(MissingExtraError, match=r'pip install "osmosis-ai\[litellm\]"'):
        create_engine("anthropic/claude-sonnet")


async def test_vllm_engine_falls_back_for_servers_without_token_fields() -> None:
    """An OpenAI-compatible server that refuses vLLM's extra fields still serves (untrainable)."""
    app = FastAPI()
    seen: list[dict] = []  # type: ignore[type-arg]

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        if "return_token_ids" in body:
            msg = "Unrecognized request argument supplied: return_token_ids"
            return JSONResponse({"error": {"message": msg}}, status_code=400)
        return JSONResponse(
            {
                "model": "plain",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "hi"},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        )

    server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning", lifespan="off"))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn exposes no event)
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        engine = OpenAIServerEngine(f"http://127.0.0.1:{port}", model="plain")
        res = await engine.generate(REQ)
        assert res.message["content"] == "hi" and res.completion_token_ids is None
        assert engine.provides_token_ids is False
        await engine.generate(REQ)
        assert ["return_token_ids" in b for b in seen] == [True, False, False]
    finally:
        server.should_exit = True
        await task
