"""HTTP client strategies for policy calls, against the gateway.

Run: ``python -m tests.benchmarks httpclient``. The same gateway (a ``ScriptedEngine`` that answers
at once) is called with three strategies in rotating order, sequentially and with 16
concurrent callers, so all see the same machine load: a new ``httpx.AsyncClient`` per request,
one shared pooled client per target, and ``osmosis_ai._http.ClientPool`` (single-connection
keep-alive clients checked out per request). Decides what ``ctx.chat`` and the
OpenAI-compatible/vLLM engine client use.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx

from osmosis_ai._http import ClientPool
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine
from tests.benchmarks._report import load_note, write_section

ROUNDS = 5
CALLS = 300
CONCURRENT = 16
BODY = {
    "model": "osmosis-policy",
    "messages": [{"role": "user", "content": "What is 12 + 30?"}],
    "max_tokens": 16,
}
_SSL = ssl.create_default_context()  # built once either way (as rollout/_chat.py does)


async def _per_request(url: str) -> None:
    async with httpx.AsyncClient(timeout=60, verify=_SSL) as client:
        (await client.post(url, json=BODY)).raise_for_status()


def _pooled(client: httpx.AsyncClient) -> Callable[[str], Awaitable[None]]:
    async def call(url: str) -> None:
        (await client.post(url, json=BODY)).raise_for_status()

    return call


def _checkout(pool: ClientPool) -> Callable[[str], Awaitable[None]]:
    async def call(url: str) -> None:
        (await pool.request("POST", url, json=BODY, timeout=60)).raise_for_status()

    return call


async def _sequential(call: Callable[[str], Awaitable[None]], url: str) -> float:
    """Median ms per call, one caller."""
    times = []
    for _ in range(CALLS):
        t0 = time.perf_counter()
        await call(url)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


async def _concurrent(call: Callable[[str], Awaitable[None]], url: str) -> tuple[float, float]:
    """Calls per second and process CPU ms per call (client and gateway), ``CONCURRENT``
    callers."""
    per = CALLS // CONCURRENT

    async def caller() -> None:
        for _ in range(per):
            await call(url)

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(caller() for _ in range(CONCURRENT)))
    n = per * CONCURRENT
    return n / (time.perf_counter() - t0), (time.process_time() - c0) * 1e3 / n


STRATEGIES = ("new", "shared", "checkout")


async def _run() -> dict[str, list[float]]:
    engine = ScriptedEngine(per_sample=False, script=lambda req: "42")
    out: dict[str, list[float]] = {f"{m}_{k}": [] for m in ("seq", "rate", "cpu") for k in STRATEGIES}
    async with PolicyGateway(engine) as gw:
        url = gw.route("bench", "main").base_url + "/chat/completions"
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        pool = ClientPool()
        async with httpx.AsyncClient(timeout=60, verify=_SSL, limits=limits) as client:
            calls = {"new": _per_request, "shared": _pooled(client), "checkout": _checkout(pool)}
            for call in calls.values():  # warm-up
                await _concurrent(call, url)
            for i in range(ROUNDS):
                order = STRATEGIES[i % 3 :] + STRATEGIES[: i % 3]
                for name in order:
                    out[f"seq_{name}"].append(await _sequential(calls[name], url))
                    rate, cpu = await _concurrent(calls[name], url)
                    out[f"rate_{name}"].append(rate)
                    out[f"cpu_{name}"].append(cpu)
                await gw.collect("bench")
        await pool.aclose()
    return out


def main() -> None:
    load_at_start = os.getloadavg()[0]
    r = asyncio.run(_run())
    med = {k: statistics.median(v) for k, v in r.items()}
    label = {
        "new": "new client per request",
        "shared": "one shared pooled client",
        "checkout": "`ClientPool` (adopted)",
    }
    rows = "\n".join(
        f"| {label[k]} | {med[f'seq_{k}']:.3f} ms | {med[f'rate_{k}']:.0f} calls/s | "
        f"{med[f'cpu_{k}']:.2f} ms |"
        for k in STRATEGIES
    )
    body = f"""
The policy gateway in front of a `ScriptedEngine` that answers at once, called over loopback HTTP
by three client strategies in rotating order: a new `httpx.AsyncClient` per request (CA bundle
loaded once, as `ctx.chat` did before), one shared keep-alive client for the target (one
httpcore pool for all callers), and `osmosis_ai._http.ClientPool` (single-connection keep-alive
clients, checked out per request). {ROUNDS} rounds of {CALLS} calls per strategy; medians over
the rounds. CPU is the whole process's (client and gateway) per call. {load_note(load_at_start)}

| strategy | sequential, median per call | {CONCURRENT} concurrent callers | CPU per call (concurrent) |
|---|---|---|---|
{rows}

A client per request pays a connection set-up on every call (the sequential column); one
shared client removes it but its single httpcore pool costs more CPU per call once many
callers share it (the finding of an earlier session, which measured only that variant).
Decision: `ctx.chat` (`rollout/_chat.py`) and `OpenAIServerEngine` (the vLLM client) use one
`ClientPool` per target and event loop, closed when the loop shuts down; the trainer's
server-workflow bridge already keeps one client per rollout for its init and polls.
"""
    print(body)
    write_section(
        "httpclient", "HTTP clients for policy calls: per request, shared, checked-out pool",
        body, "python -m tests.benchmarks httpclient",
    )


if __name__ == "__main__":
    main()
