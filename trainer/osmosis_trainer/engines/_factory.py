"""create_engine: pick an engine from a model spec string."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from osmosis_ai.errors import ConfigError, MissingExtraError
from osmosis_trainer.engines._types import InferenceEngine
from osmosis_trainer.models import is_embedded

__all__ = ["create_engine"]


def create_engine(model_spec: str, *, device: str = "auto", **kwargs: Any) -> InferenceEngine:
    """Build the engine a model spec names.

    - ``"embedded"`` (SmolLM2-135M-Instruct, offline) or a local model folder: :class:`HFEngine`.
    - an ``http(s)://`` URL: an OpenAI-compatible server, attached as :class:`VLLMEngine`
      (calls are trainable only if the server returns token ids, as vLLM does).
    - anything else: a LiteLLM model id (``openai/gpt-4o-mini``), :class:`LiteLLMEngine`.

    Extra keyword arguments go to the engine's constructor.
    """
    spec = model_spec.strip()
    if spec.startswith(("http://", "https://")):
        from osmosis_trainer.engines._vllm import VLLMEngine

        return VLLMEngine(base_url=spec, **kwargs)
    local = Path(spec).expanduser()
    if is_embedded(spec) or local.is_dir():
        for module in ("torch", "transformers"):
            if importlib.util.find_spec(module) is None:
                raise MissingExtraError(f"Serving {spec!r} in process", "trainer", module)
        from osmosis_trainer.engines._hf import HFEngine

        return HFEngine(spec, device=device, **kwargs)
    if spec.startswith(("/", "./", "../", "~")) or spec.endswith(("/", ".gguf")):
        raise ConfigError(
            f"model {spec!r} looks like a local path but no such folder exists. Use 'embedded', "
            "an existing model folder, an http(s):// server URL, or a LiteLLM id such as "
            "'openai/gpt-4o-mini'."
        )
    from osmosis_trainer.engines._litellm import LiteLLMEngine

    return LiteLLMEngine(spec, **kwargs)
