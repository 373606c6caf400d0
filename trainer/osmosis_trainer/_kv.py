"""The KV cache's keyword, across the transformers versions osmosis supports.

transformers renamed its models' ``past_key_values`` argument and output field to ``cache``
after 5.20. The old name warns from then on and goes in 5.40, where a model would take it as an
unknown keyword and silently run without the cache; osmosis supports ``>=5.16,<6`` (the vllm
session pins ``<5.20``), so it passes whichever name the model's own ``forward`` declares.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from osmosis_trainer._protocols import DecoderOutput, KVCache

__all__ = ["cache_kwargs", "output_cache"]


@cache
def _keyword(forward: Callable[..., object]) -> str:
    params = inspect.signature(forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_kwargs(model: object, kv: KVCache) -> dict[str, KVCache]:
    """``{name: kv}`` for ``model(...)``; peft's wrapper is looked through to its model."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    forward: Callable[..., object] = getattr(type(base), "forward")  # noqa: B009
    return {_keyword(forward): kv}


def output_cache(out: DecoderOutput) -> KVCache:
    """The cache a forward with ``use_cache=True`` filled (``cache`` or ``past_key_values``)."""
    filled = getattr(out, "cache", None)
    return cast("KVCache", filled if filled is not None else out.past_key_values)
