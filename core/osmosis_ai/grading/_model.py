"""JudgeModel: where judge calls go (a hosted model, an OpenAI-compatible server, a local model).

The judge is never the policy being trained unless the user points it there: it is its own
model spec, resolved like ``model_path`` elsewhere in osmosis:

- ``"embedded"`` or a local model folder: served in process by osmosis's own engine (offline;
  needs the trainer extra, found through the ``osmosis.engines`` entry points);
- an ``http(s)://.../v1`` URL: any OpenAI-compatible server (vLLM, a policy gateway, OpenAI);
- anything else: a LiteLLM model id (``openai/gpt-4o-mini``), keys from the environment.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field, ValidationError

from osmosis_ai.errors import ConfigError, MissingExtraError, OsmosisError
from osmosis_ai.rollout import Message

__all__ = ["JudgeModel", "JudgeModelError", "JudgeReply"]


class JudgeModelError(OsmosisError):
    """A judge model call failed (network, HTTP error, engine error)."""


@dataclass
class JudgeReply:
    """One judge reply: its text, token usage, cost, and per-position top logprobs if given."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    """``None`` when the model has no known price."""
    top_logprobs: list[dict[str, float]] | None = None
    """For each generated token, ``{token text: logprob}`` of the most likely candidates."""
    sampled_tokens: list[str] = field(default_factory=list)
    """The generated tokens' texts, aligned with ``top_logprobs``."""
    first_token_logprob: float | None = None
    """The model's logprob of the first generated token (servers and engines that return the
    sampled tokens' logprobs, such as osmosis's own gateway and engines)."""


def _import_litellm() -> Any:
    if importlib.util.find_spec("litellm") is None:
        raise MissingExtraError("A hosted judge model through LiteLLM", "litellm", "litellm")
    # Offline-friendly: read the bundled cost map instead of fetching it.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


def _price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD cost from LiteLLM's cost map, or None when LiteLLM or the model's price is unknown."""
    if importlib.util.find_spec("litellm") is None:
        return None
    litellm = _import_litellm()
    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # litellm raises a bare Exception for unmapped models
        return None
    return float(prompt_cost) + float(completion_cost)


class _LogprobEntry(BaseModel):
    token: str = ""
    logprob: float | None = None
    top_logprobs: list[_LogprobEntry] | None = None


class _Logprobs(BaseModel):
    content: list[_LogprobEntry] | None = None


class _ReplyMessage(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    message: _ReplyMessage
    logprobs: _Logprobs | None = None


class _Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Completion(BaseModel):
    """The part of an OpenAI chat completion a judge reads; other fields are ignored."""

    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


def _completion(model: str, data: Any) -> _Completion:
    """``data`` read as a chat completion, or :class:`JudgeModelError` saying what is wrong
    (the reply becomes a failed verdict, never an exception out of the judge)."""
    try:
        return _Completion.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "reply"
        raise JudgeModelError(
            f"judge model {model}: the reply is not a chat completion ({where}: "
            f"{err.get('msg', 'invalid')}): {str(data)[:200]}"
        ) from None


def _logprob_tables(choice: _Choice) -> tuple[list[dict[str, float]] | None, list[str]]:
    content = (choice.logprobs.content if choice.logprobs else None) or []
    if not content or not any(entry.top_logprobs for entry in content):
        return None, []
    tables = [
        {
            c.token: c.logprob if c.logprob is not None else float("-inf")
            for c in e.top_logprobs or []
        }
        for e in content
    ]
    return tables, [e.token for e in content]


def _openai_params(
    model: str,
    messages: list[Message],
    temperature: float,
    max_tokens: int,
    top_logprobs: int | None,
    seed: int | None,
) -> dict[str, Any]:
    """The OpenAI chat-completions parameters of one judge call (HTTP body or LiteLLM call)."""
    params: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
    if seed is not None:
        params["seed"] = seed
    if top_logprobs:
        params["logprobs"] = True
        params["top_logprobs"] = top_logprobs
    return params


def _reply_from_openai(completion: _Completion, cost: float | None) -> JudgeReply:
    choice = completion.choices[0]
    usage = completion.usage or _Usage()
    tables, tokens = _logprob_tables(choice)
    content = (choice.logprobs.content if choice.logprobs else None) or []
    return JudgeReply(
        text=choice.message.content or "",
        prompt_tokens=usage.prompt_tokens or 0,
        completion_tokens=usage.completion_tokens or 0,
        cost_usd=cost,
        top_logprobs=tables,
        sampled_tokens=tokens,
        first_token_logprob=content[0].logprob if content else None,
    )


class JudgeModel:
    """A model to judge with. Cheap to build; a local model loads on first use.

    Args:
        model: ``"embedded"``, a local model folder, an ``http(s)://`` base URL (ending in
            ``/v1``), or a LiteLLM model id.
        api_key: key for an HTTP server or a hosted model (default: the provider's variable).
        served_name: the model name sent to an HTTP server (default ``"default"``).
        price_as: a LiteLLM id whose prices apply to an HTTP server's calls (e.g. the same
            model behind a proxy); without it such calls count as unpriced.
        timeout_s: per-call timeout.
        extra: more keyword arguments for ``litellm.acompletion`` (hosted models only).
        engine: an already built ``osmosis_ai.serving.InferenceEngine`` to call in process
            (the caller keeps it: :meth:`aclose` leaves it open).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        served_name: str = "default",
        price_as: str | None = None,
        timeout_s: float = 120.0,
        extra: dict[str, Any] | None = None,
        engine: Any = None,
    ) -> None:
        self.model = model.strip()
        self.api_key = api_key
        self.served_name = served_name
        self.price_as = price_as
        self.timeout_s = timeout_s
        self.extra = dict(extra or {})
        self._engine = engine
        self._owns_engine = engine is None  # an engine passed in is the caller's to close
        self._engine_lock: asyncio.Lock | None = None
        self.kind = self._kind()

    def _kind(self) -> str:
        if self._engine is not None:
            return "engine"
        if self.model.startswith(("http://", "https://")):
            return "http"
        from osmosis_ai.serving._factory import EMBEDDED_ALIASES

        if self.model in EMBEDDED_ALIASES or Path(self.model).expanduser().is_dir():
            return "engine"
        if self.model.startswith(("/", "./", "../", "~")) or self.model.endswith(("/", ".gguf")):
            raise ConfigError(
                f"judge model {self.model!r} looks like a local path but no such folder exists. "
                "Use 'embedded', an existing model folder, an http(s):// server URL, or a "
                "LiteLLM id such as 'openai/gpt-4o-mini'."
            )
        return "litellm"

    def __repr__(self) -> str:
        return f"JudgeModel({self.model!r}, kind={self.kind!r})"

    @property
    def supports_top_logprobs(self) -> bool:
        """Whether replies may carry top logprobs (our in-process engines give none)."""
        return self.kind != "engine"

    async def chat(
        self,
        messages: list[Message],
        *,
        temperature: float = 0.0,
        max_tokens: int = 256,
        top_logprobs: int | None = None,
        seed: int | None = None,
    ) -> JudgeReply:
        """One chat completion. Raises :class:`JudgeModelError` when the call fails."""
        if self.kind == "http":
            return await self._chat_http(messages, temperature, max_tokens, top_logprobs, seed)
        if self.kind == "litellm":
            return await self._chat_litellm(messages, temperature, max_tokens, top_logprobs, seed)
        return await self._chat_engine(messages, temperature, max_tokens, seed)

    async def _chat_http(
        self,
        messages: list[Message],
        temperature: float,
        max_tokens: int,
        top_logprobs: int | None,
        seed: int | None,
    ) -> JudgeReply:
        body = _openai_params(
            self.served_name, messages, temperature, max_tokens, top_logprobs, seed
        )
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = self.model.rstrip("/") + "/chat/completions"
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                resp = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise JudgeModelError(f"judge model {self.model}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            raise JudgeModelError(
                f"judge model {self.model}: HTTP {resp.status_code}: {resp.text[:300]}"
            )
        try:
            data = resp.json()
        except ValueError:
            raise JudgeModelError(
                f"judge model {self.model}: the reply is not JSON: {resp.text[:200]!r}"
            ) from None
        completion = _completion(self.model, data)
        usage = completion.usage or _Usage()
        cost = (
            _price(self.price_as, usage.prompt_tokens or 0, usage.completion_tokens or 0)
            if self.price_as
            else None
        )
        return _reply_from_openai(completion, cost)

    async def _chat_litellm(
        self,
        messages: list[Message],
        temperature: float,
        max_tokens: int,
        top_logprobs: int | None,
        seed: int | None,
    ) -> JudgeReply:
        litellm = _import_litellm()
        kwargs = {
            **_openai_params(self.model, messages, temperature, max_tokens, top_logprobs, seed),
            "timeout": self.timeout_s,
            **self.extra,
        }
        if self.api_key:
            kwargs["api_key"] = self.api_key
        try:
            resp = await litellm.acompletion(**kwargs)
        except Exception as exc:  # litellm raises provider-specific types
            raise JudgeModelError(f"judge model {self.model}: {exc}") from exc
        data = resp.model_dump() if hasattr(resp, "model_dump") else resp
        completion = _completion(self.model, data)
        usage = completion.usage or _Usage()
        cost = _price(self.model, usage.prompt_tokens or 0, usage.completion_tokens or 0)
        return _reply_from_openai(completion, cost)

    async def _engine_instance(self) -> Any:
        if self._engine is None:
            if self._engine_lock is None:
                self._engine_lock = asyncio.Lock()
            async with self._engine_lock:
                if self._engine is None:
                    from osmosis_ai.serving import create_engine

                    # Loading takes seconds (the embedded model ~20 s): keep the loop free.
                    self._engine = await asyncio.to_thread(create_engine, self.model)
        return self._engine

    async def _chat_engine(
        self, messages: list[Message], temperature: float, max_tokens: int, seed: int | None
    ) -> JudgeReply:
        from osmosis_ai.serving import EngineError, GenerationRequest

        engine = await self._engine_instance()
        req = GenerationRequest(
            messages=messages,
            temperature=temperature,
            top_p=1.0,
            max_tokens=max_tokens,
            seed=seed,
            tool_choice="none",
        )
        try:
            result = await engine.generate(req)
        except EngineError as exc:
            raise JudgeModelError(f"judge model {self.model}: {exc}") from exc
        # A model served by our own engine runs here: it costs nothing per call.
        return JudgeReply(
            text=result.text,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            cost_usd=0.0,
            first_token_logprob=result.logprobs[0] if result.logprobs else None,
        )

    async def aclose(self) -> None:
        """Release a local engine (HTTP and hosted models hold nothing between calls)."""
        if self._engine is not None and self._owns_engine:
            await self._engine.close()
            self._engine = None
