"""Who may start a rollout: the refusals an init can get, and the callback-host rule."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from osmosis_ai.remote._protocol import RolloutRequest

__all__ = ["SHUTTING_DOWN", "AdmissionError", "check_callback_host"]

SHUTTING_DOWN = "server shutting down"


class AdmissionError(Exception):
    """An init that is refused: carries the HTTP status, a message and an optional Retry-After."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        self.status = status
        self.message = message
        self.retry_after = retry_after
        super().__init__(message)


def check_callback_host(
    request: RolloutRequest, peer: str | None, allowed: list[str] | None
) -> None:
    """403 unless ``server_url`` names the init's own peer or a host/network in ``allowed``
    (``None``: any host)."""
    if allowed is None:
        return
    host = (urlsplit(request.server_url).hostname or "").lower()
    if (peer is not None and host == peer.lower()) or _host_allowed(host, allowed):
        return
    raise AdmissionError(
        403, f"server_url host {host!r} is not allowed: it must be the address the init "
        "comes from or be listed in allowed_callback_hosts (start the server with "
        f"'osmosis serve --allowed-callback-host {host}', or add it to "
        "OSMOSIS_ROLLOUT_SERVER_ALLOWED_CALLBACK_HOSTS)",
    )


def _host_allowed(host: str, allowed: list[str]) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        address = None
    for entry in allowed:
        entry = entry.strip().lower()
        if entry == host:
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False
