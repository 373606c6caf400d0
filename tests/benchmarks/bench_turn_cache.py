"""The HF engine's turn cache (``engines/_hf_turns.py``) against re-prefilling each conversation.

An agent's rollout is a chain of policy calls whose prompts grow by a reply and a tool result
(or a user follow-up) per call. With the turn cache a call starts from the keys/values its
sample's previous call left; without it every call prefills the whole conversation after the
shared prompt head (which both rows keep: it is the default).

Workload: an RL step of the quick start's shape: ``QUESTIONS`` questions of the strands
template's demonstrations x ``SAMPLES`` samples, each a conversation of ``TURNS`` policy calls
(the system prompt and tools block, the question; after a reply with tool calls a tool result
"The result is N." per call, after one without a user follow-up), all conversations running at
once as rollouts do, against an engine of 32 rows; seeded sampling at temperature 1.0, up to
``MAX_TOKENS`` new tokens per call. The embedded SmolLM2-135M-Instruct in the precision
training picks (``dtype = "auto"``); ``ROUNDS`` interleaved rounds, the order alternating, a
fresh engine per run.

Run: ``python -m tests.benchmarks turn_cache``; each run goes to
``docs/benchmarks/turn_cache.json`` as it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_turn_cache render``).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from tests.benchmarks._report import ROOT, spread, write_section
from tests.benchmarks._stored import Sitting, stale_note

NAME = "turn_cache"
TITLE = "HF engine: each conversation's last turn kept against re-prefilling it (real model)"
COMMAND = "python -m tests.benchmarks turn_cache"
CODE = ("trainer/osmosis_trainer/engines", "tests/benchmarks/bench_turn_cache.py")
"""What the section measures (its fingerprint)."""
ROUNDS = 3
QUESTIONS = 8
SAMPLES = 4
TURNS = 5
MAX_TOKENS = 48
BATCH = 32
DEMOS = ROOT / "templates" / "strands" / "demos.jsonl"
FOLLOW_UPS = ("Now subtract 649 from that.", "Multiply it by 5.", "Add 12 to the result.")
_LABELS = {True: "turn cache (`keep_turns=True`, the default)",
           False: "whole conversation after the prompt head per call"}


async def _conversation(engine: Any, first: list[dict[str, Any]], tools: Any, c: int,
                        s: int) -> tuple[int, int]:
    """One rollout's calls; its prompt and completion tokens."""
    from osmosis_ai.serving import GenerationRequest

    messages = list(first)
    prompt = completion = 0
    for t in range(TURNS):
        result = await engine.generate(GenerationRequest(
            messages=messages, tools=tools, temperature=1.0, max_tokens=MAX_TOKENS,
            seed=(c * SAMPLES + s) * TURNS + t, rollout_id=f"q{c}", sample_id=f"s{s}",
        ))
        prompt, completion = prompt + result.prompt_tokens, completion + result.completion_tokens
        messages.append(result.message)
        calls = result.message.get("tool_calls") or []
        if calls:
            messages += [{"role": "tool", "tool_call_id": call.get("id", "call"),
                          "content": f"The result is {100 + 7 * t}."} for call in calls]
        else:
            messages.append({"role": "user", "content": FOLLOW_UPS[t % len(FOLLOW_UPS)]})
    engine.forget_rollout(f"q{c}")
    return prompt, completion


async def _step(engine: Any, demos: list[dict[str, Any]]) -> dict[str, float]:
    t0 = time.perf_counter()
    done = await asyncio.gather(*(
        _conversation(engine, demos[c]["messages"][:2], demos[c]["tools"], c, s)
        for c in range(QUESTIONS) for s in range(SAMPLES)
    ))
    wall = time.perf_counter() - t0
    turns = engine._turns
    return {
        "wall_s": wall,
        "prompt_tokens": sum(p for p, _ in done),
        "completion_tokens": sum(c for _, c in done),
        "reused_tokens": turns.stats["reused_tokens"] if turns is not None else 0,
        "hits": turns.stats["hits"] if turns is not None else 0,
    }


def main() -> None:
    import torch

    from osmosis_trainer.engines import HFEngine
    from osmosis_trainer.models import load_model, training_dtype

    torch.manual_seed(0)
    dtype = training_dtype("auto", "cpu")
    sitting = Sitting.start(NAME, COMMAND, CODE, rounds=ROUNDS, dtype=dtype)
    loaded = load_model("embedded", dtype=dtype)
    demos = [json.loads(line) for line in DEMOS.read_text().splitlines() if line.strip()]

    def engine(keep: bool) -> Any:
        return HFEngine(loaded, device="cpu", max_batch_size=BATCH, seed=0, copy_model=True,
                        share_weights=True, keep_turns=keep)

    async def measure() -> None:
        for keep in (True, False):  # warm-up: first-call allocations and kernels
            warm = engine(keep)
            await _conversation(warm, demos[0]["messages"][:2], demos[0]["tools"], 0, 0)
            await warm.close()
        for r in range(ROUNDS):
            for keep in ((True, False) if r % 2 == 0 else (False, True)):
                eng = engine(keep)
                result = await _step(eng, demos)
                await eng.close()
                sitting.record({"keep_turns": keep, "round": r, "result": result})
                print(_LABELS[keep], r, result, flush=True)

    asyncio.run(measure())
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/turn_cache.json``."""
    if not Sitting.exists(NAME):
        write_section(NAME, TITLE, "No stored results: run the command above.", COMMAND,
                      machine_text="-", date="-")
        return
    sitting = Sitting.load(NAME)
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for run in sitting.runs:
        runs[bool(run["keep_turns"])].append(run["result"])
    walls = {k: [r["wall_s"] for r in v] for k, v in runs.items()}
    ratio = [p / k for k, p in zip(walls[True], walls[False], strict=False)]
    rows = "\n".join(
        f"| {_LABELS[k]} | {spread(walls[k])} "
        f"| {statistics.median(r['prompt_tokens'] for r in v):.0f} "
        f"| {statistics.median(r['reused_tokens'] for r in v):.0f} "
        f"| {statistics.median(r['completion_tokens'] for r in v):.0f} | {len(v)} |"
        for k, v in runs.items() if v
    )
    if len(ratio) >= 3:
        gain = 1 - 1 / statistics.median(ratio)
        verdict = (f"the turn cache saves {gain:.0%} of the wall time: "
                   + ("pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %): remove it"))
    else:
        verdict = f"{len(ratio)} paired round(s): no verdict below 3"
    data = sitting.data
    body = (
        stale_note(sitting)
        + f"Code: {data['commit']} (fingerprint {data['fingerprint']}); load average at the "
        f"start {data['load_at_start']}, at the end {data.get('load_at_end', '-')}; raw runs: "
        f"`docs/benchmarks/{NAME}.json`.\n\n"
        f"{QUESTIONS} questions of the strands template's demonstrations x {SAMPLES} samples, "
        f"each a conversation of {TURNS} policy calls (a tool result after a reply with tool "
        "calls, a user follow-up after one without), all running at once against an HF engine "
        f"of {BATCH} rows; seeded sampling, temperature 1.0, up to {MAX_TOKENS} new tokens per "
        f"call; embedded SmolLM2-135M-Instruct in `dtype = \"auto\"` ({data['dtype']} here); "
        "both rows keep the shared prompt head. Interleaved rounds, the order alternating, a "
        "fresh engine per run.\n\n"
        "| prefill | wall s, median [min-max] | prompt tokens | of them from kept turns "
        "| completion tokens | runs |\n|---|---|---|---|---|---|\n"
        + rows + "\n\n"
        f"whole / kept wall, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}; "
        f"{verdict}. The quick start's rollouts are of this shape (section `learning`).\n"
    )
    print(body, flush=True)
    write_section(NAME, TITLE, body, COMMAND, machine_text=data["machine"],
                  date=f"{data['started']} to {data.get('ended', data['started'])}")


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
