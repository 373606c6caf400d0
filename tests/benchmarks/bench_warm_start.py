"""The warm start's step with the demonstrations' shared head run once, against the plain forward.

A warm-start step trains on ``batch_size`` demonstrations that all begin with the same system
prompt and tools block (~230 of the quick start's ~350 tokens), while the loss covers only the
assistant's ~30 tokens. With ``[algorithm] share_prompt_prefix`` (the default) the step runs
that head once per micro-batch and its continuations on its cache (``loop._prefix``, the path
RL's update uses); without it every demonstration runs whole (transformers' forward as it is).

Workload: the strands template's 64 demonstrations rendered as the warm start renders them,
``STEPS`` steps of 8 per run (the quick start's batch), LoRA r 8 on all linear layers, AdamW
at the template's lr, the embedded SmolLM2-135M-Instruct in the precision training uses
(``dtype = "auto"``). ``ROUNDS`` interleaved rounds, the order alternating; each run starts
from the same fresh adapter.

Run: ``python -m tests.benchmarks warm_start``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from tests.benchmarks._report import ROOT, load_average, spread, trainer_openmp, write_section

trainer_openmp()  # as the training worker runs (before torch loads)

ROUNDS = 3
STEPS = 4
BATCH = 8
BUDGET = 2048  # the quick start's [algorithm] micro_batch_tokens
DEMOS = ROOT / "templates" / "strands" / "demos.jsonl"


def _run(loaded: Any, demos: list[Any], share: bool) -> tuple[float, list[float]]:
    """Seconds per step (median of ``STEPS``) and the losses, from a fresh adapter."""
    import torch

    from osmosis_trainer.loop._optim import build_optimizer
    from osmosis_trainer.loop._policy import attach_lora
    from osmosis_trainer.warm_start._phase import WarmStartSettings, _sequences, warm_update

    model = attach_lora(loaded.model, r=8, alpha=16, dropout=0.0, target_modules="all-linear",
                        seed=0)
    settings = WarmStartSettings(epochs=1, lr=1e-3, batch_size=BATCH, micro_batch_tokens=BUDGET,
                                 pad_id=int(loaded.tokenizer.pad_token_id), share_prefix=share)
    optimizer = build_optimizer(model, lr=settings.lr, weight_decay=0.0)
    times, losses = [], []
    for step in range(STEPS):
        seqs = _sequences(demos[step * BATCH : (step + 1) * BATCH])
        t0 = time.perf_counter()
        loss, _, _, _ = warm_update(model, optimizer, seqs, settings)
        times.append(time.perf_counter() - t0)
        losses.append(loss)
    model.unload()  # the base model back, for the next run's fresh adapter
    del optimizer
    torch.manual_seed(0)
    return statistics.median(times), losses


def main() -> None:
    import torch

    from osmosis_ai.data import load_demonstrations
    from osmosis_trainer.models import load_model, training_dtype
    from osmosis_trainer.warm_start._render import WarmStartRenderer, eos_token_ids

    torch.manual_seed(0)
    load_at_start = load_average()
    dtype = training_dtype("auto", "cpu")
    loaded = load_model("embedded", dtype=dtype)
    rows, _ = load_demonstrations(DEMOS)
    renderer = WarmStartRenderer(loaded.tokenizer, eos_token_ids(loaded.model, loaded.tokenizer))
    demos = renderer.render_all(rows, max_tokens=4096).demos
    tokens = statistics.mean(d.tokens for d in demos)
    trained = statistics.mean(d.trained_tokens for d in demos)
    _run(loaded, demos, True)  # warm-up: first-call allocations and kernels
    runs: dict[bool, list[float]] = {True: [], False: []}
    losses: dict[bool, list[float]] = {}
    for r in range(ROUNDS):
        for share in ((True, False) if r % 2 == 0 else (False, True)):
            seconds, losses[share] = _run(loaded, demos, share)
            runs[share].append(seconds)
            print("shared" if share else "plain", r, round(seconds, 2), flush=True)
    ratio = [p / s for s, p in zip(runs[True], runs[False], strict=True)]
    gain = 1 - 1 / statistics.median(ratio)
    verdict = "pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %): remove it"
    drift = max(abs(a - b) for a, b in zip(losses[True], losses[False], strict=True))
    body = (
        f"Warm-start steps of {BATCH} demonstrations (the strands template's, rendered as the "
        f"warm start renders them: {tokens:.0f} tokens each on average, {trained:.0f} of them "
        f"trained), {STEPS} steps per run from a fresh LoRA adapter (r 8, all linear layers), "
        f"AdamW lr 1e-3, micro-batches of at most {BUDGET} padded tokens; embedded "
        f"SmolLM2-135M-Instruct in `dtype = \"auto\"` ({dtype} here). {ROUNDS} interleaved "
        "rounds, the order alternating.\n\n"
        "| forward | s per step (median of a run; median [min-max] of runs) |\n|---|---|\n"
        f"| shared head run once per micro-batch (`share_prompt_prefix = true`, the default) "
        f"| {spread(runs[True])} |\n"
        f"| every demonstration whole (transformers' forward) | {spread(runs[False])} |\n\n"
        f"plain / shared, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}; the shared "
        f"head saves {gain:.0%} of the step: {verdict}. Largest loss difference between the "
        f"two over the run's steps: {drift:.1e} (float rounding; the unit test "
        "`tests/trainer/warm_start/test_phase.py` checks equal updates).\n"
    )
    print(body, flush=True)
    write_section(
        "warm_start",
        "Warm start: the demonstrations' shared head against the plain forward (real model)",
        body,
        "python -m tests.benchmarks warm_start",
        load_at_start=load_at_start,
    )


if __name__ == "__main__":
    main()
