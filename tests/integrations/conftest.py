"""Integration tests never reach the internet: any non-loopback connection fails the test."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

# A dummy key so SDKs construct their default clients; a real call with it could never succeed,
# and the socket guard below stops it before it leaves the machine.
os.environ.setdefault("OPENAI_API_KEY", "sk-osmosis-test-dummy-key")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.pop("OPENAI_BASE_URL", None)


def _is_loopback(host: Any) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_internet(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse (and remember) every attempt to resolve or connect to a non-loopback host."""
    attempts: list[str] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(what: str, host: Any) -> None:
        if not _is_loopback(host):
            attempts.append(f"{what} {host}")
            raise ConnectionRefusedError(f"test tried to reach {host!r}: tests must stay offline")

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            check("connect", address[0])
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            check("connect", address[0])
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        check("resolve", host.decode() if isinstance(host, bytes) else host)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    assert not attempts, f"the test tried to reach the internet: {attempts}"
