"""HF engine throughput (tokens/s) at 1, 8 and 32 concurrent requests, on this machine.

Run: ``python -m tests.benchmarks engine``. Target: 32 concurrent give at least 4x the
tokens/s of 1 (the engine batches concurrent requests into one decoding loop).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from osmosis_ai.serving import GenerationRequest
from osmosis_trainer.engines import HFEngine
from osmosis_trainer.models import build_tiny_model
from tests.benchmarks._report import write_section

HIDDEN, LAYERS, HEADS = 256, 4, 4
NEW_TOKENS = 32
LEVELS = (1, 8, 32)
REQUESTS = 64  # per level


def _request(i: int) -> GenerationRequest:
    return GenerationRequest(
        messages=[{"role": "user", "content": f"What is {i} + {2 * i}? Use the calculator."}],
        max_tokens=NEW_TOKENS,
        seed=i,
    )


async def _level(engine: HFEngine, concurrency: int) -> tuple[float, float, int]:
    """Run REQUESTS requests with ``concurrency`` in flight; (tokens/s, mean latency, tokens)."""
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
    return tokens / wall, sum(latencies) / len(latencies), tokens


async def _run(model_dir: Path) -> list[tuple[int, float, float, int]]:
    engine = HFEngine(str(model_dir), device="cpu", max_batch_size=32, seed=0)
    try:
        await asyncio.gather(*(engine.generate(_request(i)) for i in range(8)))  # warm-up
        return [(c, *await _level(engine, c)) for c in LEVELS]
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
        rows = asyncio.run(_run(model_dir))
    base = rows[0][1]
    table = "\n".join(
        f"| {c} | {tps:.0f} | {tps / base:.1f}x | {lat * 1e3:.0f} ms | {tok} |"
        for c, tps, lat, tok in rows
    )
    ratio = rows[-1][1] / base
    ok = "met" if ratio >= 4 else "NOT met"
    body = f"""
`HFEngine` on CPU ({torch.get_num_threads()} torch threads), tiny random Qwen2 (hidden {HIDDEN},
{LAYERS} layers, {params / 1e6:.2f}M parameters, fp32), {REQUESTS} chat requests per level, up to
{NEW_TOKENS} new tokens each, sampled at temperature 1. Concurrent requests are grouped by the
engine's batching loop into one padded, KV-cached decoding loop.

| concurrent requests | tokens/s | vs 1 | mean latency | tokens |
|---|---|---|---|---|
{table}

32 concurrent vs 1: **{ratio:.1f}x** (target >= 4x: {ok}).
"""
    print(body)
    write_section("engine", "HF engine throughput", body, "python -m tests.benchmarks engine")


if __name__ == "__main__":
    main()
