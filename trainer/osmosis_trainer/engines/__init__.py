"""Inference engines behind the policy gateway: one protocol, several backends.

- :class:`HFEngine`: transformers in process (CPU or GPU), the embedded default.
- :class:`HFProcessEngine`: the same engine in a child process (decodes beside the update).
- :class:`VLLMEngine`: a vLLM OpenAI server (launched or attached) with runtime LoRA loading.
- :class:`LiteLLMEngine`: hosted APIs for evaluation (no token ids, so not trainable).
- ``osmosis_trainer.testing.FakeEngine``: scripted replies for tests.

:func:`create_engine` picks one from a model spec string.
"""

from __future__ import annotations

from osmosis_trainer.engines._chat_template import ChatRenderer
from osmosis_trainer.engines._factory import create_engine
from osmosis_trainer.engines._hf import HFEngine
from osmosis_trainer.engines._hf_process import HFProcessEngine
from osmosis_trainer.engines._litellm import LiteLLMEngine
from osmosis_trainer.engines._sampling import processed_logprobs
from osmosis_trainer.engines._toolcalls import assistant_message, parse_tool_calls
from osmosis_trainer.engines._types import (
    ContextLengthError,
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    InferenceEngine,
)
from osmosis_trainer.engines._vllm import VLLMEngine

__all__ = [
    "ChatRenderer",
    "ContextLengthError",
    "EngineError",
    "FinishReason",
    "GenerationRequest",
    "GenerationResult",
    "HFEngine",
    "HFProcessEngine",
    "InferenceEngine",
    "LiteLLMEngine",
    "VLLMEngine",
    "assistant_message",
    "create_engine",
    "parse_tool_calls",
    "processed_logprobs",
]
