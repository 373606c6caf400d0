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

Run: ``python -m tests.benchmarks warm_start``; each run goes to
``docs/benchmarks/warm_start.json`` as it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_warm_start render`` redoes it without measuring, marked
**stale** when the measured code changed since).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from tests.benchmarks._report import ROOT, spread, trainer_openmp
from tests.benchmarks._stored import Sitting

NAME = "warm_start"
TITLE = "Warm start: the demonstrations' shared head against the plain forward (real model)"
COMMAND = "python -m tests.benchmarks warm_start"
CODE = (
    "trainer/osmosis_trainer/warm_start",
    "trainer/osmosis_trainer/loop/_prefix.py",
    "trainer/osmosis_trainer/loop/_packed.py",
    "tests/benchmarks/bench_warm_start.py",
)
"""What the section measures (its fingerprint)."""
ROUNDS = 3
STEPS = 4
BATCH = 8
BUDGET = 2048  # the quick start's [algorithm] micro_batch_tokens
RANK = 8
ALPHA = 16
LR = 1e-3
MIN_ROUNDS = 3
"""A keep/remove verdict needs at least this many paired rounds."""
DEMOS = ROOT / "templates" / "strands" / "demos.jsonl"
_LABELS = {
    True: "shared head run once per micro-batch (`share_prompt_prefix = true`, the default)",
    False: "every demonstration whole (transformers' forward)",
}


def _run(loaded: Any, demos: list[Any], share: bool) -> tuple[list[float], list[float]]:
    """Seconds of each of ``STEPS`` steps and their losses, from a fresh adapter."""
    import torch

    from osmosis_trainer.loop._optim import build_optimizer
    from osmosis_trainer.loop._policy import attach_lora
    from osmosis_trainer.warm_start._phase import WarmStartSettings, _sequences, warm_update

    model = attach_lora(loaded.model, r=RANK, alpha=ALPHA, dropout=0.0,
                        target_modules="all-linear", seed=0)
    settings = WarmStartSettings(epochs=1, lr=LR, batch_size=BATCH, micro_batch_tokens=BUDGET,
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
    return times, losses


def main() -> None:
    trainer_openmp()  # as the training worker runs (first: Sitting.start loads torch)
    import torch

    from osmosis_ai.data import load_demonstrations
    from osmosis_trainer.models import load_model, training_dtype
    from osmosis_trainer.warm_start._render import WarmStartRenderer, eos_token_ids

    torch.manual_seed(0)
    dtype = training_dtype("auto", "cpu")
    sitting = Sitting.start(NAME, COMMAND, CODE, rounds=ROUNDS, steps=STEPS, batch=BATCH,
                            budget=BUDGET, rank=RANK, lr=LR, dtype=str(dtype))
    loaded = load_model("embedded", dtype=dtype)
    rows, _ = load_demonstrations(DEMOS)
    renderer = WarmStartRenderer(loaded.tokenizer, eos_token_ids(loaded.model, loaded.tokenizer))
    demos = renderer.render_all(rows, max_tokens=4096).demos
    # The workload's size is a fact of the rendered demonstrations: stored with the runs.
    sitting.data["tokens_mean"] = statistics.mean(d.tokens for d in demos)
    sitting.data["trained_mean"] = statistics.mean(d.trained_tokens for d in demos)
    _run(loaded, demos, True)  # warm-up: first-call allocations and kernels
    for r in range(ROUNDS):
        for share in ((True, False) if r % 2 == 0 else (False, True)):
            times, losses = _run(loaded, demos, share)
            sitting.record({"share": share, "round": r, "step_s": times, "losses": losses})
            print("shared" if share else "plain", r, round(statistics.median(times), 2),
                  flush=True)
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/warm_start.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    # A run's figure is the median of its steps; runs are paired by the round they ran in.
    step: dict[bool, dict[int, float]] = {True: {}, False: {}}
    losses: dict[bool, dict[int, list[float]]] = {True: {}, False: {}}
    for run in sitting.runs:
        share, r = bool(run["share"]), int(run["round"])
        step[share][r] = statistics.median(run["step_s"])
        losses[share][r] = run["losses"]
    paired = sorted(set(step[True]) & set(step[False]))
    ratio = [step[False][r] / step[True][r] for r in paired]
    if len(ratio) >= MIN_ROUNDS:
        gain = 1 - 1 / statistics.median(ratio)
        verdict = f"the shared head saves {gain:.0%} of the step: " + (
            "pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %): remove it"
        )
    else:
        verdict = f"{len(ratio)} paired round(s): no verdict below {MIN_ROUNDS}"
    drift = max(
        (abs(a - b) for r in paired
         for a, b in zip(losses[True][r], losses[False][r], strict=True)),
        default=float("nan"),
    )
    rows = "".join(
        f"| {_LABELS[share]} | {spread(list(step[share].values()))} |\n" for share in (True, False)
    )
    body = (
        f"Warm-start steps of {data['batch']} demonstrations (the strands template's, rendered "
        f"as the warm start renders them: {data['tokens_mean']:.0f} tokens each on average, "
        f"{data['trained_mean']:.0f} of them trained), {data['steps']} steps per run from a "
        f"fresh LoRA adapter (r {data['rank']}, all linear layers), AdamW lr {data['lr']:g}, "
        f"micro-batches of at most {data['budget']} padded tokens; embedded "
        f"SmolLM2-135M-Instruct in `dtype = \"auto\"` ({data['dtype']} here). "
        f"{len(paired)} interleaved rounds, the order alternating.\n\n"
        "| forward | s per step (median of a run; median [min-max] of runs) |\n|---|---|\n"
        + rows + "\n"
        f"plain / shared, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}; {verdict}. "
        f"Largest loss difference between the two over the runs' steps: {drift:.1e} (float "
        "rounding; the unit test `tests/trainer/warm_start/test_phase.py` checks equal "
        "updates).\n"
    )
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    else:
        main()
