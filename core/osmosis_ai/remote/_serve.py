"""``osmosis serve``: run an agent loop's rollout server with uvicorn."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osmosis_ai.errors import MissingExtraError
from osmosis_ai.remote._loader import load_agent_loop
from osmosis_ai.remote._server import create_app
from osmosis_ai.remote._settings import ServerSettings

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ServeOptions", "app_from_env", "run_server"]

_ENV_SPEC = "OSMOSIS_SERVE_SPEC"
_ENV_CWD = "OSMOSIS_SERVE_CWD"
_ENV_AUTH = "OSMOSIS_SERVE_AUTH"
_ENV_LOG_DIR = "OSMOSIS_SERVE_LOG_DIR"
_ENV_KEY = "OSMOSIS_ROLLOUT_API_KEY"

GRACEFUL_CONNECTIONS_S = 5
"""On shutdown, how long open requests may still finish before they are cancelled: a stalled
client must not keep the server (and the report of its in-flight rollouts) waiting."""

KEEP_ALIVE_S = 75
"""Idle keep-alive of server connections; longer than clients' pools keep idle connections
(httpx: 5 s), so a client never reuses a connection the server is closing (the 502 race)."""


@dataclass
class ServeOptions:
    spec: str
    host: str = "127.0.0.1"
    port: int = 9000
    reload: bool = False
    log_dir: Path | None = None
    auth: bool = True
    api_key: str | None = None
    log_level: str = "info"
    cwd: Path | None = None
    settings: ServerSettings | None = None
    """The server's limits (``--max-body-bytes``, ``--allowed-callback-host`` ...); default
    from ``OSMOSIS_ROLLOUT_SERVER_*``."""


def app_from_env() -> FastAPI:
    """The uvicorn factory used with ``--reload`` (each reload re-imports the user's module)."""
    loop = load_agent_loop(os.environ[_ENV_SPEC], cwd=os.environ.get(_ENV_CWD) or None)
    log_dir = os.environ.get(_ENV_LOG_DIR) or None
    return create_app(
        loop, auth=os.environ.get(_ENV_AUTH, "1") != "0",
        api_key=os.environ.get(_ENV_KEY) or None, log_dir=log_dir,
    )


def run_server(opts: ServeOptions, *, announce: Callable[[str, Any], None]) -> None:
    """Serve until interrupted. ``announce("url", url)`` / ``announce("logs", folder)`` report
    what is only known once the app is built and bound."""
    try:
        import uvicorn
    except ImportError as exc:
        raise MissingExtraError("osmosis serve", "server", "uvicorn") from exc
    if opts.reload:
        _run_reload(opts, announce)
        return
    loop = load_agent_loop(opts.spec, cwd=opts.cwd)
    app = create_app(
        loop, api_key=opts.api_key, auth=opts.auth, log_dir=opts.log_dir, settings=opts.settings
    )
    if app.state.trace_folder is not None:
        announce("logs", app.state.trace_folder)
    config = uvicorn.Config(
        app, host=opts.host, port=opts.port, log_level=opts.log_level, access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S, backlog=4096,
        timeout_graceful_shutdown=GRACEFUL_CONNECTIONS_S,
    )
    factory = getattr(config, "get_loop_factory", lambda: None)()  # uvloop when installed
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(_server_class()(config), opts, announce, app))


def _server_class() -> Any:
    """uvicorn's Server, but Ctrl-C / SIGTERM only stop it (no re-raise after the graceful
    shutdown), so ``osmosis serve`` exits 0 once in-flight rollouts are finished or reported."""
    import uvicorn

    class _Server(uvicorn.Server):
        on_second_signal: Callable[[], None] | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            again = self.should_exit
            super().handle_exit(sig, frame)
            if again and self.on_second_signal is not None:
                self.on_second_signal()

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return _Server


async def _serve(
    server: Any, opts: ServeOptions, announce: Callable[[str, Any], None], app: Any = None
) -> None:
    if app is not None:  # a second Ctrl-C ends the rollouts' grace period at once
        loop = asyncio.get_running_loop()
        server.on_second_signal = lambda: loop.call_soon_threadsafe(app.state.registry.hurry)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():  # failed to bind: surface uvicorn's exit
            await task
            raise SystemExit(1)
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1] if server.servers else opts.port
    host = f"[{opts.host}]" if ":" in opts.host else opts.host
    announce("url", f"http://{host}:{port}")
    await task
    if server.force_exit and app is not None:
        # A second Ctrl-C makes uvicorn skip the app's shutdown: still report what is in
        # flight (as "server shutting down", without the grace period), then exit cleanly.
        await app.state.registry.shutdown(hurry=True)


def _run_reload(opts: ServeOptions, announce: Callable[[str, Any], None]) -> None:
    import uvicorn

    cwd = (opts.cwd or Path.cwd()).resolve()
    os.environ[_ENV_SPEC] = opts.spec
    os.environ[_ENV_CWD] = str(cwd)
    os.environ[_ENV_AUTH] = "1" if opts.auth else "0"
    os.environ[_ENV_LOG_DIR] = str(opts.log_dir or "")
    if opts.api_key:
        os.environ[_ENV_KEY] = opts.api_key
    if opts.settings is not None:  # each reload's app reads its limits from the environment
        os.environ.update(opts.settings.to_env())
    announce("url", f"http://{opts.host}:{opts.port}")
    uvicorn.run(
        "osmosis_ai.remote._serve:app_from_env", factory=True, reload=True,
        reload_dirs=[str(cwd)], host=opts.host, port=opts.port, log_level=opts.log_level,
        access_log=False, timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_CONNECTIONS_S,
    )
