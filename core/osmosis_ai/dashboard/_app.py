"""The dashboard's web app: a JSON API over the run store and eval runs, and one static page.

Everything is read-only except ``POST /api/runs/{run_id}/stop``, which does what
``osmosis train stop`` does (a stop request the worker honours after its current step). That
POST needs the ``X-Osmosis-Dashboard`` header, which a page from another site cannot send
without a CORS preflight this app never grants, so a web page open in the same browser
cannot stop runs; the Host check keeps DNS-rebinding pages out as well.
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

__all__ = ["STATIC_DIR", "create_app"]

STATIC_DIR = Path(__file__).parent / "static"
_STOP_HEADER = "x-osmosis-dashboard"


def create_app(
    runs_root: Path, evals_root: Path, *, allowed_hosts: list[str] | None = None
) -> FastAPI:
    """The app serving ``runs_root`` (training runs) and ``evals_root`` (eval runs)."""
    runs_root, evals_root = Path(runs_root), Path(evals_root)
    app = FastAPI(title="osmosis dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(
        TrustedHostMiddleware,
        allowed_hosts=allowed_hosts or ["127.0.0.1", "localhost", "[::1]"],
    )

    @app.exception_handler(_data.BadNameError)
    async def _bad_name(_: Request, exc: _data.BadNameError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(_data.NotFoundError)
    async def _not_found(_: Request, exc: _data.NotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

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

    @app.post("/api/runs/{run_id}/stop")
    def stop(
        run_id: str, x_osmosis_dashboard: str | None = Header(default=None)
    ) -> dict[str, Any]:
        if not x_osmosis_dashboard:
            raise HTTPException(403, f"the stop action needs the {_STOP_HEADER} header")
        record = _data.find_record(runs_root, run_id)
        if not record.live:
            raise HTTPException(409, f"run {run_id} is already {record.status}; nothing to stop")
        record.run_dir.request_stop()  # exactly what 'osmosis train stop' does
        return {"run_id": run_id, "stop_requested": True}

    @app.get("/api/evals")
    def evals() -> dict[str, Any]:
        return {"root": str(evals_root), "evals": _data.eval_list(evals_root)}

    @app.get("/api/evals/{name}")
    def eval_run(name: str) -> dict[str, Any]:
        return _data.eval_detail(evals_root, name)

    @app.get("/api/compare")
    def compare(a: str, b: str) -> dict[str, Any]:
        return _data.eval_compare(evals_root, a, b)

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    # StaticFiles resolves paths and refuses anything outside STATIC_DIR.
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
