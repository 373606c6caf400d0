"""Reliability under hostile input: malformed requests to ``osmosis serve`` and to the policy
gateway, each in its own process on 127.0.0.1. Reports the answer histogram per server (the
bar: zero 5xx, zero dropped connections) and the server's RSS before and after the run.

``python -m tests.benchmarks hostile`` (``OSMOSIS_BENCH_HOSTILE_N`` requests per server).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.benchmarks._stored import Sitting

ROOT = Path(__file__).resolve().parents[2]
KEY = "bench-key"
N = int(os.environ.get("OSMOSIS_BENCH_HOSTILE_N", "3000"))
NAME = "hostile"
TITLE = "Hostile input: answers and memory of both servers"
COMMAND = "python -m tests.benchmarks hostile"
CODE = ("core/osmosis_ai/serving", "core/osmosis_ai/remote", "tests/benchmarks/bench_hostile.py")
"""What the section measures (its fingerprint)."""

_GATEWAY = """
import asyncio, sys
from osmosis_ai.serving.gateway import PolicyGateway
from osmosis_ai.testing import ScriptedEngine
async def main():
    async with PolicyGateway(ScriptedEngine(lambda _r: "ok"), api_key="bench-key") as gw:
        print("URL:", gw.url, flush=True)
        await asyncio.Event().wait()
try:
    asyncio.run(main())
except KeyboardInterrupt:  # the benchmark stops it with SIGINT
    pass
"""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _hostile_values(rng: random.Random) -> str:
    """Raw JSON text of one hostile value."""
    depth = rng.choice([70, 300, 950, 5000])
    return rng.choice([
        "[" * depth + "]" * depth,
        "9" * rng.choice([4301, 5000, 20000]),
        '"\\ud800"',
        "1e999",
        json.dumps("x" * rng.choice([10, 100_000])),
        json.dumps("../../" * 20 + "etc/passwd"),
        "{" + ", ".join(f'"k{i}": {i}' for i in range(rng.choice([10, 2000]))) + "}",
        "null",
    ])


def _init_body(rng: random.Random, i: int) -> bytes:
    fields = {
        "rollout_id": json.dumps(rng.choice([f"h-{i}", f"h/{i}", "", " ", "x" * 300, f"h-{i % 50}"])),
        "server_url": json.dumps(rng.choice(["http://127.0.0.1:9", "ftp://x", "http://u:p@127.0.0.1:9",
                                             "http://169.254.169.254", "not a url"])),
        "messages": json.dumps([{"role": "user", "content": "hi" * rng.choice([1, 50_000])}]),
        "metadata": "{}",
        "completion_params": json.dumps({"temperature": rng.choice([0.5, -1, 1e9])}),
        "api_key": json.dumps(rng.choice(["k", "clé", "a b"])),
    }
    for key in rng.sample(sorted(fields), rng.choice([0, 1, 2])):
        fields[key] = _hostile_values(rng)
    if rng.random() < 0.1:
        del fields[rng.choice(sorted(fields))]
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    if rng.random() < 0.05:
        text = text[: rng.randrange(len(text))]  # truncated
    return text.encode("utf-8", "surrogatepass")


def _chat_body(rng: random.Random) -> bytes:
    fields = {
        "model": '"m"',
        "messages": json.dumps([{"role": rng.choice(["user", "robot"]), "content": "hi"}]),
        "max_tokens": rng.choice(["8", "0", "-1", '"many"']),
        "temperature": rng.choice(["1", "5", "null"]),
    }
    for key in rng.sample(sorted(fields), rng.choice([0, 1, 2])):
        fields[key] = _hostile_values(rng)
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}"
    if rng.random() < 0.05:
        text = text[: rng.randrange(len(text))]
    return text.encode("utf-8", "surrogatepass")


async def _start(argv: list[str], env: dict[str, str]) -> tuple[Any, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
        if not line:
            raise RuntimeError("server exited before printing its URL")
        if m := re.search(r"URL: (http://\S+)", line):
            proc.drained = asyncio.get_running_loop().create_task(_drain(proc))
            return proc, m.group(1)


async def _drain(proc: Any) -> None:
    """Keep reading the server's output (its log), counting tracebacks."""
    proc.tracebacks = 0
    while line := await proc.stdout.readline():
        proc.tracebacks += b"Traceback" in line
        if os.environ.get("OSMOSIS_BENCH_ECHO"):  # show the server's log while debugging
            sys.stderr.write(line.decode(errors="replace"))


async def _hammer(url: str, path: str, bodies: list[bytes], headers: dict[str, str]) -> Counter[str]:
    answers: Counter[str] = Counter()
    sem = asyncio.Semaphore(16)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        async def one(body: bytes, i: int) -> None:
            extra = {"x-osmosis-sample-id": ["main", "../x", "a%2Fb", "ok-1"][i % 4]}
            async with sem:
                try:
                    resp = await client.post(path, content=body,
                                             headers={**headers, **extra})
                    answers[str(resp.status_code)] += 1
                except httpx.HTTPError as exc:
                    answers[f"dropped ({type(exc).__name__})"] += 1
        await asyncio.gather(*(one(b, i) for i, b in enumerate(bodies)))
    return answers


async def _run_one(name: str, argv: list[str], env: dict[str, str], path: str,
                   bodies: list[bytes]) -> dict[str, Any]:
    proc, url = await _start(argv, env)
    try:
        headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
        warm = await _hammer(url, path, bodies[:200], headers)
        rss_before = _rss_mb(proc.pid)
        answers = await _hammer(url, path, bodies, headers)
        answers.update(warm)
        await asyncio.sleep(2)  # let admitted rollouts finish (their callbacks fail fast)
        rss_mid = _rss_mb(proc.pid)
        answers.update(await _hammer(url, path, bodies, headers))  # again: does it keep growing?
        await asyncio.sleep(2)
        rss_after = _rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        # Read its log to the end inside this loop: a pipe left open past asyncio.run's end
        # is closed on a closed loop ("Event loop is closed" at exit).
        await asyncio.wait_for(proc.drained, 30)
    return {"name": name, "sent": sum(answers.values()), "answers": dict(sorted(answers.items())),
            "rss_before_mb": round(rss_before, 1), "rss_mid_mb": round(rss_mid, 1),
            "rss_after_mb": round(rss_after, 1),
            "tracebacks": getattr(proc, "tracebacks", 0)}


async def _measure() -> list[dict[str, Any]]:
    rng = random.Random(0)
    env = {**os.environ, "OSMOSIS_ROLLOUT_CLIENT_MAX_RETRIES": "0",
           "OSMOSIS_ROLLOUT_CLIENT_COMPLETION_RETRIES": "0",
           "OSMOSIS_ROLLOUT_CLIENT_CONNECT_TIMEOUT_SECONDS": "1"}
    osmosis = str(Path(sys.executable).parent / "osmosis")
    serve = [osmosis, "serve", "-m", "tests.core.remote._load:agent_loop", "-p", "0",
             "--api-key", KEY, "--log-level", "warning"]
    rollout = await _run_one("osmosis serve (rollout server)", serve, env, "/v1/rollout/init",
                             [_init_body(rng, i) for i in range(N)])
    gateway = await _run_one("policy gateway", [sys.executable, "-c", _GATEWAY], env,
                             "/v1/chat/completions", [_chat_body(rng) for _ in range(N)])
    return [rollout, gateway]


def main() -> None:
    sitting = Sitting.start(NAME, COMMAND, CODE, per_server=N)
    for result in asyncio.run(_measure()):
        print(json.dumps(result), flush=True)
        sitting.record(result)
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/hostile.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    rows = ["| server | requests | answers (status: count) | 5xx | dropped | tracebacks in log "
            "| RSS MB: warm -> after pass 1 -> after pass 2 |", "|---|---|---|---|---|---|---|"]
    clean = True
    for r in sitting.runs:
        five = sum(v for k, v in r["answers"].items() if k.startswith("5"))
        dropped = sum(v for k, v in r["answers"].items() if k.startswith("dropped"))
        clean = clean and five == dropped == r["tracebacks"] == 0
        hist = ", ".join(f"{k}: {v}" for k, v in r["answers"].items())
        rows.append(f"| {r['name']} | {r['sent']} | {hist} | {five} | {dropped} | "
                    f"{r['tracebacks']} | {r['rss_before_mb']} -> {r['rss_mid_mb']} -> "
                    f"{r['rss_after_mb']} |")
    verdict = ("met: no 5xx, no dropped connection, no traceback" if clean
               else "NOT met: see the 5xx, dropped and traceback columns")
    body = (
        "Seeded malformed requests (deep nesting up to 5,000 levels, 4,301-20,000-digit numbers, "
        "lone surrogates, 1e999, path-like ids and sample ids, credentials in URLs, 100 KB "
        "prompts, truncated JSON, wrong types), 16 at a time, against each server in its own "
        "process; the whole set is sent twice. RSS is read after 200 warm-up requests and after "
        "each pass: a plateau between the passes means memory is bounded (what grows in pass 1 "
        "is allocator arenas and the bounded stores filling).\n\n" + "\n".join(rows)
        + f"\n\nThe bar (zero 5xx, zero dropped, zero tracebacks on both servers): {verdict}.\n"
    )
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
