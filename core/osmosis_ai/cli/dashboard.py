"""``osmosis dashboard``: serve the local web dashboard over this workspace's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from osmosis_ai.cli._output import state
from osmosis_ai.errors import require_extra

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
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    if host not in ("127.0.0.1", "localhost", "::1"):
        hosts = ["*"]  # bound on purpose to another interface: any Host header is fine
    app = create_app(runs, evals, allowed_hosts=hosts)
    if port == 0:
        port = _free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)

    shown = f"[{host}]" if ":" in host else host
    state.console.print(
        f"dashboard of {runs} (eval runs: {evals})\n"
        f"open http://{shown}:{port}/   (Ctrl-C to stop)",
        highlight=False,
    )
    server.run()


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def register(app: typer.Typer) -> None:
    """Add the ``dashboard`` command to the root app."""
    app.command("dashboard")(dashboard_command)
