"""OpenAI Agents SDK adapter: ``OsmosisAgent``, the policy ``Model`` and a ``ModelProvider``.

Minimal usage (the template ``templates/openai-agents`` shows a whole rollout)::

    from agents import Runner
    from osmosis_integrations import OsmosisAgent, OsmosisRolloutModel

    agent = OsmosisAgent(name="calculator", instructions=SYSTEM, tools=[add],
                         model=OsmosisRolloutModel())      # at module level or inside run()
    result = await Runner.run(agent, question)             # inside AgentWorkflow.run
    return None                                            # the agent registered its sample

``OsmosisAgent`` is an ``agents.Agent`` in every respect (tools, handoffs, guardrails, hooks,
``output_type``, ``Runner.run``/``run_streamed``/``run_sync``). Its model is an
:class:`OsmosisAgentsModel`, which the runner uses whatever ``RunConfig.model_provider`` says, so
plain ``Runner.run(agent, input)`` goes to the policy, as does every ``OsmosisAgent`` it hands
off to. Each ``OsmosisAgent`` is one sample per rollout (sample id = its name). Plain
``agents.Agent`` objects in the same run keep their own model unless the run uses
``run_config=osmosis_run_config()``, which routes them to the policy as one more sample.

Because an Agents SDK agent is a stateless definition, one ``OsmosisAgent`` may serve many
rollouts (also concurrently): it gets one sample in each rollout it runs in.

The SDK's default trace exporter (upload to OpenAI) is removed the first time the adapter is
used; set ``OSMOSIS_OPENAI_TRACE_UPLOAD=1`` to keep it. Your own trace processors are kept.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from agents import Agent, ModelProvider, ModelSettings, RunConfig
from agents.items import ItemHelpers, ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.chatcmpl_converter import Converter
from agents.models.default_models import get_default_model_settings
from agents.models.interface import Model, ModelTracing
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from agents.retry import (
    ModelRetryAdvice,
    ModelRetryAdviceRequest,
    ModelRetrySettings,
    retry_policies,
)
from agents.usage import Usage

from osmosis_ai.chat import Message, as_message
from osmosis_ai.rollout import RolloutSample, SampleStatus
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID
from osmosis_integrations._binding import PerRolloutSamples
from osmosis_integrations._conversation import final_answer
from osmosis_integrations._http import policy_client
from osmosis_integrations._placeholder import POLICY_MODEL_NAME, OsmosisRolloutModel

__all__ = [
    "OsmosisAgent",
    "OsmosisAgentsModel",
    "OsmosisModelProvider",
    "agents_items_to_chat",
    "osmosis_run_config",
]

logger = logging.getLogger("osmosis")

TRACE_UPLOAD_ENV = "OSMOSIS_OPENAI_TRACE_UPLOAD"
_MAX_CACHED_MODELS = 64
_SETTINGS_FIELDS = {
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "metadata",
    "top_logprobs",
    "extra_query",
    "extra_body",
    "extra_headers",
}


def gateway_retry_settings() -> ModelRetrySettings:
    """Runner-managed retries for policy calls: the gateway answers 429 while it swaps weights."""
    return ModelRetrySettings(
        max_retries=8,
        backoff={"initial_delay": 0.5, "max_delay": 30.0, "multiplier": 2.0, "jitter": True},
        policy=retry_policies.provider_suggested(),
    )


class _Recorder:
    """The sample source of one agent in one rollout: what the agent saw and answered last."""

    def __init__(self, agent_name: str) -> None:
        self.agent_name = agent_name
        self.turns = 0
        self._last: tuple[str | None, str | list[TResponseInputItem], list[Any]] | None = None

    def record(
        self, system: str | None, input: str | list[TResponseInputItem], output: list[Any]
    ) -> None:
        # Keep (shallow copies of) the items only: the conversion runs once, at build time.
        self._last = (system, input if isinstance(input, str) else list(input), list(output))
        self.turns += 1

    def items(self) -> tuple[str | None, list[TResponseInputItem]]:
        """The system prompt and the last call's input plus its output, as input items."""
        if self._last is None:
            return None, []
        system, input, output = self._last
        replay = ModelResponse(output=output, usage=Usage(), response_id=None).to_input_items()
        # A list input is used as recorded: the chat model converts the very same list
        # (``Converter.items_to_messages(input)``), so a deep "dump-compatible" copy of it
        # (``ItemHelpers.input_to_new_input_list``) would only cost time.
        head = ItemHelpers.input_to_new_input_list(input) if isinstance(input, str) else input
        return system, [*head, *replay]

    def build_sample(self, sample_id: str) -> RolloutSample:
        system, items = self.items()
        chat = agents_items_to_chat(items, system)
        tools = _tool_records(items)
        sample = RolloutSample(
            id=sample_id,
            messages=chat,
            metrics={"num_turns": float(self.turns), "num_tool_calls": float(len(tools))},
            extra_fields={
                "framework": "openai-agents",
                "agent": self.agent_name,
                "final_answer": final_answer(chat),
                "tool_calls": tools,
            },
        )
        if self.turns == 0:
            sample.status = SampleStatus.SKIPPED
            sample.remove_sample = True
            sample.extra_fields["skipped_reason"] = f"agent {self.agent_name!r} was never run"
        return sample


class OsmosisAgentsModel(Model):
    """An Agents SDK ``Model`` that sends each call to the policy route of its sample.

    Each call resolves the route from the current rollout, makes an ``AsyncOpenAI`` client for
    it (over the running loop's connection pool) and delegates to the SDK's own
    ``OpenAIChatCompletionsModel``: conversions, streaming events, tool calls and retries behave
    exactly as with a stock chat-completions model. Placeholder params are defaults under the
    agent's and the run's ``ModelSettings``.
    """

    def __init__(
        self, placeholder: OsmosisRolloutModel, samples: PerRolloutSamples[_Recorder], what: str
    ) -> None:
        self.placeholder = placeholder
        self.samples = samples
        self.what = what
        self._defaults = _settings_from_params(placeholder.params)
        implicit = get_default_model_settings()
        self._implicit = (implicit.reasoning, implicit.verbosity)
        # Retry advice is a pure function of the error; a client-less stock model computes it.
        self._advisor = OpenAIChatCompletionsModel(POLICY_MODEL_NAME, openai_client=cast(Any, None))
        # Stock models by client (a client is per route and loop); bounded, least recent out.
        self._inner: OrderedDict[Any, OpenAIChatCompletionsModel] = OrderedDict()
        self._lock = threading.Lock()
        # (settings passed in, a copy of their extra_args, the resolved settings): see _settings.
        self._resolved: tuple[ModelSettings, dict[str, Any] | None, ModelSettings] | None = None

    def _settings(self, model_settings: ModelSettings) -> ModelSettings:
        # The runner passes equal settings on every call of a run; resolving them again (a
        # validated dataclass copy, ~10 us) would be most of this model's own per-call cost.
        # ``resolve`` passes every field through by reference except ``extra_args``, which it
        # merges into a new dict: that one is compared by a snapshot of its value.
        cached = self._resolved
        if cached is not None and _equal(
            (cached[0], cached[1]), (model_settings, model_settings.extra_args)
        ):
            settings = cached[2]
        else:
            settings = self._defaults.resolve(model_settings)
            extra = model_settings.extra_args
            self._resolved = (model_settings, None if extra is None else dict(extra), settings)
        if (
            self._implicit != (None, None)
            and (settings.reasoning, settings.verbosity) == self._implicit
        ):
            # The SDK's implicit defaults for its default (GPT-5) model name, not the user's choice.
            settings = dataclasses.replace(settings, reasoning=None, verbosity=None)
        return settings

    async def _resolve(self) -> tuple[OpenAIChatCompletionsModel, _Recorder]:
        """The stock chat-completions model for this call's route, and the sample's recorder."""
        scope, sample_id, recorder = self.samples.resolve(self.what)
        route = scope.route(sample_id)
        client = await policy_client(route, max_retries=2)
        with self._lock:  # one model may serve rollouts on several threads (run_sync)
            inner = self._inner.get(client)
            if inner is None:
                inner = OpenAIChatCompletionsModel(route.model, openai_client=client)
                self._inner[client] = inner
                if len(self._inner) > _MAX_CACHED_MODELS:
                    self._inner.popitem(last=False)
            else:
                self._inner.move_to_end(client)
        return inner, recorder

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        return self._advisor.get_retry_advice(request)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        inner, recorder = await self._resolve()
        response = await inner.get_response(
            system_instructions,
            input,
            self._settings(model_settings),
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        recorder.record(system_instructions, input, response.output)
        return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        inner, recorder = await self._resolve()
        async for event in inner.stream_response(
            system_instructions,
            input,
            self._settings(model_settings),
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        ):
            if event.type == "response.completed":
                recorder.record(system_instructions, input, event.response.output)
            yield event


@dataclass
class OsmosisAgent(Agent[Any]):
    """An ``agents.Agent`` trained by osmosis: same fields, model resolved to the policy.

    ``model`` takes ``OsmosisRolloutModel(...)`` or nothing; a model name or a real ``Model`` is
    rejected (the eval config or training run chooses the model). The agent's ``name`` is its
    sample id in each rollout. Without ``model_settings.retry``, 429s from the gateway are
    retried by the runner (up to 8 times, 0.5 s doubling to 30 s, honouring ``Retry-After``).
    """

    if TYPE_CHECKING:
        # What type checkers see: the dataclass fields of ``agents.Agent``, with ``model``
        # taking the placeholder (it is replaced by the policy model in ``__post_init__``).
        def __init__(
            self, name: str, *, model: OsmosisRolloutModel | None = None, **fields: Any
        ) -> None: ...

    def __post_init__(self) -> None:
        placeholder = _placeholder_from(self.model)
        keep_traces_local()
        name = str(self.name)
        self.model = OsmosisAgentsModel(
            placeholder,
            PerRolloutSamples(name, lambda: _Recorder(name)),
            what=f"OsmosisAgent {name!r}",
        )
        super().__post_init__()  # type: ignore[no-untyped-call,unused-ignore]  # untyped upstream
        if self.model_settings.retry is None:
            self.model_settings = self.model_settings.resolve(
                ModelSettings(retry=gateway_retry_settings())
            )
        _warn_plain_handoffs(self)


class OsmosisModelProvider(ModelProvider):
    """Routes plain ``agents.Agent`` objects (model name or none) to the policy as one sample.

    Agents that hold a ``Model`` instance (every ``OsmosisAgent``) never reach a provider.
    """

    def __init__(
        self, placeholder: OsmosisRolloutModel | None = None, *, sample_id: str = DEFAULT_SAMPLE_ID
    ) -> None:
        keep_traces_local()
        self.model = OsmosisAgentsModel(
            placeholder or OsmosisRolloutModel(),
            PerRolloutSamples(sample_id, lambda: _Recorder(sample_id)),
            what="osmosis_run_config()",
        )

    def get_model(self, model_name: str | None) -> Model:
        return self.model


def osmosis_run_config(
    placeholder: OsmosisRolloutModel | None = None,
    *,
    sample_id: str = DEFAULT_SAMPLE_ID,
    **kwargs: Any,
) -> RunConfig:
    """A ``RunConfig`` that also sends plain ``agents.Agent`` calls to the policy.

    Only needed when a run reaches agents that are not ``OsmosisAgent`` (e.g. a handoff target
    you did not convert); their calls form the sample ``sample_id``. ``kwargs`` go to
    ``RunConfig``; runner-managed retries are on unless ``model_settings`` says otherwise.
    """
    settings = kwargs.pop("model_settings", None) or ModelSettings()
    if settings.retry is None:
        settings = settings.resolve(ModelSettings(retry=gateway_retry_settings()))
    return RunConfig(
        model_provider=OsmosisModelProvider(placeholder, sample_id=sample_id),
        model_settings=settings,
        **kwargs,
    )


# --- helpers --------------------------------------------------------------------------------

_trace_lock = threading.Lock()
_traces_checked = False


def keep_traces_local() -> None:
    """Remove the SDK's default OpenAI trace exporter (once), unless the user opted in.

    Only the default exporter is removed; processors the user added stay. Runs when the adapter
    is first used, never at import.
    """
    global _traces_checked
    with _trace_lock:
        if _traces_checked:
            return
        _traces_checked = True
    if os.environ.get(TRACE_UPLOAD_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
        return
    from agents.tracing import get_trace_provider, set_trace_processors, set_tracing_disabled
    from agents.tracing.processors import default_processor

    provider = get_trace_provider()
    current = getattr(getattr(provider, "_multi_processor", None), "_processors", None)
    if isinstance(current, tuple):
        default = default_processor()
        set_trace_processors([p for p in current if p is not default])
    else:
        # An SDK whose provider we cannot inspect: never upload; tracing goes off entirely.
        logger.warning(
            "osmosis: cannot inspect the OpenAI Agents trace processors; tracing is disabled so "
            "that no trace is uploaded to OpenAI (set %s=1 to keep it)",
            TRACE_UPLOAD_ENV,
        )
        set_tracing_disabled(True)


def _equal(a: Any, b: Any) -> bool:
    """``a == b``, False where the comparison fails (values whose ``==`` raises or is not a bool,
    e.g. an array in ``extra_body``)."""
    try:
        return bool(a == b)
    except Exception:
        return False


def _settings_from_params(params: dict[str, Any]) -> ModelSettings:
    known = {k: v for k, v in params.items() if k in _SETTINGS_FIELDS}
    extra = {k: v for k, v in params.items() if k not in _SETTINGS_FIELDS}
    return ModelSettings(**known, extra_args=extra or None)


def _placeholder_from(model: Any) -> OsmosisRolloutModel:
    if model is None:
        return OsmosisRolloutModel()
    if isinstance(model, OsmosisRolloutModel):
        return model
    if isinstance(model, OsmosisAgentsModel):  # a clone() of another OsmosisAgent
        return model.placeholder.copy()
    shown = repr(model) if isinstance(model, str) else type(model).__name__
    raise TypeError(
        f"OsmosisAgent(model=...) got {shown}; it takes OsmosisRolloutModel(...) (sampling "
        "params) or no model. Rollout code never names the model: the eval config ([model] or "
        "--model) or the training run chooses it. Use model=OsmosisRolloutModel(...)."
    )


def _warn_plain_handoffs(agent: Agent[Any]) -> None:
    for target in agent.handoffs:
        if isinstance(target, Agent) and not isinstance(target.model, Model):
            logger.warning(
                "osmosis: OsmosisAgent %r hands off to plain agent %r, whose calls will not go "
                "to the policy; make it an OsmosisAgent or run with "
                "run_config=osmosis_run_config()",
                agent.name,
                target.name,
            )


def agents_items_to_chat(
    items: list[TResponseInputItem], system: str | None = None
) -> list[Message]:
    """Responses-API items as OpenAI chat dicts, as the SDK sends them to a chat model."""
    chat = [as_message(m) for m in Converter.items_to_messages(items)]
    if system:
        chat.insert(0, {"role": "system", "content": system})
    for message in chat:
        content = message.get("content")
        if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" for p in content
        ):
            message["content"] = "".join(str(p.get("text", "")) for p in content)
    return chat


def _tool_records(items: list[TResponseInputItem]) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    for item in items:
        data = cast(dict[str, Any], item)
        kind = data.get("type")
        if kind == "function_call":
            records[str(data["call_id"])] = {
                "name": data.get("name"),
                "arguments": data.get("arguments"),
                "output": None,
            }
        elif kind == "function_call_output":
            entry = records.setdefault(str(data["call_id"]), {"name": None, "arguments": None})
            output = data.get("output")
            entry["output"] = output if isinstance(output, str) else str(output)
    return records

