"""HTTP calls from a rollout server to the training cluster: LLM calls and the completion callback.

LLM calls (``{server_url}/v1/chat/completions``) are retried on 5xx, 429 and timeouts with
exponential backoff (jittered, ``Retry-After`` honoured); other 4xx answers fail at once. The
completion callback (``{server_url}/v1/rollout/completed``) is retried the same way.
"""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from typing import Any

import httpx

from osmosis_ai.chat import ChatResult, Message, parse_chat_completion
from osmosis_ai.errors import OsmosisError, PolicyCallError
from osmosis_ai.remote._protocol import RolloutResponse, redact_url
from osmosis_ai.remote._settings import ClientSettings

__all__ = ["CallbackDeliveryError", "ClusterClient"]

logger = logging.getLogger("osmosis")

_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class CallbackDeliveryError(OsmosisError):
    """The completion callback could not be delivered to the training cluster."""


class ClusterClient:
    """Talks to one or more training clusters over pooled ``httpx.AsyncClient`` instances.

    The connections are split over several small clients (picked by rollout id): httpx's pool
    does work proportional to its size for every request it hands out, which makes one pool
    of hundreds of connections slower than the requests it serves.
    """

    SHARD_SIZE = 25

    def __init__(
        self, settings: ClientSettings | None = None, *, http: httpx.AsyncClient | None = None
    ) -> None:
        """Args:
            settings: retry and timeout policy; default from ``OSMOSIS_ROLLOUT_CLIENT_*``.
            http: an existing client to use for every call (tests pass one with a mock or
                ASGI transport); it is closed by :meth:`aclose` like the ones built here.
        """
        self.settings = settings or ClientSettings.from_env()
        self._shards: list[httpx.AsyncClient] = [http] if http is not None else []

    def _client_for(self, key: str) -> httpx.AsyncClient:
        if not self._shards:
            s = self.settings
            count = max(1, -(-s.max_connections // self.SHARD_SIZE))
            per = max(1, -(-s.max_connections // count))
            self._shards = [
                httpx.AsyncClient(
                    timeout=httpx.Timeout(s.timeout_seconds, connect=s.connect_timeout_seconds),
                    limits=httpx.Limits(max_connections=per, max_keepalive_connections=per),
                )
                for _ in range(count)
            ]
        return self._shards[zlib.crc32(key.encode()) % len(self._shards)]

    async def aclose(self) -> None:
        shards, self._shards = self._shards, []
        for client in shards:
            await client.aclose()

    def _backoff(self, attempt: int, retry_after: str | None = None) -> float:
        s = self.settings
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), s.retry_backoff_max_seconds)
            except ValueError:
                pass
        base: float = min(s.retry_backoff_seconds * 2.0**attempt, s.retry_backoff_max_seconds)
        return base * random.uniform(0.5, 1.0)  # jitter: retries of many rollouts spread out

    async def chat(
        self,
        server_url: str,
        api_key: str | None,
        rollout_id: str,
        messages: list[Message],
        params: dict[str, Any],
    ) -> ChatResult:
        """One LLM call for ``rollout_id``; raises :class:`PolicyCallError` when it fails."""
        url = f"{server_url}/v1/chat/completions"
        shown = redact_url(url)
        body: dict[str, Any] = {"model": "default", **params, "messages": messages}
        body["rollout_id"] = rollout_id
        data = await self._post(
            url, api_key, body, self.settings.max_retries, what="LLM call", key=rollout_id
        )
        try:
            return parse_chat_completion(data)
        except PolicyCallError:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            raise PolicyCallError(f"LLM reply from {shown} is malformed: {exc}") from exc

    async def complete(self, server_url: str, api_key: str | None, response: RolloutResponse) -> None:
        """Post the completion callback; raises :class:`CallbackDeliveryError` when it fails."""
        url = f"{server_url}/v1/rollout/completed"
        body = response.model_dump(mode="json")
        try:
            await self._post(
                url, api_key, body, self.settings.completion_retries, what="completion callback",
                request_timeout=self.settings.completion_timeout_seconds, want_json=False,
                key=response.rollout_id,
            )
        except PolicyCallError as exc:
            raise CallbackDeliveryError(str(exc)) from exc

    async def _post(
        self,
        url: str,
        api_key: str | None,
        body: dict[str, Any],
        retries: int,
        *,
        what: str,
        request_timeout: float | None = None,
        want_json: bool = True,
        key: str = "",
    ) -> Any:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Messages end up in results anyone with the server key can read: never the URL's
        # credentials, never what the other side answered (server_url may be any host).
        shown = redact_url(url)
        extra: dict[str, Any] = {} if request_timeout is None else {"timeout": request_timeout}
        attempts = retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                resp = await self._client_for(key).post(url, json=body, headers=headers, **extra)
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if last:
                    raise PolicyCallError(
                        f"{what} to {shown} failed after {attempts} attempt(s): {type(exc).__name__}"
                        f"{': ' + str(exc) if str(exc) else ''}"
                    ) from exc
                await asyncio.sleep(self._backoff(attempt))
                continue
            if resp.status_code in _RETRY_STATUSES and not last:
                await asyncio.sleep(self._backoff(attempt, resp.headers.get("retry-after")))
                continue
            if resp.status_code >= 400:
                # The answer's text goes to the operator's log only (see ``shown`` above).
                logger.info("%s to %s answered HTTP %d: %.300s", what, shown, resp.status_code, resp.text)
                tried = f" after {attempts} attempt(s)" if resp.status_code in _RETRY_STATUSES else ""
                raise PolicyCallError(
                    f"{what} to {shown} answered HTTP {resp.status_code}{tried}",
                    status_code=resp.status_code,
                    body=resp.text[:2000],
                )
            if not want_json:
                return None
            try:
                return resp.json()
            except ValueError as exc:
                raise PolicyCallError(f"{what} to {shown} answered non-JSON") from exc
        raise AssertionError("unreachable")  # pragma: no cover
