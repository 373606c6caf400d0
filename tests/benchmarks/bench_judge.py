"""LLM judge throughput and cache: a 100-sample ``osmosis eval rubric`` with a local judge.

Run: ``python -m tests.benchmarks judge``. The judge is the embedded SmolLM2-135M-Instruct
served in process by osmosis's HF engine (offline, CPU). Three passes over the same answers:

1. 100 distinct answers, 8 judge calls in flight (the engine batches them);
2. the same 100 answers again (a re-graded eval): every judgement should come from the cache;
3. 16 of the answers with one call in flight, for the concurrency comparison.

Then prompt injection (``_injection.py``): bad answers graded clean and with an
injected plea or forged verdict, under the raw-paste prompt of before and the tagged prompt of now.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from osmosis_ai.grading import JudgeCache, JudgeModel, RubricJudge
from osmosis_ai.grading._answers import judge_answers
from tests.benchmarks._injection import RUBRIC, TOPICS, injection_section, measure_injection
from tests.benchmarks._report import load_note, write_section

N_SAMPLES = 100
SERIAL_SAMPLES = 16
STYLES = [
    "Tap '{b}' in Settings.",
    "Go to the menu and press '{b}', then confirm.",
    "I think you can find '{b}' somewhere.",
    "Please contact support about {t}.",
    "Open the app, tap '{b}'. Happy to help!",
    "No idea, sorry.",
    "Use the '{b}' button on the main screen.",
    "Try '{b}' under Account.",
    "You must pay first to {t}.",
    "Press '{b}' and follow the steps.",
]


def _dataset(path: Path) -> Path:
    with path.open("w") as fh:
        for i in range(N_SAMPLES):
            topic = TOPICS[i % len(TOPICS)]
            answer = STYLES[(i // len(TOPICS)) % len(STYLES)].format(b=topic.title(), t=topic)
            fh.write(json.dumps({"user_prompt": f"How do I {topic}?", "solution_str": answer}))
            fh.write("\n")
    return path


async def _pass(data: Path, judge: RubricJudge, limit: int | None = None) -> dict[str, float]:
    before = judge.usage.model_copy()
    hits0, miss0 = (judge.cache.hits, judge.cache.misses) if judge.cache else (0, 0)
    t0 = time.perf_counter()
    result = await judge_answers(data, judge, limit=limit)
    wall = time.perf_counter() - t0
    calls = judge.usage.calls - before.calls
    hits = (judge.cache.hits - hits0) if judge.cache else 0
    lookups = hits + ((judge.cache.misses - miss0) if judge.cache else 0)
    return {
        "samples": float(len(result.records)),
        "wall_s": wall,
        "calls": float(calls),
        "calls_per_s": calls / wall if calls else 0.0,
        "samples_per_s": len(result.records) / wall,
        "hit_rate": hits / lookups if lookups else 0.0,
        "failed": float(result.summary.failed),
        "prompt_tokens": float(result.usage.prompt_tokens),
        "completion_tokens": float(result.usage.completion_tokens),
        "retries": float(result.usage.retries),
    }


async def _run(data: Path) -> tuple[float, dict[str, dict[str, float]]]:
    model = JudgeModel("embedded")
    t0 = time.perf_counter()
    await model.chat([{"role": "user", "content": "Hi"}], max_tokens=1)  # load the model
    load_s = time.perf_counter() - t0
    try:
        judge = RubricJudge(RUBRIC, model=model, max_tokens=48, max_concurrent=8)
        first = await _pass(data, judge)
        second = await _pass(data, judge)
        serial_judge = RubricJudge(
            RUBRIC, model=model, max_tokens=48, max_concurrent=1, cache=JudgeCache()
        )
        serial = await _pass(data, serial_judge, limit=SERIAL_SAMPLES)
        injection = await measure_injection(model)
    finally:
        await model.aclose()
    return load_s, {"first": first, "second": second, "serial": serial, **injection}


def _row(name: str, r: dict[str, float]) -> str:
    calls = r["calls"]
    tokens = (
        f"{r['prompt_tokens'] / calls:.0f} + {r['completion_tokens'] / calls:.0f}" if calls else "-"
    )
    wall = f"{r['wall_s']:.1f} s" if r["wall_s"] >= 1 else f"{r['wall_s'] * 1000:.0f} ms"
    return (
        f"| {name} | {r['samples']:.0f} | {calls:.0f} ({r['retries']:.0f} retries) | {tokens} | "
        f"{wall} | {r['calls_per_s']:.2f} | {r['samples_per_s']:.2f} | "
        f"{r['hit_rate'] * 100:.0f}% | {r['failed']:.0f} |"
    )


def _concurrency_verdict(speedup: float) -> str:
    if speedup >= 1.1:
        return f"{speedup:.1f}x the rate with one call at a time (the engine batches them)"
    return (
        f"{speedup:.2f}x the rate with one call at a time: concurrency did not pay for this "
        "judge on this CPU (each call is mostly prompt prefill, which batching does not "
        "shorten when the cores are busy); it pays against hosted or GPU judges, where calls "
        "wait on the network or the GPU has room"
    )


def _load(avg: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.1f}" for x in avg) + " (1 / 5 / 15 min)"


def main() -> None:
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        load_s, r = asyncio.run(_run(_dataset(Path(tmp) / "answers.jsonl")))
    load_at_end = os.getloadavg()
    first, second, serial = r["first"], r["second"], r["serial"]
    speedup = first["calls_per_s"] / serial["calls_per_s"] if serial["calls_per_s"] else 0.0
    body = f"""
`osmosis eval rubric` as a library (`judge_answers`) over {N_SAMPLES} distinct support replies,
judged by the embedded SmolLM2-135M-Instruct (in-process HF engine, CPU, JSON mode with two
worked examples, greedy, at most 48 tokens per answer). Model load: {load_s:.1f} s (not counted).
{load_note(load_at_start[0])} Load average at the start
{_load(load_at_start)}, at the end {_load(load_at_end)}.

| pass | samples | judge calls | tokens per call (prompt + completion) | wall | calls/s | samples/s | cache hits | failed |
|---|---|---|---|---|---|---|---|---|
{_row("1: first grading, 8 calls in flight", first)}
{_row("2: the same eval re-graded", second)}
{_row(f"3: first {SERIAL_SAMPLES}, 1 call in flight", serial)}

- **Judge throughput: {first["calls_per_s"]:.2f} calls/s** with 8 calls in flight,
  {_concurrency_verdict(speedup)}.
- **Cache hit rate: {first["hit_rate"] * 100:.0f}% on the first pass (all answers distinct),
  {second["hit_rate"] * 100:.0f}% when the same samples are graded again**, which then takes
  {second["wall_s"] * 1000:.0f} ms instead of {first["wall_s"]:.0f} s and makes no judge call.
- {first["failed"]:.0f} of {first["samples"]:.0f} judgements failed (a failure is an answer the judge
  never wrote as valid JSON after 2 retries; it is recorded with the raw reply, not scored).

{injection_section(r)}
"""
    print(body)
    write_section(
        "judge",
        "LLM judge: calls/s and cache hit rate (local judge)",
        body,
        "python -m tests.benchmarks judge",
    )


if __name__ == "__main__":
    main()
