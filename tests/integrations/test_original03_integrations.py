"""osmosis-ai 0.3's integration paths: real framework ``Model`` placeholders, ``params={...}``,
``messages=ctx.prompt`` in chat shape, ``OsmosisMemorySession`` (issue 39 §1 and §3)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from osmosis_ai.rollout.types import AgentWorkflowConfig
from osmosis_ai.testing import FakeOpenAIServer, text
from tests.integrations._helpers import in_rollout

STRANDS = "osmosis_ai.rollout.integrations.agents.strands"
AGENTS = "osmosis_ai.rollout.integrations.agents.openai_agents"


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (STRANDS, "OsmosisStrandsAgent"),
        (STRANDS, "OsmosisRolloutModel"),
        (AGENTS, "OsmosisAgent"),
        (AGENTS, "OsmosisRolloutModel"),
        (AGENTS, "OsmosisMemorySession"),
        (AGENTS, "OsmosisLitellmModel"),
        (AGENTS, "SessionSampleSource"),
    ],
)
def test_integration_name_imports_from_its_0_3_path(module: str, name: str) -> None:
    import importlib

    assert getattr(importlib.import_module(module), name) is not None


def test_agents_are_the_osmosis_adapters() -> None:
    import osmosis_integrations
    from osmosis_ai.rollout.integrations.agents import openai_agents, strands

    assert strands.OsmosisStrandsAgent is osmosis_integrations.OsmosisStrandsAgent
    assert openai_agents.OsmosisAgent is osmosis_integrations.OsmosisAgent


def test_strands_placeholder_is_a_strands_model_and_fills_a_model_field() -> None:
    from strands.models.model import Model

    from osmosis_ai.rollout.integrations.agents.strands import OsmosisRolloutModel

    class Config(AgentWorkflowConfig):
        name: str = "w"
        model: Model
        tools: Any = None

    model = OsmosisRolloutModel(params={"temperature": 0.5, "max_tokens": 64})
    config = Config(model=model)
    assert isinstance(config.model, Model)
    assert config.model.params == {"temperature": 0.5, "max_tokens": 64}
    assert config.model.get_config()["params"]["max_tokens"] == 64
    with pytest.raises(ValidationError):
        Config(model="not a model")


def test_agents_placeholder_is_an_agents_model_and_fills_a_model_field() -> None:
    from agents.models.interface import Model

    from osmosis_ai.rollout.integrations.agents.openai_agents import OsmosisRolloutModel

    class Config(AgentWorkflowConfig):
        name: str = "w"
        model: Model

    assert isinstance(Config(model=OsmosisRolloutModel(params={"top_p": 0.9})).model, Model)


async def test_a_placeholder_is_not_a_model_to_call() -> None:
    from osmosis_ai.rollout.integrations.agents.openai_agents import OsmosisRolloutModel

    with pytest.raises(TypeError, match="OsmosisAgent"):
        await OsmosisRolloutModel().get_response()


def test_placeholder_refuses_connection_arguments() -> None:
    from osmosis_ai.rollout.integrations.agents.strands import OsmosisRolloutModel

    with pytest.raises(TypeError, match="client_args"):
        OsmosisRolloutModel(client_args={"api_key": "x"})


async def test_strands_agent_takes_chat_messages_with_a_name() -> None:
    from osmosis_ai.rollout.integrations.agents.strands import (
        OsmosisRolloutModel,
        OsmosisStrandsAgent,
    )

    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hi"},
    ]
    async with FakeOpenAIServer(script=[text("hi")]) as server:
        with in_rollout(server) as scope:
            agent = OsmosisStrandsAgent(
                name="greeter",
                model=OsmosisRolloutModel(params={"max_tokens": 8}),
                messages=prompt,
                callback_handler=None,
            )
            await agent.invoke_async()
        body = server.requests[0].body
    assert agent.system_prompt == "Be brief."
    first = agent.messages[0]
    assert (first["role"], first["content"]) == ("user", [{"text": "Say hi"}])
    assert body["messages"][0] == prompt[0] and body["max_tokens"] == 8
    assert body["messages"][1]["content"] == [{"text": "Say hi", "type": "text"}]
    assert list(scope.sources) == ["greeter"]


async def test_memory_session_holds_the_runner_conversation() -> None:
    from agents import Runner

    from osmosis_ai.rollout.context import get_rollout_context
    from osmosis_ai.rollout.integrations.agents.openai_agents import (
        OsmosisAgent,
        OsmosisMemorySession,
        OsmosisRolloutModel,
    )

    async with FakeOpenAIServer(script=[text("#### 4")]) as server:
        with in_rollout(server) as scope:
            agent = OsmosisAgent(name="solver", model=OsmosisRolloutModel())
            session = OsmosisMemorySession()
            await Runner.run(agent, [{"role": "user", "content": "2+2?"}], session=session)
            ambient = get_rollout_context()
            assert ambient is not None
            sample = await ambient.get_sample()
            with pytest.raises(ValueError, match="one session per rollout"):
                OsmosisMemorySession()
    assert sample is not None
    assert [m["role"] for m in sample.messages] == ["user", "assistant"]
    assert sample.messages[-1]["content"] == "#### 4"
    assert list(scope.sources) == ["solver"]  # the agent's sample, one per rollout


async def test_memory_session_outside_a_rollout_is_a_plain_session() -> None:
    from osmosis_ai.rollout.integrations.agents.openai_agents import OsmosisMemorySession

    session = OsmosisMemorySession()
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert await session.get_items(limit=1) == [{"role": "user", "content": "b"}]
    assert await session.pop_item() == {"role": "user", "content": "b"}
    await session.clear_session()
    assert await session.get_items() == []


async def test_memory_session_is_the_sample_source_of_an_entered_rollout_context() -> None:
    """A harness of one's own enters RolloutContext(...) as in 0.3; the session is its sample."""
    from osmosis_ai.rollout.context import RolloutContext
    from osmosis_ai.rollout.integrations.agents.openai_agents import OsmosisMemorySession

    with RolloutContext(
        chat_completions_url="http://127.0.0.1:9/v1", api_key="k", rollout_id="r"
    ) as ctx:
        session = OsmosisMemorySession()
        items: list[Any] = [{"role": "user", "content": "hello"}]
        await session.add_items(items)
        sample = await ctx.get_sample()
    assert sample is not None and sample.messages == items
