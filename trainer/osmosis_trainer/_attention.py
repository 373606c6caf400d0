"""Which of transformers' own attention implementations a CPU forward pass runs: eager or SDPA.

On CPU, torch's SDPA runs a flash-attention kernel whose fixed cost dominates at the sizes an
RL step mostly has: one-token decode steps over a short cache, and ~90-token training rows. On
the embedded SmolLM2-135M (2 vCPUs, AMD EPYC, bf16) transformers' ``eager`` attention (matmul,
softmax, matmul) made a decode step ~1.2x and a 32-completion update ~1.23x faster than SDPA;
at a 440-token shared prompt the gain fell to 1.05x for 1.6 GB more memory, and with two
2000-token rows eager was 3x slower and took 20 GB (it keeps each layer's whole score matrix for
the backward pass). So a forward runs eager while one layer's score matrix stays small and SDPA
above that (BENCHMARKS.md, ``trainer_real``, the ``attention`` row).

The choice is made per forward by a pre-hook on the decoder, from the call's shapes, through
transformers' public ``set_attn_implementation``. A ``copy.deepcopy`` of the model (the HF
engine's own module copy) keeps the hook and has a config of its own, so the engine's choice
never changes the trainer's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

__all__ = ["EAGER_MAX_SCORES", "install_attention_rule", "pick_attention"]

EAGER_MAX_SCORES = 1 << 20
"""Largest score matrix (rows x heads x queries x keys elements, one layer) run eager."""

Attention = Literal["eager", "sdpa"]


def pick_attention(rows: int, heads: int, queries: int, keys: int) -> Attention:
    """``"eager"`` while one layer's score matrix has at most :data:`EAGER_MAX_SCORES`
    elements, else ``"sdpa"``."""
    return "eager" if rows * heads * queries * keys <= EAGER_MAX_SCORES else "sdpa"


def _past_length(kwargs: dict[str, Any]) -> int:
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    length = getattr(cache, "get_seq_length", None)
    return int(length()) if callable(length) else 0


def _choose(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Forward pre-hook of the decoder: set the attention for this call's shapes."""
    ids: torch.Tensor | None = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    if ids is None or ids.device.type != "cpu":
        return
    rows, queries = int(ids.shape[0]), int(ids.shape[1])
    mask = kwargs.get("attention_mask")
    keys = int(mask.shape[-1]) if mask is not None else queries + _past_length(kwargs)
    heads = int(getattr(module.config, "num_attention_heads", 1) or 1)
    module.set_attn_implementation(pick_attention(rows, heads, queries, keys))


def install_attention_rule(model: Any) -> None:
    """Let each CPU forward of ``model``'s decoder pick eager or SDPA by size.

    A model loaded with another implementation (flash attention on a GPU), or whose decoder
    cannot switch between the two, is left as it is.
    """
    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else None
    config = getattr(decoder, "config", None)
    # transformers' models dispatch on this field (its attention-interface docs name it).
    current = getattr(config, "_attn_implementation", None)
    if decoder is None or current not in ("eager", "sdpa"):
        return
    try:
        for name in ("eager", "sdpa"):
            decoder.set_attn_implementation(name)
            if getattr(config, "_attn_implementation", None) != name:  # request ignored
                return
    except (ValueError, ImportError):  # an implementation this model does not support
        return
    finally:
        decoder.set_attn_implementation(current)
    decoder.register_forward_pre_hook(_choose, with_kwargs=True)
