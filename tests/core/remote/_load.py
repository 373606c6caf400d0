"""Load and fault harness for the rollout server (used by test_load.py and bench_remote.py).

Everything runs on 127.0.0.1 in one event loop: a fake training cluster that fails or hangs a
fraction of LLM calls and completion callbacks, the rollout server (create_app on uvicorn) and a
driver that admits every rollout at once, then waits (bounded) until each one has a terminal
result, from its callback or, when every callback attempt failed, from the status route.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from osmosis_ai.remote import (
    ClientSettings,
    RolloutContext,
    RolloutRequest,
    RolloutResult,
    ServerSettings,
    create_app,
)
from osmosis_ai.testing import FakeCluster, serve_in_loop, tool_call_message
from tests.core.remote._helpers import AUTH, KEY, ToolLoop

ROOT = Path(__file__).resolve().parents[3]


class FlakyLoop(ToolLoop):
    """``ToolLoop`` whose rows marked ``explode`` raise after their first LLM call, and whose
    rows with ``hold_s`` wait that long before starting (to time admission alone)."""

    name = "flaky-tool-loop"

    async def run(self, ctx: RolloutContext) -> RolloutResult:
        await asyncio.sleep(float(ctx.request.metadata.get("hold_s", 0)))
        if ctx.request.metadata.get("explode"):
            self.runs[ctx.rollout_id] += 1
            # The crash is the reason this row reports, whatever the injected faults did to its
            # LLM call: which call draws a fault depends on arrival order (timing).
            with contextlib.suppress(Exception):
                await ctx.chat(list(ctx.request.messages))
            raise RuntimeError("the environment crashed")
        result = await super().run(ctx)
        # lets a driver in another process see a second run of the same rollout
        result.extra_fields["run_number"] = self.runs[ctx.rollout_id]
        return result


agent_loop = FlakyLoop()
"""Served by ``osmosis serve -m tests.core.remote._load:agent_loop`` in the subprocess mode."""


def _reply(body: Mapping[str, Any]) -> Any:
    if body["messages"][-1]["role"] == "tool":
        return "ok " + body["messages"][-1]["content"]
    return tool_call_message("add", {"a": 2, "b": 3})


@dataclass
class LoadReport:
    n: int
    admitted: int
    admission_ms: list[float]
    wall_s: float
    outcomes: dict[str, dict[str, Any]]
    from_status_route: int
    duplicate_callbacks: int
    runs: dict[str, int]
    faults: dict[str, int]
    problems: list[str] = field(default_factory=list)

    @property
    def completed(self) -> int:
        return sum(o["status"] == "COMPLETED" for o in self.outcomes.values())

    @property
    def errored(self) -> int:
        return sum(o["status"] == "ERROR" for o in self.outcomes.values())

    def percentile(self, q: float) -> float:
        data = sorted(self.admission_ms)
        return data[min(len(data) - 1, round(q / 100 * (len(data) - 1)))]

    def summary(self) -> dict[str, Any]:
        return {
            "rollouts": self.n, "admitted": self.admitted, "completed": self.completed,
            "errored": self.errored, "recovered_from_status_route": self.from_status_route,
            "duplicate_callbacks": self.duplicate_callbacks,
            "admission_p50_ms": round(self.percentile(50), 2),
            "admission_p99_ms": round(self.percentile(99), 2),
            "admission_mean_ms": round(statistics.fmean(self.admission_ms), 2) if self.admission_ms else 0,
            "wall_s": round(self.wall_s, 2), "rollouts_per_s": round(self.n / self.wall_s, 1),
            "faults_injected": self.faults, "problems": self.problems[:10],
        }


async def run_load(n: int, *, fault_rate: float = 0.1, explode_every: int = 20, seed: int = 0,
                   deadline_s: float = 240.0, client_timeout_s: float = 0.3,
                   max_concurrent: int = 200, subprocess: bool = False,
                   hold_s: float = 0.0) -> LoadReport:
    """Admit ``n`` rollouts at once under faults; return what happened to each of them.

    ``subprocess=True`` serves the loop with ``osmosis serve`` in its own process (timings then
    measure the server, not this process's event loop, which also runs the fake cluster).
    ``hold_s`` makes every loop wait before its first LLM call, so that admission is timed
    without rollout work competing for the server.
    """
    client = ClientSettings(
        timeout_seconds=client_timeout_s, connect_timeout_seconds=2.0, max_retries=3,
        retry_backoff_seconds=0.02, retry_backoff_max_seconds=0.2, completion_retries=2,
        completion_timeout_seconds=client_timeout_s, max_connections=200,
    )
    settings = ServerSettings(max_concurrent_rollouts=max_concurrent, max_pending_rollouts=max(n, 1),
                              shutdown_grace_seconds=5.0)
    cluster = FakeCluster(_reply, api_key="cluster", llm_fault_rate=fault_rate,
                          callback_fault_rate=fault_rate, hang_seconds=client_timeout_s * 3, seed=seed)
    ids = [f"load-{i}" for i in range(n)]
    server = _subprocess_server(client, settings) if subprocess else _inprocess_server(client, settings)
    async with cluster, server as (url, pending, runs):
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            started = time.perf_counter()
            answers = await asyncio.gather(*(_admit(url, cluster.url, rid, i % explode_every == 7, hold_s)
                                             for i, rid in enumerate(ids)))
            deadline = started + deadline_s
            while await pending(http) and time.perf_counter() < deadline:  # noqa: ASYNC110 - polls /health
                await asyncio.sleep(0.05)
            wall = time.perf_counter() - started
            outcomes, from_status = await _collect(http, cluster, ids)
            problems = await _check_duplicate_inits(url, cluster.url, ids[: max(1, n // 10)],
                                                    explode_every, hold_s)
    report = LoadReport(
        n=n, admitted=sum(code == 202 for code, _ms in answers), admission_ms=[ms for _c, ms in answers],
        wall_s=wall, outcomes=outcomes, from_status_route=from_status,
        duplicate_callbacks=sum(len(v) - 1 for v in cluster.callbacks.values()),
        runs=runs(outcomes), faults=dict(cluster.faults), problems=problems,
    )
    report.problems += _check(report, ids, cluster)
    return report


@contextlib.asynccontextmanager
async def _inprocess_server(client: ClientSettings, settings: ServerSettings) -> AsyncIterator[Any]:
    loop = FlakyLoop()
    app = create_app(loop, api_key=KEY, client_settings=client, settings=settings)

    async def pending(_http: httpx.AsyncClient) -> int:
        return int(app.state.registry.pending)

    async with serve_in_loop(app) as url:
        yield url, pending, lambda _outcomes: dict(loop.runs)


@contextlib.asynccontextmanager
async def _subprocess_server(client: ClientSettings, settings: ServerSettings) -> AsyncIterator[Any]:
    env = dict(os.environ)
    for prefix, model in (("OSMOSIS_ROLLOUT_CLIENT_", client), ("OSMOSIS_ROLLOUT_SERVER_", settings)):
        env.update({prefix + k.upper(): str(v) for k, v in model.model_dump().items()})
    osmosis = str(Path(sys.executable).parent / "osmosis")
    proc = await asyncio.create_subprocess_exec(
        osmosis, "serve", "-m", "tests.core.remote._load:agent_loop", "-p", "0", "--api-key", KEY,
        "--log-level", "warning", cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    url = ""
    while not url:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line:
            raise RuntimeError("osmosis serve exited before printing its URL")
        if "URL: " in line:
            url = line.split("URL: ", 1)[1].strip()

    async def pending(http: httpx.AsyncClient) -> int:
        return int((await http.get("/health", headers=AUTH)).json()["pending_rollouts"])

    def runs(outcomes: dict[str, dict[str, Any]]) -> dict[str, int]:
        # the server's loop stamps its run number on every result it completes
        return {rid: int(o.get("extra_fields", {}).get("run_number", 1)) for rid, o in outcomes.items()}

    try:
        yield url, pending, runs
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _admit(url: str, cluster_url: str, rid: str, explode: bool,
                 hold_s: float = 0.0) -> tuple[int, float]:
    """POST one init over a fresh connection with a minimal HTTP/1.1 client.

    A bare asyncio stream costs the driver ~0.1 ms per request, where httpx costs ~1 ms: the
    timing then measures the server, not the driver sharing its cores.
    """
    body = RolloutRequest(rollout_id=rid, server_url=cluster_url, api_key="cluster",
                          messages=[{"role": "user", "content": "2+3?"}],
                          metadata={"explode": explode, "hold_s": hold_s}).model_dump_json().encode()
    parts = urlsplit(url)
    head = (f"POST /v1/rollout/init HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(head + body)
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()  # headers and body, until the server closes
    finally:
        writer.close()
    elapsed = (time.perf_counter() - t0) * 1000.0
    return int(status_line.split()[1]), elapsed


async def _collect(http: httpx.AsyncClient, cluster: FakeCluster,
                   ids: list[str]) -> tuple[dict[str, dict[str, Any]], int]:
    """Each rollout's result: its first callback, else (every attempt failed) the status route."""
    outcomes: dict[str, dict[str, Any]] = {}
    from_status = 0
    for rid in ids:
        if cluster.callbacks.get(rid):
            outcomes[rid] = cluster.callbacks[rid][0]
            continue
        view = await http.get(f"/v1/rollout/{rid}", headers=AUTH)
        if view.status_code == 200 and view.json().get("result"):
            outcomes[rid] = view.json()["result"]
            from_status += 1
    return outcomes, from_status


async def _check_duplicate_inits(url: str, cluster_url: str, ids: list[str],
                                 explode_every: int, hold_s: float) -> list[str]:
    """A retried init (the same body) gets 202 again, and never runs twice. (Another body
    under the same id is a conflict, 409: the retry must repeat the body exactly.)"""
    problems = []
    for i, rid in enumerate(ids):
        code, _ = await _admit(url, cluster_url, rid, i % explode_every == 7, hold_s)
        if code != 202:
            problems.append(f"duplicate init of {rid} answered {code}")
    return problems


def _check(report: LoadReport, ids: list[str], cluster: FakeCluster) -> list[str]:
    problems = []
    lost = [rid for rid in ids if rid not in report.outcomes]
    if lost:
        problems.append(f"{len(lost)} rollouts lost, e.g. {lost[:3]}")
    twice = {rid: k for rid, k in report.runs.items() if k != 1}
    if twice or len(report.runs) != len(ids):
        problems.append(f"runs per rollout not exactly 1: {dict(list(twice.items())[:3])}, "
                        f"{len(report.runs)} of {len(ids)} ran")
    for rid, outcome in report.outcomes.items():
        if outcome["status"] not in ("COMPLETED", "ERROR"):
            problems.append(f"{rid}: status {outcome['status']}")
        if outcome["status"] == "ERROR" and not outcome.get("error_message"):
            problems.append(f"{rid}: ERROR without a reason")
        copies = cluster.callbacks.get(rid, [])
        if any(c != copies[0] for c in copies[1:]):
            problems.append(f"{rid}: duplicate callbacks differ")
    return problems


async def sequential_admission(n: int = 200) -> list[float]:
    """Init latencies (ms) of ``n`` rollouts posted one after another (no burst) to a
    subprocess server whose loops then run against the fake cluster."""
    client = ClientSettings(timeout_seconds=5, retry_backoff_seconds=0.02, retry_backoff_max_seconds=0.2)
    settings = ServerSettings(max_pending_rollouts=max(n, 1), shutdown_grace_seconds=5.0)
    latencies = []
    async with FakeCluster(_reply, api_key="cluster") as cluster, \
            _subprocess_server(client, settings) as (url, pending, _runs):
        for i in range(n):
            code, ms = await _admit(url, cluster.url, f"seq-{i}", False)
            assert code == 202, code
            latencies.append(ms)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            deadline = time.perf_counter() + 120
            while await pending(http) and time.perf_counter() < deadline:  # noqa: ASYNC110 - polls /health
                await asyncio.sleep(0.05)
    return latencies
