"""Strands Agents adapter: ``OsmosisStrandsAgent`` and the policy model behind it.

Minimal usage (inside ``AgentWorkflow.run``; the template ``templates/strands`` shows a whole
rollout)::

    from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent

    agent = OsmosisStrandsAgent(model=OsmosisRolloutModel(), tools=[add], system_prompt=SYSTEM)
    await agent.invoke_async(question)      # or agent(question) from synchronous code
    return None                             # the agent registered its sample itself

The agent is a ``strands.Agent`` in every respect (tools, hooks, callbacks, structured output,
conversation managers). What changes: its model sends every call to the policy route of its own
sample in the current rollout, and when the workflow returns, the runner gets the sample (the
conversation in chat shape, each tool call with its result keyed by call id, the final answer)
and joins it with the gateway's token-level records of those calls.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from strands import Agent, ModelRetryStrategy
from strands.hooks import AfterInvocationEvent
from strands.models.openai import OpenAIModel
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolChoice, ToolSpec

from osmosis_ai.chat import Message, as_message
from osmosis_ai.rollout import RolloutSample, SampleStatus
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID, PolicyRoute
from osmosis_integrations._binding import AgentBinding
from osmosis_integrations._conversation import final_answer
from osmosis_integrations._http import policy_client
from osmosis_integrations._placeholder import POLICY_MODEL_NAME, OsmosisRolloutModel

__all__ = [
    "OsmosisStrandsAgent",
    "OsmosisStrandsModel",
    "chat_to_strands_messages",
    "strands_messages_to_chat",
]

logger = logging.getLogger("osmosis")
T = TypeVar("T", bound=BaseModel)


class _PolicyMistakes(logging.Filter):
    """Strands logs a model's malformed tool use (a tool name that does not exist or does not
    parse, a call cut off at ``max_tokens``) as ERROR or WARNING. Under a policy being trained
    those are the policy's mistakes, handed back to it and graded like any other turn (and
    counted in the sample's metrics), not faults of the agent: at a few per step they buried
    the training progress. They go to DEBUG; Strands' other messages are left as they are."""

    MARKERS = (
        "tool not found in registry",
        "invalid tool name",
        "tool name missing",
        "due to max_tokens truncation",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and any(
            m in str(record.msg) for m in self.MARKERS
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


for _name in (
    "strands.tools.executors._executor",
    "strands.tools.tools",
    "strands.event_loop._recover_message_on_max_tokens_reached",
):
    logging.getLogger(_name).addFilter(_PolicyMistakes())


def _gateway_retry_strategy() -> ModelRetryStrategy:
    # The gateway answers 429 for a few seconds while it swaps adapter weights: retry sooner
    # and longer than Strands' default (4 s doubling, 6 attempts).
    return ModelRetryStrategy(max_attempts=8, initial_delay=1, max_delay=30)


class OsmosisStrandsModel(OpenAIModel):
    """A Strands ``OpenAIModel`` whose endpoint is resolved per call from the rollout.

    Every call builds a stock ``OpenAIModel`` for the route of that moment (its client uses the
    running loop's connection pool, so Strands' new event loop per synchronous call is safe)
    and delegates to it; that model maps HTTP 429 to ``ModelThrottledException`` so Strands'
    retry strategy retries it. The model never mutates its own config per call.
    """

    def __init__(self, placeholder: OsmosisRolloutModel, route: Callable[[], PolicyRoute]) -> None:
        super().__init__(
            model_id=POLICY_MODEL_NAME, params=dict(placeholder.params), stream=placeholder.stream
        )
        self.placeholder = placeholder
        self._route = route
        self._last: tuple[Any, OpenAIModel] | None = None

    def update_config(self, **model_config: Any) -> None:
        super().update_config(**model_config)
        self._last = None

    async def _delegate(self) -> OpenAIModel:
        route = self._route()
        client = await policy_client(route)
        # Reuse the stock model while the route's client is the same (same sample, same loop).
        if self._last is not None and self._last[0] is client:
            return self._last[1]
        config: dict[str, Any] = {**self.config, "model_id": route.model}
        delegate = OpenAIModel(client=client, **config)
        self._last = (client, delegate)
        return delegate

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        *,
        tool_choice: ToolChoice | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream one policy call (resolved now) as Strands events."""
        delegate = await self._delegate()
        async for event in delegate.stream(
            messages, tool_specs, system_prompt, tool_choice=tool_choice, **kwargs
        ):
            yield event

    async def structured_output(
        self,
        output_model: type[T],
        prompt: Messages,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[dict[str, T | Any], None]:
        """``agent.structured_output()`` bypasses ``stream()``: route it to the policy too."""
        delegate = await self._delegate()
        async for event in delegate.structured_output(
            output_model, prompt, system_prompt, **kwargs
        ):
            yield event


class OsmosisStrandsAgent(Agent):
    """A ``strands.Agent`` trained by osmosis: same constructor, model resolved to the policy.

    Args:
        model: ``OsmosisRolloutModel(...)`` (sampling params) or omitted. A real Strands model is
            rejected: rollout code never names the model (the eval config or training run does).
        *args: passed to ``strands.Agent``.
        **kwargs: passed to ``strands.Agent``. ``name`` becomes the sample id (``"main"`` when
            not given; a second agent with the same name in one rollout gets ``name-2``).
            Without ``retry_strategy``, 429s are retried up to 8 times (1 s doubling to 30 s).

    Built inside a rollout, the agent claims its sample id there; built outside, on its first
    call inside one. It belongs to that one rollout: using it in another raises
    :class:`~osmosis_ai.errors.AgentReuseError` (build one agent per rollout in ``run()``).
    """

    def __init__(self, model: OsmosisRolloutModel | None = None, *args: Any, **kwargs: Any) -> None:
        placeholder = _placeholder_from(model)
        if kwargs.get("messages"):
            kwargs["messages"], system = chat_to_strands_messages(kwargs["messages"])
            if system is not None and kwargs.get("system_prompt") is None:
                kwargs["system_prompt"] = system
        if "retry_strategy" not in kwargs:
            kwargs["retry_strategy"] = _gateway_retry_strategy()
        name = kwargs.get("name")
        self._osmosis_stop_reason: str | None = None
        self._osmosis_structured: dict[str, Any] | None = None
        policy = OsmosisStrandsModel(placeholder, route=lambda: self._osmosis_binding.route())
        super().__init__(policy, *args, **kwargs)
        self.add_hook(self._osmosis_after_invocation, AfterInvocationEvent)
        label = f"OsmosisStrandsAgent {name!r}" if name else "OsmosisStrandsAgent"
        self._osmosis_binding = AgentBinding(
            label, str(name) if name else DEFAULT_SAMPLE_ID, _StrandsSampleSource(self)
        )

    @property
    def sample_id(self) -> str | None:
        """This agent's sample id in its rollout (``None`` until it is bound to one)."""
        return self._osmosis_binding.sample_id

    async def stream_async(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        """Check the rollout before Strands takes its invocation lock, then stream as usual."""
        self._osmosis_binding.resolve()
        async for event in super().stream_async(*args, **kwargs):
            yield event

    def _osmosis_after_invocation(self, event: AfterInvocationEvent) -> None:
        if event.result is not None:
            self._osmosis_stop_reason = str(event.result.stop_reason)
            structured = event.result.structured_output
            if isinstance(structured, BaseModel):
                self._osmosis_structured = structured.model_dump(mode="json")


def _placeholder_from(model: Any) -> OsmosisRolloutModel:
    if model is None:
        return OsmosisRolloutModel()
    if isinstance(model, OsmosisRolloutModel):
        return model
    if isinstance(model, OsmosisStrandsModel):
        return model.placeholder.copy()
    raise TypeError(
        f"OsmosisStrandsAgent(model=...) got {type(model).__name__}; it takes "
        "OsmosisRolloutModel(...) (sampling params) or no model. Rollout code never names the "
        "model: the eval config ([model] or --model) or the training run chooses it. Replace "
        f"model={type(model).__name__}(...) with model=OsmosisRolloutModel(...)."
    )


class _StrandsSampleSource:
    """Builds the agent's sample when the workflow returns."""

    def __init__(self, agent: OsmosisStrandsAgent) -> None:
        self.agent = agent

    def build_sample(self, sample_id: str) -> RolloutSample:
        agent = self.agent
        chat = strands_messages_to_chat(agent.messages, agent.system_prompt)
        tools = _tool_records(agent.messages)
        extra: dict[str, Any] = {
            "framework": "strands",
            "agent": agent.name,
            "final_answer": final_answer(chat),
            "tool_calls": tools,
        }
        if agent._osmosis_stop_reason is not None:
            extra["stop_reason"] = agent._osmosis_stop_reason
        if agent._osmosis_structured is not None:
            extra["structured_output"] = agent._osmosis_structured
            if not extra["final_answer"]:
                extra["final_answer"] = json.dumps(agent._osmosis_structured, ensure_ascii=False)
        turns = sum(1 for m in agent.messages if m.get("role") == "assistant")
        sample = RolloutSample(
            id=sample_id,
            messages=chat,
            metrics={"num_turns": float(turns), "num_tool_calls": float(len(tools))},
            extra_fields=extra,
        )
        if turns == 0:
            # Built in the rollout but never called: nothing to grade or train on.
            sample.status = SampleStatus.SKIPPED
            sample.remove_sample = True
            sample.extra_fields["skipped_reason"] = f"agent {agent.name!r} was never invoked"
        return sample


def chat_to_strands_messages(messages: Any) -> tuple[Messages, str | None]:
    """Initial messages in OpenAI chat shape as Strands messages, and the system prompt.

    ``{"role": "user", "content": "Hi"}`` becomes ``{"role": "user", "content": [{"text":
    "Hi"}]}`` (``ctx.prompt`` handed to ``OsmosisStrandsAgent(messages=...)``); messages whose
    content is already a list of Strands content blocks pass through. System messages are
    joined into the returned system prompt (Strands keeps it apart from the messages).
    """
    converted: Messages = []
    system: list[str] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "system":
            system.append(content if isinstance(content, str) else _blocks_text(content))
        elif isinstance(content, str):
            converted.append({"role": role, "content": [{"text": content}]})
        elif content is None:
            converted.append({"role": role, "content": []})
        else:
            converted.append(message)
    return converted, ("\n\n".join(system) if system else None)


def _blocks_text(content: Any) -> str:
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def strands_messages_to_chat(
    messages: Messages, system_prompt: str | None = None
) -> list[Message]:
    """Strands (Bedrock-like) messages as OpenAI chat dicts, the shape sent to the policy.

    Uses Strands' own conversion (tool results become ``tool`` messages keyed by
    ``tool_call_id``); text-only content lists are collapsed to plain strings.
    """
    chat = OpenAIModel.format_request_messages(messages, system_prompt)
    for message in chat:
        content = message.get("content")
        if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" for p in content
        ):
            message["content"] = "".join(str(p.get("text", "")) for p in content)
        if message.get("role") == "assistant":
            message.setdefault("content", None)
    return [as_message(m) for m in chat]


def _tool_records(messages: Messages) -> dict[str, dict[str, Any]]:
    """Each tool call with its result, keyed by tool-use id (results may arrive in any order)."""
    records: dict[str, dict[str, Any]] = {}
    for message in messages:
        for block in message.get("content", []):
            if "toolUse" in block:
                use = block["toolUse"]
                records[use["toolUseId"]] = {
                    "name": use["name"],
                    "arguments": json.dumps(use.get("input"), ensure_ascii=False),
                    "output": None,
                    "status": None,
                }
            elif "toolResult" in block:
                result = block["toolResult"]
                entry = records.setdefault(result["toolUseId"], {"name": None, "arguments": None})
                entry["output"] = "\n".join(
                    c["text"] if "text" in c else json.dumps(c.get("json"), ensure_ascii=False)
                    for c in result.get("content", [])
                    if "text" in c or "json" in c
                )
                entry["status"] = result.get("status")
    return records

