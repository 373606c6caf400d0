"""osmosis-ai 0.3's rollout server: ``create_rollout_server(backend=...)`` and ``ControllerAuth``.

An 0.3 entrypoint serves its backend with it under uvicorn::

    app = create_rollout_server(backend=LocalBackend(workflow=..., grader=...))
    uvicorn.run(app, host="0.0.0.0", port=int(os.environ.get("_OSMOSIS_ROLLOUT_PORT", "8000")))

osmosis itself never needs the server: ``osmosis eval run`` / ``train submit`` / ``test`` /
``validate`` find the backend in the entrypoint and run its workflow on their own runner
(``main()`` is not called). The server is for a controller of your own that speaks 0.3's
protocol:

- ``GET /health``: the backend's health.
- ``POST /rollout`` (202): run one rollout in the background with the policy at
  ``chat_completions_url``; the workflow's result is posted to ``completion_callback_url``,
  the graded sample to ``grader_callback_url`` (both with ``Authorization: Bearer
  <controller_api_key>`` when one was sent). 429 with ``Retry-After`` when the backend is full.
- ``GET /rollout/{id}/status``, ``POST /rollout/cancel`` (``ids`` | ``prefix`` | ``all``).

Needs ``pip install "osmosis-ai[server]"`` (FastAPI).

No ``from __future__ import annotations`` here: FastAPI reads the route functions'
annotations, and the request types are imported inside :func:`create_rollout_server`.
"""

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from osmosis_ai.errors import MissingExtraError
from osmosis_ai.rollout.backend import ExecutionBackend
from osmosis_ai.rollout.context import RolloutContext
from osmosis_ai.rollout.types import ExecutionRequest, ExecutionResult, RolloutStatus

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ControllerAuth", "create_rollout_server"]

logger = logging.getLogger("osmosis")

_RETRY_AFTER_S = "5"


@dataclass
class ControllerAuth:
    """The key a controller sent; the server sends it back on its callbacks."""

    api_key: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        shown = "<redacted>" if self.api_key else "None"
        return f"ControllerAuth(api_key={shown})"

    def as_bearer_headers(self) -> dict[str, str] | None:
        """``{"Authorization": "Bearer <key>"}``, or ``None`` without a key."""
        if not self.api_key:
            return None
        return {"Authorization": f"Bearer {self.api_key}"}


class RolloutInit(BaseModel):
    """``POST /rollout``'s body (osmosis-ai 0.3's controller request)."""

    model_config = ConfigDict(extra="ignore")

    initial_messages: list[dict[str, Any]]
    label: str | None = None
    metadata: dict[str, Any] | None = None
    rollout_id: str | None = None
    chat_completions_url: str
    controller_api_key: str | None = None
    completion_callback_url: str
    grader_callback_url: str | None = None
    agent_timeout_sec: float | None = None
    grader_timeout_sec: float | None = None
    extra_fields: dict[str, Any] | None = None


class CancelRollouts(BaseModel):
    """``POST /rollout/cancel``'s body: exactly one of ``ids``, ``prefix``, ``all``."""

    ids: list[str] | None = None
    prefix: str | None = None
    all: bool = False


def create_rollout_server(
    *,
    backend: ExecutionBackend,
    lifespan: Any = None,
    configure_logging: bool = True,
) -> "FastAPI":
    """The FastAPI app that serves ``backend`` (see the module docstring for the routes).

    Args:
        backend: the execution backend (``LocalBackend``, ``HarborBackend``).
        lifespan: passed to ``FastAPI``.
        configure_logging: install a default INFO handler when the process has none.
    """
    try:
        import httpx
        from fastapi import BackgroundTasks, FastAPI, HTTPException
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("create_rollout_server", "server", "fastapi") from exc
    if configure_logging and not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    app = FastAPI(lifespan=lifespan)
    states: dict[str, dict[str, Any]] = {}
    tasks: dict[str, asyncio.Task[None]] = {}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return backend.health()

    @app.post("/rollout", status_code=202)
    async def rollout(body: RolloutInit, background: BackgroundTasks) -> dict[str, Any]:
        if not backend.has_capacity():
            raise HTTPException(
                status_code=429,
                detail="rollout queue is full; retry later",
                headers={"Retry-After": _RETRY_AFTER_S},
            )
        rollout_id = body.rollout_id or uuid.uuid4().hex
        try:
            request = ExecutionRequest(
                id=rollout_id,
                prompt=body.initial_messages,
                label=body.label,
                metadata=body.metadata,
                agent_timeout_sec=body.agent_timeout_sec,
                grader_timeout_sec=body.grader_timeout_sec,
            )
        except ValueError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from exc
        states[rollout_id] = {"status": RolloutStatus.QUEUED}

        async def start() -> None:
            task = asyncio.create_task(_handle(backend, body, request, states, httpx))
            tasks[rollout_id] = task
            task.add_done_callback(lambda _: tasks.pop(rollout_id, None))

        background.add_task(start)
        return {}

    @app.get("/rollout/{rollout_id}/status")
    async def rollout_status(rollout_id: str) -> dict[str, Any]:
        state = backend.rollout_status(rollout_id) or states.get(rollout_id)
        if state is None:
            return {"rollout_id": rollout_id, "status": RolloutStatus.UNKNOWN}
        return {"rollout_id": rollout_id, **state}

    @app.post("/rollout/cancel")
    async def cancel(body: CancelRollouts) -> dict[str, Any]:
        if sum([body.ids is not None, body.prefix is not None, body.all]) != 1:
            raise HTTPException(
                status_code=422, detail="pass exactly one selector: ids, prefix, or all"
            )
        return {"dispositions": _cancel(backend, body, tasks, states)}

    return app


def _cancel(
    backend: ExecutionBackend,
    body: CancelRollouts,
    tasks: dict[str, asyncio.Task[None]],
    states: dict[str, dict[str, Any]],
) -> dict[str, str]:
    """The backend's cancellations, then this server's own tasks for the rest."""
    out = dict(backend.cancel_rollouts(ids=body.ids, prefix=body.prefix, all=body.all))
    for rollout_id, task in list(tasks.items()):
        if _selected(rollout_id, body) and rollout_id not in out:
            task.cancel()
            states[rollout_id] = {"status": RolloutStatus.CANCELLED}
            out[rollout_id] = "cancelled_running"
    for rollout_id in body.ids or []:
        out.setdefault(rollout_id, "not_found")
    return out


def _selected(rollout_id: str, body: CancelRollouts) -> bool:
    if body.all:
        return True
    if body.prefix is not None:
        return rollout_id.startswith(body.prefix)
    return rollout_id in (body.ids or [])


async def _handle(
    backend: ExecutionBackend,
    body: RolloutInit,
    request: ExecutionRequest,
    states: dict[str, dict[str, Any]],
    httpx: Any,
) -> None:
    auth = ControllerAuth(api_key=body.controller_api_key)
    states[request.id] = {"status": RolloutStatus.RUNNING}
    async with httpx.AsyncClient(timeout=60.0) as client:

        def poster(url: str | None, kind: str) -> Callable[[ExecutionResult], Any]:
            async def post(result: ExecutionResult) -> None:
                payload: dict[str, Any] = {
                    "status": result.status,
                    "rollout_id": request.id,
                    "err_message": result.err_message,
                    "err_category": result.err_category,
                    "extra_fields": body.extra_fields,
                }
                if kind == "grader":
                    payload["sample"] = (
                        result.sample.model_dump(mode="json", exclude={"calls"})
                        if result.sample is not None
                        else None
                    )
                    reward = result.sample.reward if result.sample is not None else None
                    states[request.id] = {"status": result.status, "reward": reward}
                elif body.grader_callback_url and result.status is RolloutStatus.SUCCESS:
                    states[request.id] = {"status": RolloutStatus.GRADING}
                else:
                    states[request.id] = {"status": result.status}
                if url is None:
                    return
                try:
                    response = await client.post(
                        url, json=_jsonable(payload), headers=auth.as_bearer_headers()
                    )
                    response.raise_for_status()
                except Exception as exc:  # a lost callback is logged, never raised
                    logger.warning("osmosis: %s callback for %s failed: %s", kind, request.id, exc)

            return post

        with RolloutContext(
            chat_completions_url=body.chat_completions_url,
            api_key=body.controller_api_key,
            rollout_id=request.id,
        ):
            await backend.execute(
                request,
                poster(body.completion_callback_url, "completion"),
                poster(body.grader_callback_url, "grader") if body.grader_callback_url else None,
            )


def _jsonable(payload: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, RolloutStatus) else v) for k, v in payload.items()}
