"""OpenAIServerEngine: any OpenAI-compatible chat server (vLLM, SGLang, ...), attached by URL.

vLLM's extra fields (``return_token_ids``, sampler logprobs) make its calls trainable; a server
without them still serves, untrainably. Adapters load through vLLM's runtime LoRA routes.
Launching a vLLM server is the trainer's job (``osmosis_trainer.engines.VLLMEngine``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import httpx

from osmosis_ai._http import loop_client
from osmosis_ai.config import redact_url, redact_urls
from osmosis_ai.serving._engine import EngineError, GenerationRequest, GenerationResult
from osmosis_ai.serving._openai_reply import result_from_openai

__all__ = ["OpenAIServerEngine"]

logger = logging.getLogger("osmosis")


class OpenAIServerEngine:
    """Generate through an OpenAI-compatible server, asking vLLM for token ids and logprobs.

    Every request asks for ``return_token_ids`` and logprobs; a server that refuses them
    yields calls without token data (recorded, not trainable). Tools are sent so the
    template renders them, but ``tool_choice`` is not (vLLM answers 400 to ``"auto"`` without
    a tool parser); ``<tool_call>`` blocks are parsed from the text here.

    Each adapter version is loaded under a fresh name ``policy-v{N}`` (re-using a name can
    serve stale prefix-cache blocks, vllm-project/vllm#42125) and the previous one is unloaded
    once no request of this engine uses it.

    Args:
        base_url: the server (with or without a trailing ``/v1``); ``None`` only for
            subclasses that start a server and set it in :meth:`_launch`.
        model: the served base model name (default: the first one ``/v1/models`` lists).
        request_timeout_s: per-request timeout.
        api_key: sent as a bearer token.
    """

    def __init__(
        self,
        base_url: str | None,
        *,
        model: str | None = None,
        request_timeout_s: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        self.name = "vllm"
        self.provides_token_ids = True
        self._base_model = model
        self._timeout = request_timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._base_url = base_url.rstrip("/").removesuffix("/v1") if base_url else None
        self._served: str | None = None  # adapter name, or None for the base model
        self._version = 0
        self._in_flight: Counter[str] = Counter()
        self._start_lock = asyncio.Lock()
        self._plain_openai = False
        self._started = False

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("the server has not been started yet")
        return self._base_url

    async def start(self) -> None:
        """Launch a server (subclasses) and learn the served model's name; idempotent."""
        async with self._start_lock:
            if self._started:
                return
            await self._launch()
            if self._base_model is None:
                self._base_model = await self._discover_model()
            self._started = True

    async def _launch(self) -> None:
        """Start the server this engine owns (nothing here: the server is attached)."""

    async def _discover_model(self) -> str:
        data = await self._request("GET", "/v1/models")
        models = [m.get("id") for m in data.get("data", []) if m.get("id")]
        if not models:
            raise EngineError(
                f"{redact_url(self.base_url)}/v1/models lists no model", status_code=503
            )
        return str(models[0])

    async def close(self) -> None:
        self._started = False

    # -- HTTP --------------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, body: Mapping[str, object] | None = None
    ) -> Any:
        url = f"{self.base_url}{path}"
        try:
            # The loop's keep-alive client, not a client per request (see osmosis_ai._http).
            client = await loop_client()
            resp = await client.request(
                method, url, json=body, headers=self._headers, timeout=self._timeout
            )
        except httpx.TransportError as exc:
            raise EngineError(
                f"the server at {redact_url(self.base_url)} is unreachable: "
                f"{redact_urls(repr(exc))}",
                status_code=503,
                code="engine_unavailable",
            ) from exc
        if resp.status_code >= 400:
            status = 400 if resp.status_code in (400, 422) else 502
            raise EngineError(
                f"{redact_url(self.base_url)} answered HTTP {resp.status_code} to {method} "
                f"{path}: {resp.text[:500]}",
                status_code=status,
                code="upstream_error",
            )
        try:
            return resp.json() if resp.content else {}
        except ValueError:  # the LoRA routes answer plain text
            return {"text": resp.text}

    # -- InferenceEngine ---------------------------------------------------------------------

    async def generate(self, req: GenerationRequest) -> GenerationResult:
        await self.start()
        served = self._served or str(self._base_model)
        tools = None if req.tool_choice == "none" else req.tools
        body: dict[str, Any] = {
            "model": served,
            "messages": req.messages,
            "temperature": req.temperature,
            "top_p": req.top_p,
        }
        if not self._plain_openai:
            body.update(logprobs=True, top_logprobs=0, return_token_ids=True)
        for key in ("max_tokens", "stop", "seed"):
            if (value := getattr(req, key)) is not None:
                body[key] = value
        if tools:
            body["tools"] = tools
        self._in_flight[served] += 1
        try:
            try:
                data = await self._request("POST", "/v1/chat/completions", body)
            except EngineError as exc:
                if self._plain_openai or exc.status_code != 400 or "token_ids" not in str(exc):
                    raise
                # Not vLLM: a server that refuses the token fields. Serve without them
                # (calls are then recorded as not trainable).
                logger.warning(
                    "%s refuses return_token_ids; its calls are not trainable", self.base_url
                )
                self._plain_openai = True
                for key in ("logprobs", "top_logprobs", "return_token_ids"):
                    body.pop(key)
                data = await self._request("POST", "/v1/chat/completions", body)
        finally:
            self._in_flight[served] -= 1
        result = result_from_openai(
            data, parse_tools=bool(tools), model=served, policy_version=self._version
        )
        if result.completion_token_ids is None:
            self.provides_token_ids = False
        return result

    async def load_adapter(self, path: str, version: int) -> None:
        await self.start()
        name = f"policy-v{version}"
        folder = await asyncio.to_thread(os.path.abspath, path)
        await self._request(
            "POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": folder}
        )
        old, self._served, self._version = self._served, name, version
        if old is not None and old != name:
            await self._unload_when_idle(old)

    async def _unload_when_idle(self, name: str, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        # Polling, not an Event: requests may run on other event loops than this one.
        while self._in_flight[name] > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        try:
            await self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        except EngineError as exc:
            logger.warning("could not unload adapter %s: %s", name, exc)
        self._in_flight.pop(name, None)
