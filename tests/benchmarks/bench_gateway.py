"""Gateway overhead per call: the same ScriptedEngine called directly vs through the HTTP gateway.

Run: ``python -m tests.benchmarks gateway``. Target: median overhead under 2 ms.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import httpx

from osmosis_ai.serving import GenerationRequest
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine
from tests.benchmarks._stored import Sitting

NAME = "gateway"
TITLE = "Policy gateway overhead"
COMMAND = "python -m tests.benchmarks gateway"
CODE = ("core/osmosis_ai/serving", "tests/benchmarks/bench_gateway.py")
"""What the section measures (its fingerprint)."""
N_CALLS = 1000
CONCURRENT_CLIENTS = 16
MESSAGES = [
    {"role": "system", "content": "You are a calculator agent."},
    {"role": "user", "content": "What is 12 + 30? Use the add tool."},
]


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


async def _direct(engine: ScriptedEngine) -> list[float]:
    req = GenerationRequest(messages=MESSAGES, max_tokens=64)
    out = []
    for _ in range(N_CALLS):
        t0 = time.perf_counter()
        await engine.generate(GenerationRequest.model_validate(req.model_dump()))
        out.append((time.perf_counter() - t0) * 1e3)
    return out


async def _through_gateway(gw: PolicyGateway) -> list[float]:
    body = {"model": "osmosis-policy", "messages": MESSAGES, "max_tokens": 64}
    url = gw.route("bench", "main").base_url + "/chat/completions"
    out = []
    async with httpx.AsyncClient() as client:
        for i in range(N_CALLS + 50):
            t0 = time.perf_counter()
            r = await client.post(url, json=body)
            dt = (time.perf_counter() - t0) * 1e3
            assert r.status_code == 200, r.text
            if i >= 50:  # warm-up
                out.append(dt)
            if i % 100 == 0:
                await gw.collect("bench")
    return out


async def _throughput(gw: PolicyGateway) -> float:
    body = {"model": "osmosis-policy", "messages": MESSAGES, "max_tokens": 64}
    per_client = N_CALLS // CONCURRENT_CLIENTS

    async def client(i: int) -> None:
        url = gw.route(f"t{i}", "main").base_url + "/chat/completions"
        async with httpx.AsyncClient() as c:
            for _ in range(per_client):
                (await c.post(url, json=body)).raise_for_status()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(CONCURRENT_CLIENTS)))
    return per_client * CONCURRENT_CLIENTS / (time.perf_counter() - t0)


async def _run() -> dict[str, float]:
    engine = ScriptedEngine(per_sample=False, script=lambda req: "The answer is 42.")
    direct = await _direct(engine)
    async with PolicyGateway(engine) as gw:
        via = await _through_gateway(gw)
        calls_per_s = await _throughput(gw)
    return {
        "direct_median": statistics.median(direct),
        "gateway_median": statistics.median(via),
        "gateway_p90": _pct(via, 0.9),
        "gateway_p99": _pct(via, 0.99),
        "overhead_median": statistics.median(via) - statistics.median(direct),
        "calls_per_s": calls_per_s,
    }


def main() -> None:
    sitting = Sitting.start(NAME, COMMAND, CODE, calls=N_CALLS, clients=CONCURRENT_CLIENTS)
    sitting.record(asyncio.run(_run()))
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/gateway.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    r = sitting.runs[-1]
    n, clients = sitting.data["calls"], sitting.data["clients"]
    ok = "met" if r["overhead_median"] < 2.0 else "NOT met"
    body = f"""
Sequential calls with a `ScriptedEngine` that answers at once (so the difference is the gateway:
HTTP, JSON, validation, recording the call with its token ids). {n} calls each way,
one keep-alive `httpx.AsyncClient` on the same machine.

| measure | value |
|---|---|
| engine called directly, median | {r["direct_median"]:.3f} ms |
| through the gateway, median | {r["gateway_median"]:.3f} ms |
| through the gateway, p90 / p99 | {r["gateway_p90"]:.3f} / {r["gateway_p99"]:.3f} ms |
| **gateway overhead, median** | **{r["overhead_median"]:.3f} ms** (target < 2 ms: {ok}) |
| throughput, {clients} concurrent clients | {r["calls_per_s"]:.0f} calls/s |
"""
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
