"""PolicyGateway: the OpenAI-compatible policy endpoint that records every call's tokens."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Generator, Sequence
from typing import Any, TypeVar

from fastapi import APIRouter

from osmosis_ai.config import GatewayConfig, SamplingConfig
from osmosis_ai.rollout import LLMCall, Message
from osmosis_ai.rollout.scope import PolicyRoute
from osmosis_ai.serving._engine import (
    FreesIdleMemory,
    GenerationRequest,
    InferenceEngine,
    KeepsRollouts,
)
from osmosis_ai.serving.gateway._app import UNSCOPED_ROLLOUT, GatewayBusy, build_app
from osmosis_ai.serving.gateway._store import CallStore
from osmosis_ai.serving.gateway._wire import ChatCompletionRequest

__all__ = ["PolicyGateway"]

logger = logging.getLogger("osmosis")
T = TypeVar("T")


class _NoCancelNotice(logging.Filter):
    """Drops uvicorn's "Cancel N running task(s), timeout graceful shutdown exceeded": the
    gateway answers those calls itself (503 shutting_down), so Ctrl-C prints no error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "timeout graceful shutdown exceeded" not in record.getMessage()


_CANCEL_NOTICE = _NoCancelNotice()


def _quiet_server(config: Any) -> Any:
    """A uvicorn server that leaves the process's signal handlers alone."""
    import uvicorn

    logging.getLogger("uvicorn.error").addFilter(_CANCEL_NOTICE)  # idempotent: same object

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

    return _Server(config)


class PolicyGateway:
    """Serve ``engine`` as an OpenAI-compatible endpoint and record every call per sample.

    Routes: ``POST /v1/chat/completions`` and ``GET /v1/models``, the same under
    ``/rollouts/{rollout_id}/samples/{sample_id}/v1`` (calls recorded against that sample; the
    unscoped route records under the ``x-osmosis-rollout-id`` / ``x-osmosis-sample-id`` headers,
    or rollout ``"unscoped"``), and ``GET /health``. Implements
    :class:`~osmosis_ai.rollout.PolicyEndpoint`.

    Use ``async with PolicyGateway(engine) as gw:`` inside an event loop (uvicorn runs as a task
    of that loop), or ``with PolicyGateway(engine) as gw:`` from synchronous code (served by a
    background thread with its own loop).

    Args:
        engine: the inference engine.
        sampling: the run's ``[sampling]`` section, enforced whatever the agent framework
            sends: its temperature and top_p replace the client's, its ``max_tokens`` caps
            the client's (and applies when the client sends none); ``None`` passes the
            clients' values through.
        host: interface to bind (loopback by default).
        port: port to bind; 0 picks a free one (read it from :attr:`url`).
        api_key: when set, requests must send ``Authorization: Bearer <api_key>``.
        policy_name: the placeholder model name; replies name ``{policy_name}@v{version}``.
        swap_wait_s: how long a call waits for a weight swap before it gets 429.
        retry_after_s: the ``Retry-After`` value sent with 429.
        extra_routers: more routers mounted on the app (e.g. remote-rollout callbacks).
        keep_client_body: hand the engine each request's JSON body as sent
            (``GenerationRequest.client_body``), for engines that script or forward on it.
        max_body_bytes: larger request bodies are answered 413 (an OpenAI-style error);
            default the ``[gateway] max_body_bytes`` of :class:`~osmosis_ai.config.GatewayConfig`.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        *,
        sampling: SamplingConfig | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        policy_name: str = "osmosis-policy",
        swap_wait_s: float = 30.0,
        retry_after_s: int = 1,
        extra_routers: Sequence[APIRouter] = (),
        keep_client_body: bool = False,
        max_body_bytes: int | None = None,
    ) -> None:
        self.engine = engine
        self.max_body_bytes = (
            GatewayConfig().max_body_bytes if max_body_bytes is None else max_body_bytes
        )
        self.sampling = sampling
        self.host = host
        self.port = port
        self.api_key = api_key
        self.policy_name = policy_name
        self.swap_wait_s = swap_wait_s
        self.retry_after_s = retry_after_s
        self.keep_client_body = keep_client_body
        self.store = CallStore()
        self.stats: Counter[str] = Counter()
        self._clamp_said = False
        self.app = build_app(self)
        for router in extra_routers:
            self.app.include_router(router)
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._in_flight = 0
        self._paused = False
        self._resumed: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._swap_lock: asyncio.Lock | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://host:port`` of the running gateway."""
        if self._server is None:
            raise RuntimeError("the gateway is not running; use 'async with PolicyGateway(...)'")
        return f"http://{self.host}:{self.port}"

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` began (in-flight calls are then in their grace period)."""
        return self._server is not None and bool(self._server.should_exit)

    @property
    def model_name(self) -> str:
        """The served model name: the placeholder tagged with the current policy version."""
        return f"{self.policy_name}@v{self.engine.policy_version}"

    async def start(self) -> None:
        """Bind and serve in the running event loop (a task); returns once listening."""
        import uvicorn

        if self._server is not None:
            raise RuntimeError("the gateway is already running")
        self._loop = asyncio.get_running_loop()
        self._resumed, self._idle, self._swap_lock = (
            asyncio.Event(),
            asyncio.Event(),
            asyncio.Lock(),
        )
        self._resumed.set()
        self._idle.set()
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        server = _quiet_server(config)
        self._task = asyncio.create_task(server.serve(), name="osmosis-gateway")
        while not server.started:
            if self._task.done():
                exc = self._task.exception()
                raise RuntimeError(f"the gateway could not bind {self.host}:{self.port}: {exc!r}")
            await asyncio.sleep(0.005)
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server = server
        logger.info("policy gateway listening on %s", self.url)

    async def stop(self) -> None:
        """Stop serving (in-flight calls get a short grace period)."""
        server, task = self._server, self._task
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=5)
        except TimeoutError:
            server.force_exit = True
            await task
        self._server = None
        self._task = None

    async def __aenter__(self) -> PolicyGateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self, timeout_s: float = 30.0) -> PolicyGateway:
        """Serve from a background thread with its own event loop (for synchronous callers)."""
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=loop.run_forever, name="osmosis-gateway", daemon=True
        )
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout_s)
        return self

    def stop_thread(self) -> None:
        """Stop a gateway started with :meth:`start_in_thread`."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._thread = None

    def __enter__(self) -> PolicyGateway:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop_thread()

    async def _in_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the gateway's loop (callers may live on another loop or thread)."""
        loop = self._loop
        if loop is None or loop is asyncio.get_running_loop():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    # -- PolicyEndpoint ----------------------------------------------------------------------

    def route(self, rollout_id: str, sample_id: str) -> PolicyRoute:
        """The base URL (ending in ``/v1``) whose calls are recorded against this sample."""
        return PolicyRoute(
            base_url=f"{self.url}/rollouts/{rollout_id}/samples/{sample_id}/v1",
            api_key=self.api_key or "osmosis",
            model=self.policy_name,
        )

    async def collect(self, rollout_id: str) -> dict[str, list[LLMCall]]:
        """Return and forget the calls of ``rollout_id`` by sample id, in start order.

        Calls of that rollout that finish later are dropped (counted in
        ``store.late_dropped``), except for the shared ``"unscoped"`` rollout.
        """
        if isinstance(self.engine, KeepsRollouts):
            self.engine.forget_rollout(rollout_id)
        return self.store.pop(rollout_id, forget=rollout_id != UNSCOPED_ROLLOUT)

    # -- weights -----------------------------------------------------------------------------

    async def swap_adapter(self, path: str, version: int) -> None:
        """Load a new adapter: hold new calls, drain in-flight ones, load, resume.

        Calls arriving meanwhile wait up to ``swap_wait_s`` and then get 429 with
        ``Retry-After``; no call is served while the engine loads weights.
        """
        await self._in_loop(self._swap(path, version))

    async def release_idle_memory(self) -> None:
        """Let the engine free what it keeps only to answer fast (:class:`FreesIdleMemory`)
        before a stretch without calls; a no-op for other engines. Calls stay safe meanwhile:
        the engine rebuilds it first."""
        if isinstance(self.engine, FreesIdleMemory):
            await self._in_loop(self.engine.release_idle_memory())

    async def _swap(self, path: str, version: int) -> None:
        if self._swap_lock is None or self._resumed is None or self._idle is None:
            await self.engine.load_adapter(path, version)  # not serving: nothing to drain
            return
        async with self._swap_lock:
            t0 = time.perf_counter()
            self._paused = True
            self._resumed.clear()
            try:
                await self._idle.wait()
                await self.engine.load_adapter(path, version)
            finally:
                self._paused = False
                self._resumed.set()
            self.stats["swaps"] += 1
            logger.info(
                "policy v%d loaded from %s in %.0f ms",
                version,
                path,
                (time.perf_counter() - t0) * 1e3,
            )

    # -- used by the routes ------------------------------------------------------------------

    def generation_request(
        self,
        req: ChatCompletionRequest,
        messages: list[Message],
        *,
        rollout_id: str | None = None,
        sample_id: str | None = None,
    ) -> GenerationRequest:
        """Turn a client request into an engine request, enforcing the run's sampling."""
        s = self.sampling
        temperature = req.temperature if req.temperature is not None else 1.0
        top_p = req.top_p if req.top_p is not None else 1.0
        if s is not None:
            temperature, top_p = s.rollout_temperature, s.rollout_top_p
        max_tokens = self.clamp_max_tokens(req.max_completion_tokens or req.max_tokens)
        stop = [req.stop] if isinstance(req.stop, str) else req.stop
        return GenerationRequest(
            messages=messages,
            tools=req.tools or None,
            tool_choice=req.tool_choice,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            stop=stop or None,
            seed=req.seed,
            rollout_id=rollout_id,
            sample_id=sample_id,
            client_body=req.model_dump(exclude_unset=True) if self.keep_client_body else None,
        )

    def clamp_max_tokens(self, asked: int | None) -> int | None:
        """The completion budget of a call that asks ``asked`` tokens: at most ``[sampling]
        max_tokens`` (which also applies when the call asks none) and at most the engine's
        context window (``engine.context_window``, where the engine knows it). A clamped call
        is counted in ``stats["max_tokens_clamped"]`` and said once per gateway, as a warning
        on the ``osmosis`` logger: frameworks and templates often ask for far more than a
        small model can use (osmosis-ai 0.3's templates ask 16384 per call)."""
        caps: list[tuple[int, str]] = []
        sampling_cap = self.sampling.max_tokens if self.sampling is not None else None
        if sampling_cap is not None:
            caps.append((sampling_cap, "[sampling] max_tokens"))
        window = getattr(self.engine, "context_window", None)
        if isinstance(window, int) and not isinstance(window, bool) and window > 0:
            caps.append((window, "the model's context window"))
        if asked is None:
            return sampling_cap
        if not caps:
            return asked
        cap, why = min(caps)
        if asked <= cap:
            return asked
        self.stats["max_tokens_clamped"] += 1
        if not self._clamp_said:
            self._clamp_said = True
            hint = "" if sampling_cap is not None else (
                "; set [sampling] max_tokens in the config to bound every call"
            )
            logger.warning(
                "a policy call asked for max_tokens=%d; clamped to %d (%s)%s. Said once; the "
                "gateway counts every clamped call",
                asked, cap, why, hint,
            )
        return cap

    async def admit(self) -> None:
        """Wait while a swap is in progress (bounded); then count the call as in flight."""
        assert self._resumed is not None and self._idle is not None
        if self._paused:
            self.stats["waited_for_swap"] += 1
            try:
                await asyncio.wait_for(self._resumed.wait(), timeout=self.swap_wait_s)
            except TimeoutError:
                self.stats["rejected_during_swap"] += 1
                raise GatewayBusy() from None
            if self._paused:  # another swap started right away
                self.stats["rejected_during_swap"] += 1
                raise GatewayBusy()
        self._in_flight += 1
        self._idle.clear()

    def release(self) -> None:
        assert self._idle is not None
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    def record(self, call: LLMCall) -> None:
        if self.store.add(call):
            self.stats["calls"] += 1
