"""The training cluster's ``/v1/rollout/completed`` endpoint, mounted on the policy gateway.

A remote rollout server posts its result to ``{server_url}/v1/rollout/completed``. The bridge
gives it ``server_url = {gateway}/rollouts/{rollout_id}/samples/main``, so the callback lands on
the gateway's scoped path, where this router resolves the future the bridge awaits. Futures may
belong to another event loop than the gateway's (the gateway can run in its own thread), so they
are resolved thread-safely.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from osmosis_ai.remote import RolloutResponse

__all__ = ["RemoteCallbacks"]

logger = logging.getLogger("osmosis")


class RemoteCallbacks:
    """Pending remote rollouts, and the router that receives their completion callbacks.

    Args:
        api_key: the bearer key callbacks must carry (the gateway's key); ``None``: no auth.
    """

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key
        self._pending: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[RolloutResponse]]] = {}
        self.stats = {"received": 0, "duplicates": 0, "unknown": 0, "rejected": 0}
        self.router = self._build_router()

    def __deepcopy__(self, memo: dict[int, Any]) -> RemoteCallbacks:
        return self  # shared by every rollout's (deep-copied) workflow config

    @classmethod
    def attach(cls, gateway: Any) -> RemoteCallbacks:
        """Create callbacks for ``gateway`` (a ``PolicyGateway``) and mount them on its app."""
        callbacks = cls(api_key=getattr(gateway, "api_key", None))
        gateway.app.include_router(callbacks.router)
        return callbacks

    def expect(self, rollout_id: str) -> asyncio.Future[RolloutResponse]:
        """Register ``rollout_id`` before its init is sent; await the returned future."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RolloutResponse] = loop.create_future()
        self._pending[rollout_id] = (loop, future)
        return future

    def discard(self, rollout_id: str) -> None:
        """Forget ``rollout_id`` (done, failed or cancelled); later callbacks are ignored."""
        self._pending.pop(rollout_id, None)

    def deliver(self, response: RolloutResponse) -> bool:
        """Resolve the rollout's future; ``False`` when nobody waits for it (any more)."""
        entry = self._pending.get(response.rollout_id)
        if entry is None:
            self.stats["unknown"] += 1
            return False
        loop, future = entry

        def _set() -> None:
            if future.done():
                self.stats["duplicates"] += 1
            else:
                future.set_result(response)

        self.stats["received"] += 1
        if loop.is_closed():
            return False
        loop.call_soon_threadsafe(_set)
        return True

    def _authorized(self, header: str | None) -> bool:
        if self.api_key is None:
            return True
        token = (header or "").strip()
        if token[:7].lower() == "bearer ":
            token = token[7:].strip()
        return hmac.compare_digest(token.encode(), self.api_key.encode())

    def _build_router(self) -> APIRouter:
        router = APIRouter()

        async def completed(request: Request, rollout_id: str | None = None) -> JSONResponse:
            if not self._authorized(request.headers.get("authorization")):
                self.stats["rejected"] += 1
                return JSONResponse({"error": "missing or wrong API key"}, status_code=401)
            try:
                response = RolloutResponse.model_validate_json(await request.body())
            except ClientDisconnect:  # the sender left mid-body: nothing to deliver or answer
                logger.debug("a rollout callback's sender disconnected before its body arrived")
                return JSONResponse({"error": "client disconnected"}, status_code=499)
            except ValidationError as exc:
                self.stats["rejected"] += 1
                return JSONResponse({"error": "invalid RolloutResponse", "detail": str(exc)[:2000]},
                                    status_code=422)
            if rollout_id is not None and response.rollout_id != rollout_id:
                return JSONResponse(
                    {"error": f"body rollout_id {response.rollout_id!r} does not match the URL's "
                     f"{rollout_id!r}"}, status_code=422)
            if not self.deliver(response):
                return JSONResponse({"error": f"no rollout {response.rollout_id!r} is waiting "
                                     "(finished, timed out or unknown)"}, status_code=404)
            return JSONResponse({"ok": True})

        async def completed_scoped(request: Request, rollout_id: str, sample_id: str) -> JSONResponse:
            return await completed(request, rollout_id)

        async def completed_unscoped(request: Request) -> JSONResponse:
            return await completed(request)

        router.add_api_route("/rollouts/{rollout_id}/samples/{sample_id}/v1/rollout/completed",
                             completed_scoped, methods=["POST"])
        router.add_api_route("/v1/rollout/completed", completed_unscoped, methods=["POST"])
        return router
