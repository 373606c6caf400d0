"""The trainer's engine factory, registered in the ``osmosis.engines`` entry-point group.

``osmosis_ai.serving.create_engine`` calls it for model specs that need torch (the embedded
model, a local transformers folder); core thereby serves them without importing the trainer.
"""

from __future__ import annotations

import importlib.util
from typing import TypedDict, Unpack

from osmosis_ai.errors import MissingExtraError
from osmosis_ai.serving import InferenceEngine

__all__ = ["HFEngineOptions", "hf_engine"]


class HFEngineOptions(TypedDict, total=False):
    """:class:`~osmosis_trainer.engines.HFEngine`'s keyword options (see its docstring)."""

    max_batch_size: int
    max_new_tokens: int
    batch_wait_ms: float
    copy_model: bool
    dtype: str
    seed: int | None
    share_weights: bool
    merge_adapters: bool


def hf_engine(
    model_spec: str, *, device: str = "auto", **kwargs: Unpack[HFEngineOptions]
) -> InferenceEngine:
    """:class:`~osmosis_trainer.engines.HFEngine` for the embedded model or a model folder."""
    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(f"Serving {model_spec!r} in process", "trainer", module)
    from osmosis_trainer.engines._hf import HFEngine

    return HFEngine(model_spec, device=device, **kwargs)
