"""``osmosis dashboard``: serve the local web dashboard over this workspace's runs."""

from __future__ import annotations

import ipaddress
import secrets
import socket
from pathlib import Path
from typing import Annotated

import typer

from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError, require_extra

__all__ = ["register"]


def dashboard_command(
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: a free one).")] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; the default keeps it on this machine.")
    ] = "127.0.0.1",
    runs_dir: Annotated[
        Path | None,
        typer.Option(
            "--runs-dir",
            help="The runs folder (default: $OSMOSIS_RUNS_DIR, else runs/ of this workspace).",
        ),
    ] = None,
    evals_dir: Annotated[
        Path | None,
        typer.Option("--evals-dir", help="The eval runs folder (default: .osmosis/evals)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="OSMOSIS_DASHBOARD_TOKEN", show_default=False,
                     help="The token every request must carry (default: none on loopback, "
                     "else a generated one, printed once)."),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option("--allowed-host", help="Another Host name the page may be opened by "
                     "(repeatable; the bound address and loopback always are)."),
    ] = None,
) -> None:
    """Open a web dashboard of training runs (curves, checkpoints, traces) and eval runs."""
    require_extra("fastapi", extra="server", feature="osmosis dashboard")
    require_extra("uvicorn", extra="server", feature="osmosis dashboard")
    import uvicorn

    from osmosis_ai.dashboard import create_app
    from osmosis_ai.eval._store import evals_root
    from osmosis_ai.runs import workspace_runs_root

    runs = runs_dir if runs_dir is not None else workspace_runs_root()
    evals = evals_dir if evals_dir is not None else evals_root()
    loopback = _is_loopback(host)
    if token is not None and not token.strip():
        raise ConfigError("--token is empty: give a secret, or leave it out")
    generated = token is None and not loopback
    if generated:
        token = secrets.token_urlsafe(24)  # off loopback a token is not optional
    hosts = allowed_hosts_for(host, allowed_host or [])
    app = create_app(runs, evals, allowed_hosts=hosts, token=token)
    if port == 0:
        port = _free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)

    shown = _url_host(host)
    out = state.console
    out.print(f"dashboard of {runs} (eval runs: {evals})", highlight=False)
    if token is None:
        out.print(f"open http://{shown}:{port}/   (Ctrl-C to stop)", highlight=False)
    else:
        # A generated token is shown once (nobody else knows it); a given one is not echoed.
        query = f"?token={token}" if generated else "?token=<your --token>"
        out.print(f"open http://{shown}:{port}/{query}   (Ctrl-C to stop)", highlight=False,
                  markup=False)
        out.print("every request needs the token (the page keeps it in a cookie; scripts "
                  "send 'Authorization: Bearer TOKEN')", highlight=False)
    if not loopback:
        state.warn(f"listening on {host}: other machines can reach the dashboard (with the "
                   "token). Use it on networks you trust, or behind a TLS proxy; Host names "
                   f"accepted: {', '.join(hosts)} (add more with --allowed-host)")
    server.run()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _bracket(host: str) -> str:
    """An address as it appears in a Host header (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", "[::]"):
        return socket.gethostname()  # a wildcard bind is reached by the machine's name
    return _bracket(host)


def allowed_hosts_for(host: str, extra: list[str]) -> list[str]:
    """The Host header values the dashboard bound to ``host`` accepts: loopback, the bound
    address, and for a wildcard bind (``0.0.0.0``/``::``) the machine's name and addresses;
    never ``*``."""
    names = ["127.0.0.1", "localhost", "[::1]", _bracket(host.lower())]
    if host in ("0.0.0.0", "::", "[::]"):
        names += [socket.gethostname().lower(), socket.getfqdn().lower()]
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None)
        except OSError:
            infos = []
        names += [_bracket(str(info[4][0]).split("%")[0]) for info in infos]
    for name in extra:
        if "*" in name or not name.strip():
            raise ConfigError(f"--allowed-host {name!r}: give a host name or address "
                              "(wildcards would let DNS-rebinding pages in)")
        names.append(_bracket(name.strip().lower()))
    return list(dict.fromkeys(n for n in names if n not in ("0.0.0.0", "[::]")))


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def register(app: typer.Typer) -> None:
    """Add the ``dashboard`` command to the root app."""
    app.command("dashboard")(dashboard_command)
