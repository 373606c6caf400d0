"""osmosis-ai 0.3's OpenAI Agents face: the placeholder as an Agents ``Model``, the memory session.

0.3 rollouts type their config ``model: agents.models.interface.Model``, fill it with
``OsmosisRolloutModel()``, build ``OsmosisAgent(name=..., model=config.model, ...)`` in
``run()`` and pass ``session=OsmosisMemorySession()`` to ``Runner.run``. Here:

- :class:`OsmosisRolloutModel` is osmosis's placeholder and an Agents ``Model``; ``OsmosisAgent``
  resolves it to the policy (one sample per rollout, named after the agent).
- :class:`OsmosisMemorySession` is an in-memory ``Session`` holding the Runner's conversation;
  that conversation is what the agent's sample records. It also becomes the sample source of
  0.3's ambient ``RolloutContext`` (``get_rollout_context().get_sample()``).
- :class:`OsmosisLitellmModel` is a policy ``Model`` for a plain ``agents.Agent`` (sample
  ``"main"``); :class:`SessionSampleSource` builds a sample from any ``Session``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, NoReturn

from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory.session import SessionABC
from agents.models.interface import Model

from osmosis_ai.rollout import RolloutSample
from osmosis_ai.rollout.context import SampleSource, get_rollout_context
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID
from osmosis_integrations._binding import PerRolloutSamples
from osmosis_integrations._openai_agents import (
    OsmosisAgent,
    OsmosisAgentsModel,
    _Recorder,
    agents_items_to_chat,
)
from osmosis_integrations._placeholder import OsmosisRolloutModel as _Placeholder

__all__ = [
    "OsmosisAgent",
    "OsmosisLitellmModel",
    "OsmosisMemorySession",
    "OsmosisRolloutModel",
    "SessionSampleSource",
]

_NOT_A_MODEL = (
    "OsmosisRolloutModel is a placeholder for the policy, not a model to call: build the agent "
    "as OsmosisAgent(name=..., model=config.model, ...) (from "
    "osmosis_ai.rollout.integrations.agents.openai_agents import OsmosisAgent)"
)


class OsmosisRolloutModel(_Placeholder, Model):
    """The policy placeholder as an OpenAI Agents ``Model`` (osmosis-ai 0.3's constructor).

    Args:
        params: sampling parameters (``temperature``, ``top_p``, ``max_tokens`` ...), defaults
            under the agent's and the run's ``ModelSettings``.
        **params_kwargs: more sampling parameters (merged under ``params``).
    """

    def __init__(self, *, params: dict[str, Any] | None = None, **params_kwargs: Any) -> None:
        super().__init__(**{**params_kwargs, **(params or {})})

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        _refuse()

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        _refuse()


def _refuse() -> NoReturn:
    raise TypeError(_NOT_A_MODEL)


class OsmosisLitellmModel(OsmosisAgentsModel):
    """A policy ``Model`` for a plain ``agents.Agent``: its calls form the sample ``"main"``.

    Keyword arguments are sampling parameters (as for :class:`OsmosisRolloutModel`).
    """

    def __init__(self, *, params: dict[str, Any] | None = None, **params_kwargs: Any) -> None:
        placeholder = _Placeholder(**{**params_kwargs, **(params or {})})
        super().__init__(
            placeholder,
            PerRolloutSamples(DEFAULT_SAMPLE_ID, lambda: _Recorder(DEFAULT_SAMPLE_ID)),
            what="OsmosisLitellmModel",
        )


class SessionSampleSource(SampleSource):
    """Builds a rollout sample from the items an Agents ``Session`` holds (chat-shaped)."""

    def __init__(self, session: SessionABC) -> None:
        self.session = session

    async def get_sample(self) -> RolloutSample:
        items = await self.session.get_items()
        return RolloutSample(
            messages=agents_items_to_chat(list(items)),
            extra_fields={"framework": "openai-agents", "session_items": len(items)},
        )


class OsmosisMemorySession(SessionABC):
    """An in-memory ``Session``: pass ``session=OsmosisMemorySession()`` to ``Runner.run``.

    Built inside a rollout, it becomes the sample source of the ambient 0.3 ``RolloutContext``
    (a second one in the same rollout raises ``ValueError``: one conversation per rollout). The
    sample osmosis trains on is the agent's, recorded with the exact tokens of each call; it
    holds the same conversation. Outside a rollout it is a plain in-memory session.

    Args:
        name: a label for the session (0.3 templates pass the agent's name).
        session_id: the session id (a random one by default).
    """

    def __init__(self, name: str | None = None, *, session_id: str | None = None) -> None:
        self.name = name
        self.session_id = session_id or uuid.uuid4().hex
        self.items: list[TResponseInputItem] = []
        ambient = get_rollout_context()
        if ambient is not None:
            ambient.note_sample_source(SessionSampleSource(self))

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return list(self.items if limit is None else self.items[-limit:] if limit > 0 else [])

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> TResponseInputItem | None:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()
