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

Run: ``python -m tests.benchmarks prompt_head``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from tests.benchmarks._report import ROOT, load_average, spread, write_section

ROUNDS = 3
CONVERSATIONS = 16
MAX_TOKENS = 32
BATCH = 32
DEMOS = ROOT / "templates" / "strands" / "demos.jsonl"


def requests() -> list[Any]:
    """One request per assistant turn of ``CONVERSATIONS`` two-question conversations."""
    from osmosis_ai.serving import GenerationRequest

    demos = [json.loads(line) for line in DEMOS.read_text().splitlines() if line.strip()]
    out = []
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


async def _serve(engine: Any, reqs: list[Any]) -> tuple[float, int, int]:
    """Wall seconds for all requests, their prompt tokens and their completion tokens."""
    t0 = time.perf_counter()
    results = await asyncio.gather(*(engine.generate(r) for r in reqs))
    wall = time.perf_counter() - t0
    return (wall, sum(r.prompt_tokens for r in results),
            sum(r.completion_tokens for r in results))


def main() -> None:
    import torch

    from osmosis_trainer.engines import HFEngine
    from osmosis_trainer.models import load_model, training_dtype

    torch.manual_seed(0)
    load_at_start = load_average()
    loaded = load_model("embedded", dtype=training_dtype("auto", "cpu"))
    reqs = requests()
    runs: dict[bool, list[tuple[float, int, int]]] = {True: [], False: []}

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
                runs[head].append(await _serve(eng, reqs))
                await eng.close()
                print("head" if head else "plain", r, runs[head][-1], flush=True)

    asyncio.run(measure())
    walls = {h: [w for w, _, _ in v] for h, v in runs.items()}
    ratio = [p / h for h, p in zip(walls[True], walls[False], strict=True)]
    prompt_tokens = runs[False][0][1]
    completion = {h: statistics.median(c for _, _, c in v) for h, v in runs.items()}
    gain = 1 - 1 / statistics.median(ratio)
    verdict = "pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %): remove it"
    body = (
        f"{len(reqs)} requests ({CONVERSATIONS} two-question tool-call conversations from the "
        f"strands template's demonstrations, one request per assistant turn, {prompt_tokens} "
        f"prompt tokens in all), sent at once to an HF engine of {BATCH} rows; seeded sampling, "
        f"temperature 1.0, up to {MAX_TOKENS} new tokens; embedded SmolLM2-135M-Instruct in "
        f"`dtype = \"auto\"` ({training_dtype('auto', 'cpu')} here). {ROUNDS} interleaved "
        "rounds, the order alternating; each run is a fresh engine that learns the head anew.\n\n"
        "| prefill | wall s (median [min-max]) | completion tokens (median) |\n|---|---|---|\n"
        f"| shared prompt head (`share_prompt_head=True`, the default) | {spread(walls[True])} "
        f"| {completion[True]:.0f} |\n"
        f"| whole prompt per request (transformers' forward, no shared cache) "
        f"| {spread(walls[False])} | {completion[False]:.0f} |\n\n"
        f"plain / head wall, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}; the head "
        f"saves {gain:.0%} of the wall time: {verdict}. The quick start's own effect is in "
        "section `learning` (its RL steps are rollouts of exactly this shape).\n"
    )
    print(body, flush=True)
    write_section(
        "prompt_head",
        "HF engine: a shared prompt head against whole-prompt prefill (real model)",
        body,
        "python -m tests.benchmarks prompt_head",
        load_at_start=load_at_start,
    )


if __name__ == "__main__":
    main()
