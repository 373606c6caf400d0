"""The policy gateway: an OpenAI-compatible endpoint that records every call's tokens.

``PolicyGateway(engine)`` serves ``/v1/chat/completions`` (streaming and not) and
``/v1/models``, unscoped and per sample under ``/rollouts/{rollout_id}/samples/{sample_id}/v1``,
records each call as an :class:`~osmosis_ai.rollout.LLMCall` (exact prompt/completion ids and
sampler logprobs), and implements :class:`~osmosis_ai.rollout.PolicyEndpoint`. Needs the
``server`` extra (FastAPI and uvicorn).
"""

from __future__ import annotations

import importlib.util

from osmosis_ai.errors import MissingExtraError

for _module in ("fastapi", "uvicorn"):
    if importlib.util.find_spec(_module) is None:
        raise MissingExtraError("The policy gateway", "server", _module)

from osmosis_ai.serving.gateway._app import UNSCOPED_ROLLOUT  # noqa: E402
from osmosis_ai.serving.gateway._gateway import PolicyGateway  # noqa: E402
from osmosis_ai.serving.gateway._store import CallStore  # noqa: E402

__all__ = ["UNSCOPED_ROLLOUT", "CallStore", "PolicyGateway"]
