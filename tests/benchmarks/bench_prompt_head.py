"""The HF engine's shared prompt head (``engines/_hf_batch.PromptHead``) against plain prefill.

An agent's policy calls all start with the same system prompt and tools block (~230 tokens of
the quick start's ~350-token prompts) and end in short replies (a tool call: ~25 tokens), so
prefill is most of a call's cost. The head keeps that block's keys/values once per adapter
version; without it every call prefills its whole prompt (transformers' forward as it is: it
has no cache shared across requests of a batch).

Workload: the strands template's demonstrations chained two by two into conversations of two
questions, each with its tool call, tool result and answer; every assistant turn is one
request (4 per conversation, prompts growing over the turns), all sent at once to an engine of
32 rows, seeded sampling at temperature 1.0 and up to ``MAX_TOKENS`` new tokens. The embedded
SmolLM2-135M-Instruct in the precision training serves it (``dtype = "auto"``); ``ROUNDS``
interleaved rounds, the order alternating.

Run: ``python -m tests.benchmarks prompt_head``; each run goes to
``docs/benchmarks/prompt_head.json`` as it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_prompt_head render`` redoes it without measuring, marked
**stale** when the measured code changed since).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from tests.benchmarks._report import ROOT, spread
from tests.benchmarks._stored import Sitting

NAME = "prompt_head"
TITLE = "HF engine: a shared prompt head against whole-prompt prefill (real model)"
COMMAND = "python -m tests.benchmarks prompt_head"
CODE = ("trainer/osmosis_trainer/engines", "tests/benchmarks/bench_prompt_head.py")
"""What the section measures (its fingerprint)."""
ROUNDS = 3
CONVERSATIONS = 16
MAX_TOKENS = 32
BATCH = 32
MIN_ROUNDS = 3
"""A keep/remove verdict needs at least this many paired rounds."""
DEMOS = ROOT / "templates" / "strands" / "demos.jsonl"
_LABELS = {
    True: "shared prompt head (`share_prompt_head=True`, the default)",
    False: "whole prompt per request (transformers' forward, no shared cache)",
}


def requests() -> list[Any]:
    """One request per assistant turn of ``CONVERSATIONS`` two-question conversations."""
    from osmosis_ai.serving import GenerationRequest

    demos = [json.loads(line) for line in DEMOS.read_text().splitlines() if line.strip()]
    out: list[Any] = []
    for c in range(CONVERSATIONS):
        first, second = demos[2 * c], demos[2 * c + 1]
        messages = first["messages"] + second["messages"][1:]  # one system prompt
        for i, message in enumerate(messages):
            if message["role"] == "assistant":
                out.append(GenerationRequest(
                    messages=messages[:i], tools=first["tools"], temperature=1.0,
                    max_tokens=MAX_TOKENS, seed=len(out),
                ))
    return out


async def _serve(engine: Any, reqs: list[Any]) -> dict[str, float]:
    """Wall seconds for all requests, their prompt tokens and their completion tokens."""
    t0 = time.perf_counter()
    results = await asyncio.gather(*(engine.generate(r) for r in reqs))
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "prompt_tokens": sum(r.prompt_tokens for r in results),
        "completion_tokens": sum(r.completion_tokens for r in results),
    }


def main() -> None:
    import torch

    from osmosis_trainer.engines import HFEngine
    from osmosis_trainer.models import load_model, training_dtype

    torch.manual_seed(0)
    dtype = training_dtype("auto", "cpu")
    reqs = requests()
    sitting = Sitting.start(NAME, COMMAND, CODE, rounds=ROUNDS, conversations=CONVERSATIONS,
                            requests=len(reqs), max_tokens=MAX_TOKENS, batch=BATCH, dtype=dtype)
    loaded = load_model("embedded", dtype=dtype)

    def engine(head: bool) -> Any:  # a fresh engine per run: no head learned before it
        return HFEngine(loaded, device="cpu", max_batch_size=BATCH, seed=0, copy_model=True,
                        share_weights=True, share_prompt_head=head)

    async def measure() -> None:
        for head in (True, False):  # warm-up: first-call allocations and kernels
            warm = engine(head)
            await _serve(warm, reqs[:BATCH])
            await warm.close()
        for r in range(ROUNDS):
            for head in ((True, False) if r % 2 == 0 else (False, True)):
                eng = engine(head)
                result = await _serve(eng, reqs)
                await eng.close()
                sitting.record({"head": head, "round": r, **result})
                print("head" if head else "plain", r, result, flush=True)

    asyncio.run(measure())
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/prompt_head.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    runs: dict[bool, dict[int, dict[str, Any]]] = {True: {}, False: {}}
    for run in sitting.runs:
        runs[bool(run["head"])][int(run["round"])] = run
    paired = sorted(set(runs[True]) & set(runs[False]))
    ratio = [runs[False][r]["wall_s"] / runs[True][r]["wall_s"] for r in paired]
    if len(ratio) >= MIN_ROUNDS:
        gain = 1 - 1 / statistics.median(ratio)
        verdict = f"the head saves {gain:.0%} of the wall time: " + (
            "pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %): remove it"
        )
    else:
        verdict = f"{len(ratio)} paired round(s): no verdict below {MIN_ROUNDS}"
    # Every request's whole prompt, as the plain rows count it (the head changes what is
    # computed, not the prompt).
    prompt = [r["prompt_tokens"] for r in runs[False].values()] or [
        r["prompt_tokens"] for r in runs[True].values()
    ]
    rows = "".join(
        f"| {_LABELS[head]} | {spread([r['wall_s'] for r in v.values()])} "
        f"| {statistics.median(r['completion_tokens'] for r in v.values()):.0f} |\n"
        for head, v in runs.items() if v
    )
    body = (
        f"{data['requests']} requests ({data['conversations']} two-question tool-call "
        "conversations from the strands template's demonstrations, one request per assistant "
        f"turn, {statistics.median(prompt):.0f} prompt tokens in all), sent at once to an HF "
        f"engine of {data['batch']} rows; seeded sampling, temperature 1.0, up to "
        f"{data['max_tokens']} new tokens; embedded SmolLM2-135M-Instruct in "
        f"`dtype = \"auto\"` ({data['dtype']} here). {len(paired)} interleaved rounds, the "
        "order alternating; each run is a fresh engine that learns the head anew.\n\n"
        "| prefill | wall s (median [min-max]) | completion tokens (median) |\n|---|---|---|\n"
        + rows + "\n"
        f"plain / head wall, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}; "
        f"{verdict}. The quick start's own effect is in section `learning` (its RL steps are "
        "rollouts of exactly this shape).\n"
    )
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
