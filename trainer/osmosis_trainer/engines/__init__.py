"""The trainer's inference engines: the ones that need torch or launch a server.

- :class:`HFEngine`: transformers in process (CPU or GPU), the embedded default.
- :class:`VLLMEngine`: a vLLM OpenAI server launched as a child process, with runtime LoRA;
  prompts rendered by :class:`ChatRenderer` and sent as token ids.

The engine contract (``InferenceEngine``, ``GenerationRequest``, ...) and the torch-free
engines (``OpenAIServerEngine``, ``LiteLLMEngine``) live in :mod:`osmosis_ai.serving`, whose
``create_engine`` finds these through the ``osmosis.engines`` entry points.
"""

from __future__ import annotations

from osmosis_trainer.engines._chat_template import ChatRenderer
from osmosis_trainer.engines._hf import HFEngine
from osmosis_trainer.engines._sampling import processed_logprobs
from osmosis_trainer.engines._vllm import VLLMEngine

__all__ = [
    "ChatRenderer",
    "HFEngine",
    "VLLMEngine",
    "processed_logprobs",
]
