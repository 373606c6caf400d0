"""A JSON answer sent straight through ASGI, for the middleware of osmosis's servers (the
dashboard's guards, the remote rollout server's admission checks), which answer before any
route runs. Plain ASGI types: importing it pulls in no web framework."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["send_json"]

# An ASGI event is a dict of the spec's fields, whose value types vary by key.
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def send_json(
    send: Send,
    status: int,
    body: Mapping[str, object],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Answer ``status`` with ``body`` as JSON (content type and length set) plus ``headers``."""
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
