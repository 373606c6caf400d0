"""The dashboard's web app: a JSON API over the run store and eval runs, and one static page.

Everything is read-only except ``POST /api/runs/{run_id}/stop``, which does what
``osmosis train stop`` does (a stop request the worker honours after its current step). That
POST needs the ``X-Osmosis-Dashboard`` header, which a page from another site cannot send
without a CORS preflight this app never grants, so a web page open in the same browser
cannot stop runs; the Host check keeps DNS-rebinding pages out as well. Off loopback the
CLI passes a token, which every request must carry (see :mod:`osmosis_ai.dashboard._guard`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, HTTPException, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from osmosis_ai.dashboard import _data
from osmosis_ai.dashboard._guard import SecurityHeaders, TokenGuard

__all__ = ["LOOPBACK_HOSTS", "STATIC_DIR", "create_app"]

STATIC_DIR = Path(__file__).parent / "static"
_STOP_HEADER = "x-osmosis-dashboard"
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
"""The Host names a loopback-bound dashboard answers to."""


def create_app(
    runs_root: Path,
    evals_root: Path,
    *,
    allowed_hosts: list[str] | None = None,
    token: str | None = None,
) -> FastAPI:
    """The app serving ``runs_root`` (training runs) and ``evals_root`` (eval runs).

    Args:
        allowed_hosts: Host header values accepted (default :data:`LOOPBACK_HOSTS`); a
            wildcard ``*`` is refused, since it lets DNS-rebinding pages in.
        token: when set, every request must carry it (bearer header, or the cookie that
            ``GET /?token=TOKEN`` sets).

    Raises:
        ValueError: ``allowed_hosts`` holds a wildcard, or ``token`` is empty.
    """
    runs_root, evals_root = Path(runs_root), Path(evals_root)
    hosts = list(allowed_hosts or LOOPBACK_HOSTS)
    if any("*" in h for h in hosts):
        raise ValueError(f"allowed_hosts {hosts}: name each host; a wildcard is not allowed")
    if token is not None and not token.strip():
        raise ValueError("token is empty: pass None for no token, or a secret string")
    app = FastAPI(title="osmosis dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    # The last added runs first: security headers on every answer, then the Host check
    # (a rebinding page gets 400 before anything else), then the token.
    if token is not None:
        app.add_middleware(TokenGuard, token=token)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts)
    app.add_middleware(SecurityHeaders)
    _add_error_answers(app)
    _add_run_routes(app, runs_root)
    _add_eval_routes(app, evals_root)

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    # StaticFiles resolves paths and refuses anything outside STATIC_DIR.
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _add_error_answers(app: FastAPI) -> None:
    """A bad name is a 400, a missing run or eval a 404 (never a 500)."""

    @app.exception_handler(_data.BadNameError)
    async def _bad_name(_: Request, exc: _data.BadNameError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(_data.NotFoundError)
    async def _not_found(_: Request, exc: _data.NotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)


def _add_run_routes(app: FastAPI, runs_root: Path) -> None:
    """``/api/runs``: the training runs, read-only but for the stop action."""

    @app.get("/api/runs")
    def runs() -> dict[str, Any]:
        return {"root": str(runs_root), "runs": _data.run_list(runs_root)}

    @app.get("/api/runs/{run_id}")
    def run(run_id: str) -> dict[str, Any]:
        return _data.run_detail(runs_root, run_id)

    @app.get("/api/runs/{run_id}/metrics")
    def metrics(run_id: str) -> dict[str, Any]:
        return _data.run_metrics(runs_root, run_id)

    @app.get("/api/runs/{run_id}/failures")
    def failures(run_id: str) -> dict[str, Any]:
        return _data.run_failures(runs_root, run_id)

    @app.get("/api/runs/{run_id}/traces")
    def traces(run_id: str) -> dict[str, Any]:
        return {"steps": _data.trace_steps(runs_root, run_id)}

    @app.get("/api/runs/{run_id}/traces/{step}")
    def trace(run_id: str, step: int = PathParam(ge=0, le=10**9)) -> dict[str, Any]:
        return _data.trace_step(runs_root, run_id, step)

    @app.get("/api/runs/{run_id}/outputs")
    def outputs(run_id: str) -> dict[str, Any]:
        return _data.run_outputs(runs_root, run_id)

    @app.get("/api/runs/{run_id}/output")
    def output(run_id: str, path: str) -> dict[str, Any]:
        return _data.run_output(runs_root, run_id, path)

    @app.post("/api/runs/{run_id}/stop")
    def stop(
        run_id: str, x_osmosis_dashboard: str | None = Header(default=None)
    ) -> dict[str, Any]:
        if not x_osmosis_dashboard:
            raise HTTPException(403, f"the stop action needs the {_STOP_HEADER} header")
        record = _data.find_record(runs_root, run_id)
        if record.unreadable:
            raise HTTPException(409, f"run {run_id} is unreadable ({record.unreadable}); "
                                "nothing to stop")
        if not record.live:
            raise HTTPException(409, f"run {run_id} is already {record.status}; nothing to stop")
        record.run_dir.request_stop()  # exactly what 'osmosis train stop' does
        return {"run_id": run_id, "stop_requested": True}


def _add_eval_routes(app: FastAPI, evals_root: Path) -> None:
    """``/api/evals`` and ``/api/compare``: the eval runs, read-only."""

    @app.get("/api/evals")
    def evals() -> dict[str, Any]:
        return {"root": str(evals_root), "evals": _data.eval_list(evals_root)}

    @app.get("/api/evals/{name}")
    def eval_run(name: str) -> dict[str, Any]:
        return _data.eval_detail(evals_root, name)

    @app.get("/api/compare")
    def compare(a: str, b: str) -> dict[str, Any]:
        return _data.eval_compare(evals_root, a, b)
