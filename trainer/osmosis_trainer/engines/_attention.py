"""The HF engine's attention on CPU: transformers' eager attention for one-token decoding
steps, transformers' SDPA for every longer query.

torch's CPU SDPA kernel (flash) is slow for a single query row: decoding 32 rows x 64 tokens
of the embedded SmolLM2-135M in bf16 spent a third of its time in it, and ran 1.39x faster
with eager's two matmuls for those steps (the ``decode_attention`` row of BENCHMARKS.md's
``trainer_real`` judges it on the whole training step). Prefill keeps SDPA: eager materialises
every ``[heads, T, T]`` score matrix, gigabytes for a long prompt.

Both functions are the model's own; this module only picks one per call, through
transformers' documented ``AttentionInterface``. The mask is eager's additive float mask
(registered with ``AttentionMaskInterface``), which SDPA takes as a bias as it is.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["DECODE_ATTENTION", "use_decode_attention"]

DECODE_ATTENTION = "osmosis_eager_decode"
"""The attention implementation name registered with transformers."""


def _eager_of(module: object) -> Callable[..., Any] | None:
    """The ``eager_attention_forward`` of the modeling file that defines ``module``'s class
    (every transformers decoder defines one, with one signature)."""
    found = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    return found if callable(found) else None


def _eager_decode_else_sdpa(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    **kwargs: Any,
) -> tuple[Any, Any]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    eager = _eager_of(module) if query.shape[2] == 1 else None  # query: [B, heads, T, D]
    attend = eager or sdpa_attention_forward
    out: tuple[Any, Any] = attend(module, query, key, value, attention_mask, **kwargs)
    return out


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(DECODE_ATTENTION, _eager_decode_else_sdpa)
    AttentionMaskInterface.register(DECODE_ATTENTION, eager_mask)


def use_decode_attention(model: Any) -> bool:
    """Switch ``model`` (a CPU model the engine owns) from SDPA to :data:`DECODE_ATTENTION`.

    Only a model on transformers' SDPA whose modeling file has an eager function is switched
    (another implementation was the user's choice). Returns whether it was.
    """
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    config = getattr(base, "config", None)
    # transformers has no public getter for the implementation in use; its docs read this one.
    if getattr(config, "_attn_implementation", None) != "sdpa" or _eager_of(base) is None:
        return False
    _register()
    base.set_attn_implementation(DECODE_ATTENTION)
    return True
