"""Attention on CPU: matmul, softmax, matmul for small score matrices, torch's SDPA otherwise.

On CPU torch's flash-attention kernel pays a fixed cost per call and per block that dominates
when the score matrix is small, and its backward pass is slow: training on rows of a few hundred
tokens is the common case here. On the embedded SmolLM2-135M (bf16, 2 cores) the plain form
makes the forward and backward of a micro-batch of 92-token rows ~18 % faster, and a decoding
step at batch 32 without padding ~28 % faster (transformers then calls SDPA with grouped-query
heads, a slow CPU path); decoding steps with a padding mask cost about the same either way
(slightly more at batch 1-8), and prefill the same. The whole step: BENCHMARKS.md, trainer_real.
Larger score matrices go to SDPA, whose memory does not grow with the square of the length.

Registered with transformers' own extension points (``AttentionInterface`` and
``AttentionMaskInterface``) under :data:`NAME`; :func:`use_cpu_attention` switches a model to it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["NAME", "attention", "use_cpu_attention"]

logger = logging.getLogger(__name__)

NAME = "osmosis_cpu"
_MAX_SCORES = 1 << 20
"""Largest ``batch * heads * query * key`` computed with plain matmuls (fp32 scores: 4 MB per
layer, kept for the backward pass)."""


def attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``query`` ``[B, H, Q, D]``, ``key`` and
    ``value`` ``[B, KV, K, D]``; returns ``[B, Q, H, D]``.

    ``attention_mask`` is what ``sdpa_mask`` builds: ``None`` (plain causal) or a bool
    ``[B|1, 1, Q, K]`` (True: attend) or an additive float mask.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, h, q, d = query.shape
    kv, k = key.shape[1], key.shape[2]
    plain = (
        query.device.type == "cpu"
        and dropout == 0.0
        and b * h * q * k <= _MAX_SCORES
        and h % kv == 0
        and not kwargs.get("softcap")
        and kwargs.get("s_aux") is None
    )
    if not plain:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    g = h // kv  # query heads per key/value head (grouped-query attention), without copies
    scale = scaling if scaling is not None else d**-0.5
    scores = torch.matmul(query.reshape(b, kv, g * q, d), key.transpose(-1, -2))  # [B, KV, G*Q, K]
    scores = scores.view(b, kv, g, q, k).float() * scale
    low = torch.finfo(
        torch.float32
    ).min  # not -inf: a row with nothing to attend (padding) stays finite
    if attention_mask is not None:
        m = attention_mask[:, :, None]  # [B|1, 1, 1, Q, K]
        scores = scores.masked_fill(~m, low) if m.dtype == torch.bool else scores + m
    elif q > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True)):
        allowed = torch.ones(q, k, dtype=torch.bool, device=query.device).tril(k - q)
        scores = scores.masked_fill(~allowed, low)
    probs = torch.softmax(scores, dim=-1).to(value.dtype).view(b, kv, g * q, k)
    out = torch.matmul(probs, value)  # [B, KV, G*Q, D]
    return out.view(b, h, q, d).transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def use_cpu_attention(model: Any) -> None:
    """Switch ``model`` (on CPU, currently on SDPA) to :func:`attention`; models that do not
    take registered attention functions keep theirs."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return
    _register()
    try:
        model.set_attn_implementation(NAME)
    except (ValueError, KeyError, AttributeError, NotImplementedError) as exc:
        logger.debug("keeping SDPA attention for %s: %s", type(model).__name__, exc)
