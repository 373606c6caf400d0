"""Serving a policy: the engine contract, the torch-free engines, and the policy gateway.

This layer needs no torch. Eval, ``osmosis test``, the remote rollout server and the trainer
all serve models through it:

- :class:`InferenceEngine`: one chat request in, one generation out, with the exact sampled
  token ids and logprobs (:class:`GenerationRequest`, :class:`GenerationResult`).
  :class:`KeepsRollouts`: an engine that keeps state per rollout, told when one ends.
  :class:`FreesIdleMemory`: one that can free what it keeps to answer fast (before an update).
- :class:`OpenAIServerEngine`: any OpenAI-compatible server (vLLM gives trainable calls).
- :class:`LiteLLMEngine`: hosted APIs for evaluation (no token ids, so not trainable).
- :func:`create_engine`: picks one from a model spec; engines that need torch (transformers
  in process) come from the trainer package through the ``osmosis.engines`` entry points.
- ``osmosis_ai.serving.gateway.PolicyGateway``: the OpenAI-compatible endpoint in front of an
  engine that records every call's tokens (needs ``pip install "osmosis-ai[server]"``).
- :func:`new_api_key`: the random bearer key each run gives the servers it starts.
- :func:`return_freed_memory`: hand the heap an engine freed back to the OS (call after close).
"""

from __future__ import annotations

from osmosis_ai.serving._engine import (
    ContextLengthError,
    EngineError,
    FinishReason,
    FreesIdleMemory,
    GenerationRequest,
    GenerationResult,
    InferenceEngine,
    KeepsRollouts,
)
from osmosis_ai.serving._factory import EMBEDDED_ALIASES, EMBEDDED_INSTALL, create_engine
from osmosis_ai.serving._keys import new_api_key
from osmosis_ai.serving._litellm import LiteLLMEngine
from osmosis_ai.serving._memory import return_freed_memory
from osmosis_ai.serving._openai_server import OpenAIServerEngine

__all__ = [
    "EMBEDDED_ALIASES",
    "EMBEDDED_INSTALL",
    "ContextLengthError",
    "EngineError",
    "FinishReason",
    "FreesIdleMemory",
    "GenerationRequest",
    "GenerationResult",
    "InferenceEngine",
    "KeepsRollouts",
    "LiteLLMEngine",
    "OpenAIServerEngine",
    "create_engine",
    "new_api_key",
    "return_freed_memory",
]
