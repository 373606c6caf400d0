"""Attention on CPU for the models we own: transformers' eager attention for calls of many
queries whose score matrix is small (packed training rows, short prefills), transformers'
SDPA for every other call (one-token decoding steps, long prompts).

torch's CPU SDPA kernel (flash) is slow on small multi-query problems: a training
micro-batch of two packed 230-token rows of the embedded SmolLM2-135M (forward and backward,
bf16, LoRA) took 1.03 s eager against SDPA's 1.20 s, and the same rows' forward without
gradients 0.40 s against 0.42 s. A one-token decoding step is the opposite: eager first
copies the whole KV cache to the query heads' count (``repeat_kv``, 3 -> 9 heads for
SmolLM2) on every step and layer, where SDPA reads the cache as it is; the engine's
multi-turn rollouts (32 conversations x 3 turns) ran 1.3x (40-token prompts) to 1.5x
(600-token system prompt) faster with SDPA for decoding. Above :data:`EAGER_MAX_SCORES`
score elements per call SDPA stays too: eager materialises (and, in training, keeps for the
backward) every ``[heads, T, T]`` score matrix, gigabytes for a long prompt. The
``small_attention`` row of BENCHMARKS.md's ``trainer_real`` judges the rule on the whole
training step.

Both functions are the model's own; this module only picks one per call, through
transformers' documented ``AttentionInterface``. The mask is eager's additive float mask
(registered with ``AttentionMaskInterface``), which SDPA takes as a bias as it is.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["EAGER_MAX_SCORES", "SMALL_ATTENTION", "eager_fits", "use_small_attention"]

SMALL_ATTENTION = "osmosis_eager_small"
"""The attention implementation name registered with transformers."""

EAGER_MAX_SCORES = 1 << 21
"""Most score elements (batch x heads x queries x keys) one call computes eagerly: 8 MB in
fp32 per layer, about 0.4 GB over a 30-layer backward. Two packed 256-token rows of
SmolLM2-135M (9 heads) are 1.2 M."""


def eager_fits(batch: int, heads: int, queries: int, keys: int) -> bool:
    """Whether a call of this shape runs eagerly (else SDPA): several queries, few scores."""
    return queries > 1 and batch * heads * queries * keys <= EAGER_MAX_SCORES


def _eager_of(module: object) -> Callable[..., Any] | None:
    """The ``eager_attention_forward`` of the modeling file that defines ``module``'s class
    (every transformers decoder defines one, with one signature)."""
    found = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    return found if callable(found) else None


def _eager_when_small(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    **kwargs: Any,
) -> tuple[Any, Any]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    batch, heads, queries, _ = query.shape  # [B, heads, T, D]
    small = eager_fits(batch, heads, queries, key.shape[2])
    attend = (_eager_of(module) if small else None) or sdpa_attention_forward
    out: tuple[Any, Any] = attend(module, query, key, value, attention_mask, **kwargs)
    return out


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(SMALL_ATTENTION, _eager_when_small)
    AttentionMaskInterface.register(SMALL_ATTENTION, eager_mask)


def use_small_attention(model: Any) -> bool:
    """Switch ``model`` (a CPU model osmosis owns: the engine's copy, the job's trained
    model) from SDPA to :data:`SMALL_ATTENTION`.

    Only a model on transformers' SDPA whose modeling file has an eager function is switched
    (another implementation was the user's choice). Returns whether it was.
    """
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    config = getattr(base, "config", None)
    # transformers has no public getter for the implementation in use; its docs read this one.
    if getattr(config, "_attn_implementation", None) != "sdpa" or _eager_of(base) is None:
        return False
    _register()
    base.set_attn_implementation(SMALL_ATTENTION)
    return True
