"""HF engine throughput (tokens/s) at 1, 8 and 32 concurrent requests, on this machine.

Run: ``python -m tests.benchmarks engine``. Target: 32 concurrent give at least 4x the
tokens/s of 1 (the engine batches concurrent requests into one decoding loop). Each level goes
to ``docs/benchmarks/engine.json`` as it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_engine render``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from osmosis_ai.serving import GenerationRequest
from osmosis_trainer.engines import HFEngine
from osmosis_trainer.models import build_tiny_model
from tests.benchmarks._stored import Sitting

NAME = "engine"
TITLE = "HF engine throughput"
COMMAND = "python -m tests.benchmarks engine"
CODE = (
    "trainer/osmosis_trainer/engines",
    "core/osmosis_ai/serving",
    "tests/benchmarks/bench_engine.py",
)
"""What the section measures (its fingerprint)."""
HIDDEN, LAYERS, HEADS = 256, 4, 4
NEW_TOKENS = 32
LEVELS = (1, 8, 32)
REQUESTS = 64  # per level
BATCH = 32
WARMUP = 8
TARGET_RATIO = 4.0
"""Tokens/s at the highest level over tokens/s at the lowest."""


def _request(i: int) -> GenerationRequest:
    return GenerationRequest(
        messages=[{"role": "user", "content": f"What is {i} + {2 * i}? Use the calculator."}],
        max_tokens=NEW_TOKENS,
        seed=i,
    )


async def _level(engine: HFEngine, concurrency: int) -> dict[str, Any]:
    """Run REQUESTS requests with ``concurrency`` in flight; the wall time, each request's
    latency and the tokens generated."""
    queue = list(range(REQUESTS))
    latencies: list[float] = []
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        while queue:
            i = queue.pop()
            t0 = time.perf_counter()
            res = await engine.generate(_request(i))
            latencies.append(time.perf_counter() - t0)
            tokens += res.completion_tokens

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "latencies_s": latencies, "tokens": tokens}


async def _run(model_dir: Path, sitting: Sitting) -> None:
    engine = HFEngine(str(model_dir), device="cpu", max_batch_size=BATCH, seed=0)
    try:
        await asyncio.gather(*(engine.generate(_request(i)) for i in range(WARMUP)))  # warm-up
        for c in LEVELS:
            result = await _level(engine, c)
            print(c, result["tokens"] / result["wall_s"], "tokens/s", flush=True)
            sitting.record({"concurrency": c, **result})
    finally:
        await engine.close()


def main() -> None:
    import torch

    # On a shared, oversubscribed CPU, OpenMP threads spin against each other: one intra-op
    # thread measured ~10x faster per token than two here. Override with OSMOSIS_BENCH_THREADS.
    torch.set_num_threads(int(os.environ.get("OSMOSIS_BENCH_THREADS", "1")))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(
            Path(tmp) / "m", hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS
        )
        from transformers import AutoModelForCausalLM

        params = sum(
            p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters()
        )
        sitting = Sitting.start(
            NAME, COMMAND, CODE, threads=torch.get_num_threads(), params=params, hidden=HIDDEN,
            layers=LAYERS, heads=HEADS, new_tokens=NEW_TOKENS, requests=REQUESTS,
            levels=list(LEVELS), max_batch_size=BATCH, temperature=_request(0).temperature,
        )
        asyncio.run(_run(model_dir, sitting))
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/engine.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    d = sitting.data
    tps = {r["concurrency"]: r["tokens"] / r["wall_s"] for r in sitting.runs}
    low, high = d["levels"][0], d["levels"][-1]
    base = tps.get(low)
    table = "\n".join(
        f"| {r['concurrency']} | {tps[r['concurrency']]:.0f} | "
        + (f"{tps[r['concurrency']] / base:.1f}x" if base else "-")
        + f" | {sum(r['latencies_s']) / len(r['latencies_s']) * 1e3:.0f} ms | {r['tokens']} |"
        for r in sitting.runs
    )
    if base and high in tps:
        ratio = tps[high] / base
        ok = "met" if ratio >= TARGET_RATIO else "NOT met"
        verdict = f"**{ratio:.1f}x** (target >= {TARGET_RATIO:g}x: {ok})"
    else:
        verdict = "not decided (the sitting ended before both levels ran)"
    # one line of prose: a wrapped line that began "1." would read as a list in Markdown
    body = (
        f"`HFEngine` on CPU ({d['threads']} torch threads), tiny random Qwen2 (hidden "
        f"{d['hidden']}, {d['layers']} layers, {d['params'] / 1e6:.2f}M parameters, fp32), "
        f"{d['requests']} chat requests per level, up to {d['new_tokens']} new tokens each, "
        f"sampled at temperature {d['temperature']:g}. Concurrent requests are grouped by the "
        f"engine's batching loop (up to {d['max_batch_size']} rows) into one padded, KV-cached "
        "decoding loop.\n\n"
        f"| concurrent requests | tokens/s | vs {low} | mean latency | tokens |\n"
        "|---|---|---|---|---|\n"
        f"{table}\n\n"
        f"{high} concurrent vs {low}: {verdict}.\n"
    )
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
