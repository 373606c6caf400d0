"""LiteLLMEngine: hosted chat APIs (OpenAI, Anthropic, ...) for local evaluation.

Hosted APIs return no token ids, so calls served by this engine are recorded with empty token
fields and are not trainable.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from osmosis_ai.errors import MissingExtraError
from osmosis_ai.serving._engine import EngineError, GenerationRequest, GenerationResult
from osmosis_ai.serving._openai_reply import result_from_openai

__all__ = ["LiteLLMEngine"]


def _import_litellm() -> Any:
    if importlib.util.find_spec("litellm") is None:
        raise MissingExtraError("Hosted models through LiteLLM", "litellm", "litellm")
    # Offline-friendly: read the bundled cost map instead of fetching it.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


class LiteLLMEngine:
    """Call a hosted model by its LiteLLM id (``openai/gpt-4o-mini``, ``anthropic/...``).

    API keys come from the environment (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...), or
    ``api_key``. ``api_base`` points an ``openai/...`` or ``hosted_vllm/...`` id at any
    OpenAI-compatible server.

    Args:
        model_id: the LiteLLM model id.
        api_base: optional base URL override.
        api_key: optional key (default: the provider's environment variable).
        timeout_s: per-request timeout.
        extra: more keyword arguments passed to ``litellm.acompletion``.
    """

    provides_token_ids = False

    def __init__(
        self,
        model_id: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self._litellm = _import_litellm()
        self.name = "litellm"
        self.model_id = model_id
        self._api_base = api_base
        self._api_key = api_key
        self._timeout = timeout_s
        self._extra = dict(extra or {})

    @property
    def policy_version(self) -> int:
        return 0

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        tools = None if req.tool_choice == "none" else req.tools
        kwargs: dict[str, Any] = {
            "model": self.model_id,
            "messages": req.messages,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "timeout": self._timeout,
            **self._extra,
        }
        for key in ("max_tokens", "stop", "seed"):
            if (value := getattr(req, key)) is not None:
                kwargs[key] = value
        if tools:
            kwargs["tools"] = tools
            if req.tool_choice is not None:
                kwargs["tool_choice"] = req.tool_choice
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        try:
            resp = await self._litellm.acompletion(**kwargs)
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            raise EngineError(
                f"{self.model_id} failed: {exc}",
                status_code=400 if status == 400 else 502,
                code="upstream_error",
            ) from exc
        data = resp.model_dump() if hasattr(resp, "model_dump") else dict(resp)
        result = result_from_openai(data, parse_tools=False, model=self.model_id, policy_version=0)
        # Hosted APIs give no token data; drop anything partial so the call is plainly untrainable.
        return result.model_copy(
            update={"prompt_token_ids": None, "completion_token_ids": None, "logprobs": None}
        )

    async def load_adapter(self, path: str, version: int) -> None:
        raise EngineError(
            f"{self.model_id} is a hosted model; it cannot load adapters (train with the "
            "embedded model, a local model folder or a vLLM server)",
            status_code=400,
            code="adapters_unsupported",
        )

    async def close(self) -> None:
        return None
