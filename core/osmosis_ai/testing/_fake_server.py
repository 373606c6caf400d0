"""FakeOpenAIServer: the real policy gateway in front of a scripted engine.

It serves from a background thread with its own event loop (``127.0.0.1``, random port), so
it answers any client on any loop: async tests, Strands' synchronous ``agent(...)`` (a fresh
loop per call) and ``Runner.run_sync`` alike. Routes, validation, streaming and the recorded
:class:`~osmosis_ai.rollout.LLMCall` are the gateway's own; only the model is scripted
(:class:`~osmosis_ai.testing.ScriptedEngine`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from osmosis_ai.rollout._types import LLMCall
from osmosis_ai.rollout.scope import DEFAULT_SAMPLE_ID
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing._engine import ScriptedEngine
from osmosis_ai.testing._script import FakeRequest, HTTPFailure, Script

__all__ = ["FakeOpenAIServer"]


class FakeOpenAIServer(PolicyGateway):
    """A scripted OpenAI-compatible server that records token-level calls per sample.

    Args:
        script: what to answer (see :class:`~osmosis_ai.testing.ScriptedEngine`): a sequence
            walked separately by every ``(rollout_id, sample_id)``, or a callable that gets a
            :class:`FakeRequest`. A sample that runs past its script gets HTTP 400.
        model: the model name routes give clients (``policy_name`` of the gateway).
        latency_s: simulated generation time per request.

    Use it as a context manager (sync or async)::

        with FakeOpenAIServer(script=[tool_call("add", a=2, b=3), "5"]) as server:
            route = server.route("r1", "main")   # base_url .../rollouts/r1/samples/main/v1
            ...
            calls = await server.collect("r1")   # {"main": [LLMCall, LLMCall]}
    """

    def __init__(
        self, script: Script = (), *, model: str = "osmosis-policy", latency_s: float = 0.0
    ) -> None:
        self.scripted = ScriptedEngine(script, latency_s=latency_s)
        super().__init__(self.scripted, policy_name=model, keep_client_body=True)
        self.model = model
        self.calls: list[LLMCall] = []
        """Every recorded call, in order (``collect`` does not remove them from here)."""
        self._peers: set[tuple[str, int]] = set()
        self.app.middleware("http")(self._count_connection)

    async def _count_connection(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if request.client is not None:
            self._peers.add((request.client.host, request.client.port))
        return await call_next(request)

    @property
    def connections(self) -> int:
        """How many TCP connections clients opened (keep-alive reuse keeps this low)."""
        return len(self._peers)

    @property
    def requests(self) -> list[FakeRequest]:
        """Every chat-completions request received (answered or failed), in arrival order."""
        return self.scripted.requests

    @property
    def errors(self) -> list[Exception]:
        """Exceptions raised by a script callable (each answered with HTTP 400)."""
        return self.scripted.errors

    @property
    def base_url(self) -> str:
        """The unscoped OpenAI-compatible base URL (``.../v1``)."""
        return self.url + "/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self.start_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_thread()

    async def __aenter__(self) -> FakeOpenAIServer:
        # A thread of its own even here: synchronous clients may block the test's loop.
        self.start_in_thread()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop_thread()

    def fail_next(
        self, count: int = 1, *, status: int = 429, retry_after: float | None = 0.0
    ) -> None:
        """Answer the next ``count`` requests (any sample) with HTTP ``status``."""
        self.scripted.fail_next([HTTPFailure(status, retry_after) for _ in range(count)])

    def calls_for(self, rollout_id: str, sample_id: str = DEFAULT_SAMPLE_ID) -> list[LLMCall]:
        """Recorded calls of one sample (not removed)."""
        return [c for c in self.calls if c.rollout_id == rollout_id and c.sample_id == sample_id]

    def record(self, call: LLMCall) -> None:
        self.calls.append(call)
        super().record(call)
