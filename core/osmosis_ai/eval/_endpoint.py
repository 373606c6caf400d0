"""The policy endpoint of a local eval: the policy gateway in front of the model's engine.

``model`` is what ``model_path`` / ``--model`` say: ``"embedded"`` (SmolLM2-135M-Instruct on the
HF engine, offline), a local transformers folder (HF engine), an ``http(s)://`` URL of an
OpenAI-compatible server such as vLLM, or a LiteLLM model id (``openai/gpt-4o-mini``; keys come
from the environment). The serving layer (``osmosis_ai.serving``) provides the gateway and the
engines; it is imported only here, when an eval actually runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from osmosis_ai.rollout.scope import PolicyEndpoint

__all__ = ["open_policy_endpoint"]


@contextlib.asynccontextmanager
async def open_policy_endpoint(
    model: str, sampling: dict[str, Any], *, adapter: Path | None = None,
    max_body_bytes: int | None = None,
) -> AsyncIterator[PolicyEndpoint]:
    """Start a gateway for ``model`` on 127.0.0.1 and yield it; stop it and its engine after.

    ``adapter``: a PEFT LoRA folder (a trained checkpoint's) served on top of ``model``.
    ``max_body_bytes``: the gateway's request-body limit (default ``[gateway]``'s default).
    """
    # Both raise MissingExtraError naming the pip command when an extra is missing.
    from osmosis_ai.config import SamplingConfig
    from osmosis_ai.serving import create_engine, new_api_key, return_freed_memory
    from osmosis_ai.serving.gateway import PolicyGateway

    # Loading a model takes seconds (the embedded one ~20 s): keep the event loop free.
    engine = await asyncio.to_thread(create_engine, model)
    try:
        if adapter is not None:
            await engine.load_adapter(str(adapter), 1)
        # A key per eval run; its rollouts get it through gateway.route().
        async with PolicyGateway(
            engine, sampling=SamplingConfig.from_params(sampling), max_body_bytes=max_body_bytes,
            api_key=new_api_key(),
        ) as gateway:
            yield gateway
    finally:
        await engine.close()
        # An eval loads one engine per model: without this each one's freed decode buffers
        # stay resident, and a run's held-out evals grew its worker by ~1 GB per model.
        del engine
        await asyncio.to_thread(return_freed_memory)
