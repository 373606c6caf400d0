"""Who may talk to the dashboard: a token off loopback, a Host allow-list, no framing.

``osmosis dashboard`` on a loopback address needs no token (only this machine reaches it);
on any other address it requires one, printed once at startup as a URL
(``http://HOST:PORT/?token=...``). Opening that URL sets an HttpOnly, SameSite=Strict cookie
and redirects to the page without the token; scripts send ``Authorization: Bearer TOKEN``.
The Host header must name the bound address (or an allowed name), so a DNS-rebinding page
cannot reach the app by name; every response forbids framing (``X-Frame-Options: DENY`` and
CSP ``frame-ancestors 'none'``) and loads nothing from other origins.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from osmosis_ai._asgi import send_json

__all__ = ["SECURITY_HEADERS", "SecurityHeaders", "TokenGuard", "cookie_name"]

SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def cookie_name(token: str) -> str:
    """A cookie name of this token's own: dashboards on other ports of the same host (cookies
    ignore ports) do not overwrite each other's."""
    return "osmosis_dashboard_" + hashlib.sha256(token.encode()).hexdigest()[:12]


class SecurityHeaders:
    """Put :data:`SECURITY_HEADERS` on every HTTP response (errors included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k for k, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": [*kept, *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class TokenGuard:
    """Require the token (bearer header or the cookie) on every request; ``GET /?token=``
    with the right token sets the cookie and redirects to ``/``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()
        self.cookie = cookie_name(token)

    def _ok(self, value: str | bytes | None) -> bool:
        if value is None:
            return False
        raw = value.encode() if isinstance(value, str) else value
        return hmac.compare_digest(raw.strip(), self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() == b"bearer " and self._ok(auth[7:]):
            await self.app(scope, receive, send)
            return
        cookies = headers.get(b"cookie", b"").decode("latin-1")
        for part in cookies.split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie and self._ok(value):
                await self.app(scope, receive, send)
                return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if (
            scope["path"] == "/"
            and scope["method"] == "GET"
            and self._ok((query.get("token") or [None])[0])
        ):
            cookie = (
                f"{self.cookie}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [
                        (b"location", b"/"),
                        (b"set-cookie", cookie),
                        (b"content-length", b"0"),
                        (b"cache-control", b"no-store"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await send_json(
            send,
            401,
            {
                "detail": (
                    "this dashboard needs its token: open the URL 'osmosis dashboard' printed at "
                    "startup (http://HOST:PORT/?token=...), or send 'Authorization: Bearer TOKEN'"
                )
            },
            [(b"www-authenticate", b"Bearer")],
        )
