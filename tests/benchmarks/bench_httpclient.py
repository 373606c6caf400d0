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
import ssl
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import httpx

from osmosis_ai._http import ClientPool
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine
from tests.benchmarks._report import load_note
from tests.benchmarks._stored import Sitting

NAME = "httpclient"
TITLE = "HTTP clients for policy calls: per request, shared, checked-out pool"
COMMAND = "python -m tests.benchmarks httpclient"
CODE = (
    "core/osmosis_ai/_http.py",
    "core/osmosis_ai/serving/gateway",
    "tests/benchmarks/bench_httpclient.py",
)
"""What the section measures (its fingerprint)."""
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


async def _run(sitting: Sitting) -> None:
    engine = ScriptedEngine(per_sample=False, script=lambda req: "42")
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
                run: dict[str, float | int | str] = {"round": i, "order": " ".join(order)}
                for name in order:
                    run[f"seq_{name}"] = await _sequential(calls[name], url)
                    run[f"rate_{name}"], run[f"cpu_{name}"] = await _concurrent(calls[name], url)
                await gw.collect("bench")
                sitting.record(run)
                print(run, flush=True)
        await pool.aclose()


def main() -> None:
    sitting = Sitting.start(NAME, COMMAND, CODE, calls=CALLS, concurrent=CONCURRENT)
    asyncio.run(_run(sitting))
    render()


def adopted_verdict(rounds: list[dict[str, float]]) -> str:
    """Whether ``ClientPool`` (our own) earns its place over one shared httpx client (the
    library's way): >= 10 % more concurrent calls/s in every one of >= 3 interleaved rounds."""
    gains = [r["rate_checkout"] / r["rate_shared"] for r in rounds]
    shown = ", ".join(f"{g:.2f}x" for g in gains)
    if len(gains) >= 3 and min(gains) >= 1.10:
        return (f"`ClientPool` beats one shared httpx client by >= 10 % in calls/s in every "
                f"round ({shown}): keep it")
    return (f"`ClientPool` does NOT beat one shared httpx client by 10 % in every one of >= 3 "
            f"rounds ({shown}): use the shared client")


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/httpclient.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    rounds, data = sitting.runs, sitting.data
    med = {
        f"{m}_{k}": statistics.median(r[f"{m}_{k}"] for r in rounds)
        for m in ("seq", "rate", "cpu")
        for k in STRATEGIES
    }
    label = {
        "new": "new client per request",
        "shared": "one shared pooled client (httpx's way)",
        "checkout": "`ClientPool` (ours)",
    }
    rows = "\n".join(
        f"| {label[k]} | {med[f'seq_{k}']:.3f} ms | {med[f'rate_{k}']:.0f} calls/s | "
        f"{med[f'cpu_{k}']:.2f} ms |"
        for k in STRATEGIES
    )
    at_start = float(data["load_at_start"].split(" / ")[0])
    body = f"""
The policy gateway in front of a `ScriptedEngine` that answers at once, called over loopback HTTP
by three client strategies in rotating order: a new `httpx.AsyncClient` per request (CA bundle
loaded once), one shared keep-alive client for the target (one httpcore pool for all callers),
and `osmosis_ai._http.ClientPool` (single-connection keep-alive clients, checked out per
request). {len(rounds)} rounds of {data["calls"]} calls per strategy; medians over the rounds.
CPU is the whole process's (client and gateway) per call. {load_note(at_start)}

| strategy | sequential, median per call | {data["concurrent"]} concurrent callers | CPU per call (concurrent) |
|---|---|---|---|
{rows}

Verdict: {adopted_verdict(rounds)}. `ctx.chat` (`rollout/_chat.py`) and `OpenAIServerEngine`
(the vLLM client) use one `ClientPool` per target and event loop.
"""
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
