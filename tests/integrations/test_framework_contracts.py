"""Contract tests: the parts of Strands, the OpenAI Agents SDK and openai the adapters rely on.

Each test pins one fact the adapters use (a signature, a field, a conversion, a behaviour). An
upgrade that changes one fails here, by name, before it breaks a training run.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import ssl
import threading
from typing import Any

import openai
import pytest

from osmosis_ai.testing import FakeOpenAIServer, rate_limited

# --- openai ---------------------------------------------------------------------------------


async def test_openai_per_call_client_with_own_http_client_is_closed_with_it() -> None:
    http_client = openai.DefaultAsyncHttpxClient(verify=ssl.create_default_context())
    async with FakeOpenAIServer(script=["hi"]) as server:
        async with openai.AsyncOpenAI(
            base_url=server.base_url, api_key="k", max_retries=0, http_client=http_client
        ) as client:
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
            assert reply.choices[0].message.content == "hi"
    assert http_client.is_closed


async def test_openai_429_is_rate_limit_error() -> None:
    async with FakeOpenAIServer(script=[rate_limited()]) as server:
        async with openai.AsyncOpenAI(
            base_url=server.base_url, api_key="k", max_retries=0
        ) as client:
            with pytest.raises(openai.RateLimitError):
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


# --- Strands --------------------------------------------------------------------------------


def test_strands_openai_model_constructor_and_config() -> None:
    from strands.models.openai import OpenAIModel

    params = inspect.signature(OpenAIModel.__init__).parameters
    assert {"client_args", "model_config"} <= set(params)
    model = OpenAIModel(
        client_args={"base_url": "http://x/v1"},
        model_id="m",
        params={"temperature": 1.0},
        stream=False,
    )
    assert model.config == {"model_id": "m", "params": {"temperature": 1.0}, "stream": False}
    assert model.client_args == {"base_url": "http://x/v1"}


def test_strands_format_request_messages_is_chat_shaped() -> None:
    from strands.models.openai import OpenAIModel

    assert isinstance(inspect.getattr_static(OpenAIModel, "format_request_messages"), classmethod)
    messages: Any = [
        {"role": "user", "content": [{"text": "2+3?"}]},
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "c1", "name": "add", "input": {"a": 2, "b": 3}}}],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": "c1", "status": "success", "content": [{"text": "5"}]}}
            ],
        },
    ]
    chat = OpenAIModel.format_request_messages(messages, "sys")
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool"]
    assert chat[2]["tool_calls"][0]["id"] == "c1" and "content" not in chat[2]
    assert chat[3] == {"role": "tool", "tool_call_id": "c1", "content": "5"}


async def test_strands_openai_model_maps_429_and_opens_a_client_per_request() -> None:
    from strands.models.openai import OpenAIModel
    from strands.types.exceptions import ModelThrottledException

    async with FakeOpenAIServer(script=[rate_limited(), "ok"]) as server:
        clients = [openai.DefaultAsyncHttpxClient() for _ in range(2)]

        def model(i: int) -> OpenAIModel:
            args = {
                "base_url": server.base_url,
                "api_key": "k",
                "max_retries": 0,
                "http_client": clients[i],
            }
            return OpenAIModel(client_args=args, model_id="m", stream=False)

        with pytest.raises(ModelThrottledException):
            async for _ in model(0).stream([{"role": "user", "content": [{"text": "x"}]}]):
                pass
        events = [e async for e in model(1).stream([{"role": "user", "content": [{"text": "x"}]}])]
    assert any("contentBlockDelta" in e for e in events)
    assert all(c.is_closed for c in clients)  # Strands closes the client it built per request


def test_strands_model_and_agent_surface() -> None:
    from strands import Agent, ModelRetryStrategy
    from strands.hooks import AfterInvocationEvent
    from strands.models import Model

    assert Model.__abstractmethods__ == {
        "update_config",
        "get_config",
        "structured_output",
        "stream",
    }
    stream = inspect.signature(Model.stream).parameters
    assert list(stream)[:4] == ["self", "messages", "tool_specs", "system_prompt"]
    assert "kwargs" in stream
    init = inspect.signature(Agent.__init__).parameters
    assert {"model", "name", "retry_strategy", "tools", "system_prompt", "callback_handler"} <= set(
        init
    )
    assert list(init)[1] == "model"
    assert inspect.isasyncgenfunction(Agent.stream_async)
    retry = inspect.signature(ModelRetryStrategy.__init__).parameters
    assert {"max_attempts", "initial_delay", "max_delay"} <= set(retry)
    assert {f.name for f in dataclasses.fields(AfterInvocationEvent)} >= {"result"}


async def test_strands_sync_call_runs_on_a_fresh_loop_with_context_copied() -> None:
    from strands import Agent
    from strands.models import Model

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    seen: list[tuple[str, int, int]] = []

    class Probe(Model):
        def update_config(self, **kw: Any) -> None: ...
        def get_config(self) -> Any:
            return {}

        def structured_output(self, *a: Any, **kw: Any) -> Any:
            raise NotImplementedError

        async def stream(
            self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kw: Any
        ) -> Any:
            seen.append((marker.get(), id(asyncio.get_running_loop()), threading.get_ident()))
            yield {"messageStart": {"role": "assistant"}}
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": "ok"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}

    marker.set("rollout-1")
    agent = Agent(model=Probe(), callback_handler=None)
    await asyncio.to_thread(lambda: (agent("a"), agent("b")))
    assert [s[0] for s in seen] == ["rollout-1", "rollout-1"]
    assert id(asyncio.get_running_loop()) not in {s[1] for s in seen}
    assert threading.get_ident() not in {s[2] for s in seen}


# --- OpenAI Agents SDK ----------------------------------------------------------------------


def test_agents_model_interface() -> None:
    from agents.models.interface import Model

    assert Model.__abstractmethods__ == {"get_response", "stream_response"}
    params = inspect.signature(Model.get_response).parameters
    assert list(params)[1:8] == [
        "system_instructions",
        "input",
        "model_settings",
        "tools",
        "output_schema",
        "handoffs",
        "tracing",
    ]
    kw_only = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    assert kw_only == {"previous_response_id", "conversation_id", "prompt"}
    assert hasattr(Model, "get_retry_advice")


def test_agents_agent_is_a_dataclass_whose_model_may_be_a_model() -> None:
    from agents import Agent

    fields = {f.name for f in dataclasses.fields(Agent)}
    assert {
        "name",
        "model",
        "model_settings",
        "handoffs",
        "tools",
        "output_type",
        "instructions",
    } <= fields
    assert callable(Agent.__post_init__) and callable(Agent.clone)


def test_agents_chat_completions_model_and_retry_advice() -> None:
    import httpx2
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from agents.retry import ModelRetryAdviceRequest

    params = list(inspect.signature(OpenAIChatCompletionsModel.__init__).parameters)
    assert params[1:3] == ["model", "openai_client"]
    advisor = OpenAIChatCompletionsModel("m", openai_client=None)  # type: ignore[arg-type]
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    error = openai.RateLimitError(
        "busy",
        response=httpx2.Response(429, request=request, headers={"retry-after": "2"}),
        body=None,
    )
    advice = advisor.get_retry_advice(ModelRetryAdviceRequest(error=error, attempt=1, stream=False))
    assert advice is not None and advice.suggested is True and advice.retry_after == 2


def test_agents_settings_retry_and_run_config() -> None:
    from agents import ModelSettings, RunConfig
    from agents.models.default_models import get_default_model_settings
    from agents.retry import ModelRetrySettings, retry_policies

    from osmosis_integrations._openai_agents import _SETTINGS_FIELDS

    fields = {f.name for f in dataclasses.fields(ModelSettings)}
    assert _SETTINGS_FIELDS | {"retry", "extra_args", "reasoning", "verbosity"} <= fields
    merged = ModelSettings(temperature=0.1, extra_args={"seed": 1}).resolve(
        ModelSettings(temperature=0.9)
    )
    assert merged.temperature == 0.9 and merged.extra_args == {"seed": 1}
    assert isinstance(get_default_model_settings(), ModelSettings)
    ModelRetrySettings(
        max_retries=1,
        backoff={"initial_delay": 0.1, "max_delay": 1.0, "multiplier": 2.0, "jitter": True},
        policy=retry_policies.provider_suggested(),
    )
    assert {"model", "model_provider", "model_settings"} <= {
        f.name for f in dataclasses.fields(RunConfig)
    }


def test_agents_items_convert_to_chat() -> None:
    from agents.items import ItemHelpers, ModelResponse
    from agents.models.chatcmpl_converter import Converter
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall

    call = ResponseFunctionToolCall(
        type="function_call", call_id="c1", name="add", arguments='{"a":1}', id="x"
    )
    replay = ModelResponse(output=[call], usage=Usage(), response_id=None).to_input_items()
    items = [
        *ItemHelpers.input_to_new_input_list("hi"),
        *replay,
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
    ]
    chat = Converter.items_to_messages(items)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool"]
    assert chat[1]["tool_calls"][0]["function"]["arguments"] == '{"a":1}'  # replayed verbatim
    assert chat[2]["tool_call_id"] == "c1"


def test_agents_stream_completion_event_and_tracing_internals() -> None:
    from agents.tracing import get_trace_provider, set_trace_processors, set_tracing_disabled
    from agents.tracing.processors import default_processor
    from openai.types.responses import ResponseCompletedEvent

    assert ResponseCompletedEvent.model_fields["type"].annotation.__args__ == (
        "response.completed",
    )  # type: ignore[union-attr]
    assert "response" in ResponseCompletedEvent.model_fields
    processors = get_trace_provider()._multi_processor._processors  # type: ignore[attr-defined]
    assert isinstance(processors, tuple)
    assert default_processor() is default_processor()
    assert callable(set_trace_processors) and callable(set_tracing_disabled)
