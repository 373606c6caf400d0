"""A client that sends half a request body and hangs up, for the servers' disconnect tests."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest


async def leave_mid_body(
    url: str, path: str, headers: bytes, start: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """POST ``start`` of a declared 1000-byte body to ``url + path``, close the socket, and wait
    (bounded) until the server logs that the client disconnected."""
    where = urlsplit(url)
    _reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: gw\r\n".encode() + headers
        + b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + start
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    for _ in range(200):  # the server notices the drop on its own loop
        if any("disconnected" in r.getMessage() for r in caplog.records):
            return
        await asyncio.sleep(0.05)
