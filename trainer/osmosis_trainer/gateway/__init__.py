"""The policy gateway: an OpenAI-compatible endpoint that records every call's tokens.

``PolicyGateway(engine)`` serves ``/v1/chat/completions`` (streaming and not) and
``/v1/models``, unscoped and per sample under ``/rollouts/{rollout_id}/samples/{sample_id}/v1``,
records each call as an :class:`~osmosis_ai.rollout.LLMCall` (exact prompt/completion ids and
sampler logprobs), and implements :class:`~osmosis_ai.rollout.PolicyEndpoint`.
"""

from __future__ import annotations

from osmosis_trainer.gateway._app import UNSCOPED_ROLLOUT
from osmosis_trainer.gateway._gateway import GatewaySampling, PolicyGateway
from osmosis_trainer.gateway._store import CallStore

__all__ = ["UNSCOPED_ROLLOUT", "CallStore", "GatewaySampling", "PolicyGateway"]
