"""The bridge that lets the ordinary rollout runner drive a remote rollout server.

For each rollout, :class:`RemoteRolloutWorkflow` posts ``/v1/rollout/init`` to the server with
``server_url`` = the gateway's route for this rollout's ``main`` sample (without ``/v1``). The
server's LLM calls therefore land on the gateway's scoped chat route (recorded token by token)
and its completion callback on the scoped ``/v1/rollout/completed`` route, which resolves the
future the bridge awaits. The final messages become sample ``main``. ``[remote] reward`` says
where its reward comes from: the server's result (``"server"``), or the entrypoint's Grader
run here on the final messages (``"grader"``, through :class:`RemoteRewardGrader`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from pydantic import ConfigDict, Field

from osmosis_ai.config import redact_url, redact_urls
from osmosis_ai.errors import ConfigError, OsmosisError, PolicyCallError
from osmosis_ai.remote import (
    InitResponse,
    RolloutRecordView,
    RolloutRequest,
    RolloutResponse,
    RolloutStatus,
)
from osmosis_ai.rollout import (
    AgentWorkflow,
    AgentWorkflowConfig,
    AgentWorkflowContext,
    Grader,
    GraderConfig,
    GraderContext,
    RolloutSample,
)
from osmosis_ai.rollout.running import Entrypoint
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID
from osmosis_trainer.server_workflow._callbacks import RemoteCallbacks

__all__ = [
    "API_KEY_ENV",
    "RemoteGraderConfig",
    "RemoteRewardGrader",
    "RemoteRolloutConfig",
    "RemoteRolloutError",
    "RemoteRolloutWorkflow",
    "remote_entrypoint",
]

logger = logging.getLogger("osmosis")

API_KEY_ENV = "OSMOSIS_ROLLOUT_API_KEY"
_RETRY = frozenset({429, 500, 502, 503, 504})


class RemoteRolloutError(OsmosisError):
    """The remote rollout server reported ERROR, or lost the rollout."""


class RemoteRolloutConfig(AgentWorkflowConfig):
    """How the bridge reaches the remote rollout server."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str = "remote"
    server_url: str = Field(description="Base URL of the rollout server (http://host:port).")
    api_key: str | None = Field(default=None, description="Bearer key the server expects.")
    callbacks: RemoteCallbacks = Field(exclude=True, description="Mounted on the gateway.")
    max_turns: int = Field(default=10, ge=1)
    max_tokens_total: int = Field(default=8192, ge=1)
    init_timeout_s: float = Field(default=30.0, gt=0)
    init_retries: int = Field(default=5, ge=0)
    poll_interval_s: float = Field(
        default=15.0, gt=0,
        description="While waiting for the callback, ask GET /v1/rollout/{id} this often "
        "(recovers results whose callback was lost).",
    )
    require_reward: bool = Field(
        default=True, description="Fail a sample whose result has no reward (no grader to ask)."
    )
    ignore_reward: bool = Field(
        default=False,
        description="Drop the reward the server sends (``[remote] reward = \"grader\"``: the "
        "local grader scores every sample; the server's is kept as ``server_reward``).",
    )


class RemoteRolloutWorkflow(AgentWorkflow[RemoteRolloutConfig]):
    """Runs one rollout on the remote server and returns its final messages as sample ``main``."""

    async def run(self, ctx: AgentWorkflowContext[RemoteRolloutConfig]) -> None:
        cfg = self.config
        if cfg is None:
            raise TypeError("RemoteRolloutWorkflow needs a RemoteRolloutConfig")
        scope = ctx.scope
        if scope is None:  # built by hand outside a rollout: nothing to route or record to
            raise TypeError("RemoteRolloutWorkflow runs inside a rollout (ctx.scope is None)")
        route = ctx.route(DEFAULT_SAMPLE_ID)
        metadata = dict(ctx.metadata)
        if scope.label is not None:
            metadata.setdefault("ground_truth", scope.label)
        request = RolloutRequest(
            rollout_id=ctx.rollout_id,
            server_url=route.base_url.removesuffix("/").removesuffix("/v1"),
            messages=list(ctx.prompt),
            completion_params=dict(ctx.sampling),  # type: ignore[arg-type]
            max_turns=cfg.max_turns,
            max_tokens_total=cfg.max_tokens_total,
            metadata=metadata,
            api_key=route.api_key,
            idempotency_key=ctx.rollout_id,
        )
        future = cfg.callbacks.expect(ctx.rollout_id)
        try:
            async with httpx.AsyncClient(timeout=cfg.init_timeout_s) as http:
                init = await _post_init(http, cfg, request)
                response = await _await_result(http, cfg, future, ctx.rollout_id)
        finally:
            cfg.callbacks.discard(ctx.rollout_id)
        if response.status is RolloutStatus.ERROR:
            raise RemoteRolloutError(
                f"remote rollout server {redact_url(cfg.server_url)} reported ERROR for rollout "
                f"{ctx.rollout_id}: {response.error_message or 'no message'}"
            )
        scope.register_sample_source(
            DEFAULT_SAMPLE_ID, _ResultSample(response, init, cfg)
        )


def _headers(cfg: RemoteRolloutConfig) -> dict[str, str]:
    key = cfg.api_key or os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else {}


async def _post_init(http: httpx.AsyncClient, cfg: RemoteRolloutConfig, request: RolloutRequest) -> InitResponse:
    """POST the init, retrying transport errors, 429 and 5xx (init is idempotent)."""
    url = _endpoint(cfg.server_url, "/v1/rollout/init")
    shown = redact_url(url)  # every message names the URL without its credentials
    body = request.model_dump(mode="json", exclude_none=True)
    delay = 0.5
    for attempt in range(cfg.init_retries + 1):
        last = attempt == cfg.init_retries
        try:
            resp = await http.post(url, json=body, headers=_headers(cfg))
        except httpx.TransportError as exc:
            if last:
                raise PolicyCallError(
                    f"rollout server {shown} unreachable: {redact_urls(repr(exc))}"
                ) from exc
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 10.0)
            continue
        if resp.status_code in _RETRY and not last:
            wait = _retry_after(resp.headers.get("retry-after"), delay)
            await asyncio.sleep(wait)
            delay = min(delay * 2, 10.0)
            continue
        if resp.status_code not in (200, 202):
            raise PolicyCallError(
                f"rollout server {shown} answered HTTP {resp.status_code}: {resp.text[:500]}",
                status_code=resp.status_code, body=resp.text[:2000],
            )
        return InitResponse.model_validate(resp.json())
    raise AssertionError("unreachable")  # pragma: no cover


def _endpoint(server_url: str, path: str) -> str:
    """``path`` under ``server_url``, its query kept (``http://h/?access_token=t`` ->
    ``http://h/v1/rollout/init?access_token=t``)."""
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path, fragment=""))


def _retry_after(value: str | None, default: float) -> float:
    try:
        return min(max(float(value), 0.05), 60.0) if value is not None else default
    except ValueError:
        return default


async def _await_result(http: httpx.AsyncClient, cfg: RemoteRolloutConfig,
                        future: asyncio.Future[RolloutResponse], rollout_id: str) -> RolloutResponse:
    """Wait for the callback; poll the server's status route meanwhile (lost callbacks)."""
    while True:
        try:
            return await asyncio.wait_for(asyncio.shield(future), cfg.poll_interval_s)
        except TimeoutError:
            view = await _poll(http, cfg, rollout_id)
            if view is not None and view.result is not None:
                logger.info("rollout %s: result read from the server's status route", rollout_id)
                return view.result


async def _poll(http: httpx.AsyncClient, cfg: RemoteRolloutConfig, rollout_id: str) -> RolloutRecordView | None:
    url = _endpoint(cfg.server_url, f"/v1/rollout/{quote(rollout_id, safe='')}")
    try:
        resp = await http.get(url, headers=_headers(cfg))
    except httpx.TransportError:
        return None  # the server may be restarting; keep waiting for the callback
    if resp.status_code == 404:
        raise RemoteRolloutError(
            f"rollout server {redact_url(cfg.server_url)} no longer knows rollout {rollout_id} "
            "(restarted, or its record expired)"
        )
    if resp.status_code != 200:
        return None
    try:
        return RolloutRecordView.model_validate(resp.json())
    except ValueError:
        return None


class _ResultSample:
    """Builds sample ``main`` from the server's result (calls are joined by the runner)."""

    def __init__(self, response: RolloutResponse, init: InitResponse,
                 cfg: RemoteRolloutConfig) -> None:
        self.response = response
        self.init = init
        self.cfg = cfg

    def build_sample(self, sample_id: str) -> RolloutSample:
        r = self.response
        if r.reward is None and self.cfg.require_reward:
            raise ValueError(
                f"the remote rollout server {redact_url(self.cfg.server_url)} sent no reward, and "
                "the run "
                "takes the server's ([remote] reward = \"server\"): return "
                "ctx.complete(messages, reward=...) from the agent loop, or set "
                "[remote] reward = \"grader\" and define a Grader in [experiment] entrypoint"
            )
        extra = {}
        reward = r.reward
        if self.cfg.ignore_reward and reward is not None:
            extra["server_reward"] = reward
            reward = None
        metrics = {f"remote/{k}": float(v) for k, v in (r.metrics.model_dump() if r.metrics else {}).items()}
        return RolloutSample(
            id=sample_id,
            messages=list(r.final_messages),
            reward=reward,
            metrics=metrics,
            extra_fields={**r.extra_fields, **extra, "finish_reason": r.finish_reason,
                          "tools": self.init.tools},
        )


class RemoteGraderConfig(GraderConfig):
    """Config of :class:`RemoteRewardGrader`: the grader to ask when the server sent no reward."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str = "remote-reward"
    inner_cls: Any = None
    inner_config: Any = None


class RemoteRewardGrader(Grader[RemoteGraderConfig]):
    """Keeps the server's reward; grades the samples without one with the wrapped grader."""

    async def grade(self, ctx: GraderContext[RemoteGraderConfig]) -> None:
        missing = {k: s for k, s in ctx.samples.items() if s.reward is None}
        cfg = self.config
        if not missing or cfg is None or cfg.inner_cls is None:
            return  # samples left without a reward fail with grader_error in the runner
        inner = cfg.inner_cls(cfg.inner_config)
        sub = GraderContext(samples=missing, label=ctx.label, metadata=ctx.metadata,
                            prompt=ctx.prompt, config=inner.config, artifacts_dir=ctx.artifacts_dir)
        await inner.grade(sub)


def remote_entrypoint(
    server_url: str,
    callbacks: RemoteCallbacks,
    *,
    api_key: str | None = None,
    grader_cls: type[Grader[Any]] | None = None,
    grader_config: Any = None,
    max_turns: int = 10,
    max_tokens_total: int = 8192,
    poll_interval_s: float = 15.0,
    reward: Literal["server", "grader"] | None = None,
) -> Entrypoint:
    """An :class:`Entrypoint` whose workflow runs each rollout on a remote rollout server.

    Pass it to ``RolloutRunner(entrypoint, gateway, ...)`` (backend ``"local"``: the callbacks
    live in this process). ``callbacks`` must be mounted on that gateway
    (``RemoteCallbacks.attach(gateway)``).

    ``reward`` (``[remote] reward``): ``"server"`` takes the server's reward and fails a
    result without one (``grader_cls`` is not used); ``"grader"`` scores every sample with
    ``grader_cls`` and ignores the server's. ``None``: the server's reward, and ``grader_cls``
    (if given) for the samples the server sent without one.
    """
    if reward == "grader" and grader_cls is None:
        raise ConfigError('[remote] reward = "grader" needs a Grader (grader_cls)')
    if reward == "server":
        grader_cls = None
    workflow_config = RemoteRolloutConfig(
        server_url=server_url.rstrip("/"), api_key=api_key, callbacks=callbacks,
        max_turns=max_turns, max_tokens_total=max_tokens_total, poll_interval_s=poll_interval_s,
        require_reward=grader_cls is None, ignore_reward=reward == "grader",
    )
    grader_config_ = RemoteGraderConfig(inner_cls=grader_cls, inner_config=grader_config)
    return Entrypoint(
        workflow_cls=RemoteRolloutWorkflow,
        grader_cls=RemoteRewardGrader if grader_cls is not None else None,
        workflow_config=workflow_config,
        grader_config=grader_config_ if grader_cls is not None else None,
        path=None,
        module_name="osmosis_trainer.server_workflow",
    )
