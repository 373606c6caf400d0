"""LLM judge throughput and cache: a 100-sample ``osmosis eval rubric`` with a local judge.

Run: ``python -m tests.benchmarks judge``. The judge is the embedded SmolLM2-135M-Instruct
served in process by osmosis's HF engine (offline, CPU). Three passes over the same answers:

1. 100 distinct answers, 8 judge calls in flight (the engine batches them);
2. the same 100 answers again (a re-graded eval): every judgement should come from the cache;
3. 16 of the answers with one call in flight, for the concurrency comparison.

Then prompt injection (``_injection.py``): bad answers graded clean and with an
injected plea or forged verdict, under the raw-paste prompt of before and the tagged prompt of now.

Each pass's counts go to ``docs/benchmarks/judge.json`` as it ends (the injection's scores
too) and the section is rendered from that file (``python -m tests.benchmarks.bench_judge
render`` redoes it without measuring, marked **stale** when the measured code changed since).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from osmosis_ai.grading import JudgeCache, JudgeModel, RubricJudge
from osmosis_ai.grading._answers import judge_answers
from tests.benchmarks._injection import RUBRIC, TOPICS, injection_section, measure_injection
from tests.benchmarks._report import load_note
from tests.benchmarks._stored import Sitting

NAME = "judge"
TITLE = "LLM judge: calls/s and cache hit rate (local judge)"
COMMAND = "python -m tests.benchmarks judge"
CODE = (
    "core/osmosis_ai/grading",
    "tests/benchmarks/_injection.py",
    "tests/benchmarks/bench_judge.py",
)
"""What the section measures (its fingerprint): the grading package, and the injection cases
and the raw-paste prompt the tagged one is compared with."""
N_SAMPLES = 100
SERIAL_SAMPLES = 16
CONCURRENT = 8
MAX_TOKENS = 48
SPEEDUP_PAYS = 1.1
"""Concurrent calls pay when they reach this many times the rate of one call at a time."""
PASSES = ("first", "second", "serial")
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
    """One pass's raw counts: rates are the renderer's to compute."""
    before = judge.usage.model_copy()
    hits0, miss0 = (judge.cache.hits, judge.cache.misses) if judge.cache else (0, 0)
    t0 = time.perf_counter()
    result = await judge_answers(data, judge, limit=limit)
    wall = time.perf_counter() - t0
    hits = (judge.cache.hits - hits0) if judge.cache else 0
    return {
        "samples": len(result.records),
        "wall_s": wall,
        "calls": judge.usage.calls - before.calls,
        "hits": hits,
        "lookups": hits + ((judge.cache.misses - miss0) if judge.cache else 0),
        "failed": result.summary.failed,
        "prompt_tokens": result.usage.prompt_tokens,
        "completion_tokens": result.usage.completion_tokens,
        "retries": result.usage.retries,
    }


async def _run(data: Path, sitting: Sitting) -> None:
    model = JudgeModel("embedded")
    t0 = time.perf_counter()
    await model.chat([{"role": "user", "content": "Hi"}], max_tokens=1)  # load the model
    sitting.data["model_load_s"] = time.perf_counter() - t0  # stored with the first pass
    try:
        judge = RubricJudge(RUBRIC, model=model, max_tokens=MAX_TOKENS, max_concurrent=CONCURRENT)
        sitting.record({"pass": "first", **await _pass(data, judge)})
        sitting.record({"pass": "second", **await _pass(data, judge)})
        serial_judge = RubricJudge(
            RUBRIC, model=model, max_tokens=MAX_TOKENS, max_concurrent=1, cache=JudgeCache()
        )
        sitting.record({"pass": "serial", **await _pass(data, serial_judge, limit=SERIAL_SAMPLES)})
        sitting.record({"pass": "injection", "scores": await measure_injection(model)})
    finally:
        await model.aclose()


def main() -> None:
    load_before = os.getloadavg()[0]  # before this process's own work: was the machine quiet?
    sitting = Sitting.start(
        NAME, COMMAND, CODE, samples=N_SAMPLES, serial_samples=SERIAL_SAMPLES,
        concurrent=CONCURRENT, max_tokens=MAX_TOKENS, load_1min_before=load_before,
    )
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(_dataset(Path(tmp) / "answers.jsonl"), sitting))
    render()


def _rate(n: float, wall: float) -> float:
    return n / wall if wall else 0.0


def _row(name: str, r: dict[str, Any]) -> str:
    calls = r["calls"]
    tokens = (
        f"{r['prompt_tokens'] / calls:.0f} + {r['completion_tokens'] / calls:.0f}" if calls else "-"
    )
    wall = f"{r['wall_s']:.1f} s" if r["wall_s"] >= 1 else f"{r['wall_s'] * 1000:.0f} ms"
    hit_rate = r["hits"] / r["lookups"] if r["lookups"] else 0.0
    return (
        f"| {name} | {r['samples']:.0f} | {calls:.0f} ({r['retries']:.0f} retries) | {tokens} | "
        f"{wall} | {_rate(calls, r['wall_s']):.2f} | {_rate(r['samples'], r['wall_s']):.2f} | "
        f"{hit_rate * 100:.0f}% | {r['failed']:.0f} |"
    )


def _concurrency_verdict(speedup: float) -> str:
    if speedup >= SPEEDUP_PAYS:
        return f"{speedup:.1f}x the rate with one call at a time (the engine batches them)"
    return (
        f"{speedup:.2f}x the rate with one call at a time: concurrency did not pay for this "
        "judge on this CPU (each call is mostly prompt prefill, which batching does not "
        "shorten when the cores are busy); it pays against hosted or GPU judges, where calls "
        "wait on the network or the GPU has room"
    )


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/judge.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    passes = {run["pass"]: run for run in sitting.runs}
    labels = {
        "first": f"1: first grading, {data['concurrent']} calls in flight",
        "second": "2: the same eval re-graded",
        "serial": f"3: first {data['serial_samples']}, 1 call in flight",
    }
    table = "\n".join(_row(labels[key], passes[key]) for key in PASSES if key in passes)
    missing = [labels[key] for key in PASSES if key not in passes]
    if missing:
        table += f"\n\nNot measured (the sitting ended before): {'; '.join(missing)}."
    findings: list[str] = []
    first, second, serial = (passes.get(k) for k in PASSES)
    if first is not None:
        rate = _rate(first["calls"], first["wall_s"])
        line = f"- **Judge throughput: {rate:.2f} calls/s** with {data['concurrent']} calls in flight"
        if serial is not None:
            serial_rate = _rate(serial["calls"], serial["wall_s"])
            speedup = rate / serial_rate if serial_rate else 0.0
            line += f",\n  {_concurrency_verdict(speedup)}"
        findings.append(line + ".")
        if second is not None:
            hit = [p["hits"] / p["lookups"] if p["lookups"] else 0.0 for p in (first, second)]
            findings.append(
                f"- **Cache hit rate: {hit[0] * 100:.0f}% on the first pass (all answers "
                f"distinct),\n  {hit[1] * 100:.0f}% when the same samples are graded again**, "
                f"which then takes\n  {second['wall_s'] * 1000:.0f} ms instead of "
                f"{first['wall_s']:.0f} s and makes "
                + (f"{second['calls']:.0f} judge call(s)." if second["calls"] else "no judge call.")
            )
        findings.append(
            f"- {first['failed']:.0f} of {first['samples']:.0f} judgements failed (a failure is "
            "an answer the judge\n  never wrote as valid JSON after 2 retries; it is recorded "
            "with the raw reply, not scored)."
        )
    injection = (
        injection_section(passes["injection"]["scores"])
        if "injection" in passes
        else "Prompt injection: not measured (the sitting ended before it)."
    )
    body = f"""
`osmosis eval rubric` as a library (`judge_answers`) over {data['samples']} distinct support
replies, judged by the embedded SmolLM2-135M-Instruct (in-process HF engine, CPU, JSON mode with
two worked examples, greedy, at most {data['max_tokens']} tokens per answer). Model load:
{data['model_load_s']:.1f} s (not counted). {load_note(data['load_1min_before'])}

| pass | samples | judge calls | tokens per call (prompt + completion) | wall | calls/s | samples/s | cache hits | failed |
|---|---|---|---|---|---|---|---|---|
{table}

{chr(10).join(findings)}

{injection}
"""
    print(body)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
