"""The RL update on the learning templates' own batches: LoRA layers in the base's precision
against peft's fp32 LoRA layers.

peft keeps a LoRA adapter in fp32 over a bf16 base and casts each LoRA layer's input up to
fp32 (210 layers in SmolLM2-135M with ``all-linear``). ``loop._policy.lora_compute`` runs those
layers in bf16 under ``torch.autocast`` (peft's ``disable_input_dtype_casting``), the adapter's
weights, gradients and optimiser state staying fp32. On TRL's short single-turn step it did not
pay (``trainer_real``); the learning templates train long multi-turn sequences (~430 tokens,
~60 of them trained), where the update is most of a step.

Workload: batches stored in ``tests/benchmarks/update_batches.json`` from the templates' own
runs (``capture`` below wrote them from a run's traces), each replayed through
``policy_update`` as RL runs it (the template's micro-batch budget, shared prompt prefixes,
LoRA r 8 on all linear layers, lr 0 so every run sees the same weights), on the embedded
SmolLM2-135M-Instruct in ``dtype = "auto"``. ``ROUNDS`` interleaved rounds, the order
alternating.

Run: ``python -m tests.benchmarks update``; each run goes to ``docs/benchmarks/update.json`` as
it ends and the section is rendered from that file (``python -m tests.benchmarks.bench_update
render`` redoes it without measuring). ``python -m tests.benchmarks.bench_update capture NAME
RUN_DIR STEP`` stores a batch: the step's traced samples that trained.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.benchmarks._report import ROOT, spread, trainer_openmp
from tests.benchmarks._stored import Sitting

NAME = "update"
TITLE = "RL update on the templates' multi-turn batches: LoRA layers in bf16 against peft's fp32"
COMMAND = "python -m tests.benchmarks update"
CODE = (
    "trainer/osmosis_trainer/loop/_policy.py",
    "trainer/osmosis_trainer/loop/_update.py",
    "trainer/osmosis_trainer/loop/_prefix.py",
    "trainer/osmosis_trainer/loop/_packed.py",
    "trainer/osmosis_trainer/loop/_batch.py",
    "tests/benchmarks/bench_update.py",
)
"""What the section measures (its fingerprint)."""
BATCHES = ROOT / "tests" / "benchmarks" / "update_batches.json"
ROUNDS = 3
UPDATES = 2
"""Updates per run; a run's figure is their median."""
BUDGET = 2048  # both templates' [algorithm] micro_batch_tokens
RANK = 8
ALPHA = 16
B_STD = 0.005
"""The LoRA B matrices are drawn at this std: that of the search template's trained adapters
(its warm start and step-16 checkpoints measured ~0.005), so the layers change the logprobs as
a trained adapter does."""
MIN_ROUNDS = 3
"""A keep/remove verdict needs at least this many paired rounds."""
_LABELS = {
    True: "LoRA layers in the base's precision under autocast (ours, the default)",
    False: "peft's fp32 LoRA layers, inputs cast up (the library's default)",
}


def capture(name: str, run_dir: Path, step: int) -> None:
    """Store the trained sequences of ``run_dir``'s traced samples at ``step`` as ``name``."""
    path = run_dir / "traces" / f"step_{step:06d}.jsonl"
    seqs = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if not record["advantage"]:
            continue  # not trained (advantage None) or no signal (0)
        for s in record["sequences"]:
            seqs.append({
                "token_ids": s["token_ids"],
                "mask": s["mask"],
                "sampler_logprobs": [round(v or 0.0, 4) for v in s["sampler_logprobs"]],
                "advantage": record["advantage"],
                "group_id": record["group_id"],
                "weight": 1.0 / len(record["sequences"]),
            })
    stored = json.loads(BATCHES.read_text()) if BATCHES.exists() else {}
    stored[name] = {"source": f"{run_dir.name} step {step}", "sequences": seqs}
    BATCHES.write_text(json.dumps(stored) + "\n")
    print(f"{name}: {len(seqs)} sequences, {sum(len(s['token_ids']) for s in seqs)} tokens")


def _sequences(batch: dict[str, Any]) -> list[Any]:
    from osmosis_trainer.loop._batch import TrainSequence

    return [
        TrainSequence(s["token_ids"], s["mask"], s["sampler_logprobs"], advantage=s["advantage"],
                      group_id=s["group_id"], weight=s["weight"])
        for s in batch["sequences"]
    ]


@contextlib.contextmanager
def _peft_layers(_model: Any) -> Iterator[None]:
    """``lora_compute`` as peft alone does it: nothing changed."""
    yield


@contextlib.contextmanager
def _layers(ours: bool) -> Iterator[None]:
    """Our LoRA layers (as shipped), or peft's (``lora_compute`` swapped out meanwhile)."""
    from osmosis_trainer.loop import _policy

    compute = _policy.lora_compute
    if not ours:
        setattr(_policy, "lora_compute", _peft_layers)  # noqa: B010 (a function, not a field)
    try:
        yield
    finally:
        setattr(_policy, "lora_compute", compute)  # noqa: B010


def _update(model: Any, settings: Any, seqs: list[Any], **kw: Any) -> Any:
    import torch

    from osmosis_trainer.loop._update import policy_update

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0)
    return policy_update(model, optimizer, seqs, settings, **kw)


def _run(model: Any, settings: Any, seqs: list[Any], ours: bool) -> list[float]:
    """Seconds of each of ``UPDATES`` updates."""
    times = []
    with _layers(ours):
        for _ in range(UPDATES):
            t0 = time.perf_counter()
            _update(model, settings, seqs)
            times.append(time.perf_counter() - t0)
    return times


def _logprob_diff(model: Any, settings: Any, seqs: list[Any]) -> dict[str, float]:
    """Mean and largest |ours - peft's| over the trained tokens' pre-update logprobs."""
    found = []
    for ours in (True, False):
        with _layers(ours):
            kept = _update(model, settings, seqs, keep=range(len(seqs))).logprobs
        found.append([v for i in sorted(kept) for v in kept[i] if v is not None])
    diffs = [abs(a - b) for a, b in zip(*found, strict=True)]
    return {"mean": statistics.mean(diffs), "max": max(diffs)}


def main() -> None:
    trainer_openmp()  # as the training worker runs (first: Sitting.start loads torch)
    import torch

    from osmosis_ai.config import AlgorithmConfig
    from osmosis_trainer.loop import resolve_settings
    from osmosis_trainer.loop._policy import attach_lora
    from osmosis_trainer.models import load_model, training_dtype

    torch.manual_seed(0)
    dtype = training_dtype("auto", "cpu")
    batches = json.loads(BATCHES.read_text())
    sitting = Sitting.start(NAME, COMMAND, CODE, rounds=ROUNDS, updates=UPDATES, budget=BUDGET,
                            rank=RANK, b_std=B_STD, dtype=str(dtype), batches={
                                k: {"source": b["source"], "sequences": len(b["sequences"]),
                                    "tokens": sum(len(s["token_ids"]) for s in b["sequences"]),
                                    "trained": sum(sum(s["mask"][1:]) for s in b["sequences"])}
                                for k, b in batches.items()})
    loaded = load_model("embedded", dtype=dtype)
    model = attach_lora(loaded.model, r=RANK, alpha=ALPHA, dropout=0.0,
                        target_modules="all-linear", seed=0)
    with torch.no_grad():  # a fresh B is 0: the LoRA layers would change nothing
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, B_STD, generator=torch.Generator().manual_seed(len(name)))
    settings = resolve_settings(n_rows=1, pad_id=int(loaded.tokenizer.pad_token_id),
                                dtype=str(dtype), algorithm=AlgorithmConfig(
                                    micro_batch_tokens=BUDGET, scale_rewards="none"))
    work = {k: _sequences(b) for k, b in batches.items()}
    # What bf16 LoRA layers change: each trained token's logprob under both (same weights).
    sitting.data["logprob_diff"] = {k: _logprob_diff(model, settings, seqs)
                                    for k, seqs in work.items()}
    for seqs in work.values():
        _run(model, settings, seqs, True)  # warm-up: first-call allocations and kernels
    for r in range(ROUNDS):
        for name, seqs in work.items():
            for ours in ((True, False) if r % 2 == 0 else (False, True)):
                times = _run(model, settings, seqs, ours)
                sitting.record({"batch": name, "ours": ours, "round": r, "update_s": times})
                print(name, "ours" if ours else "peft", r,
                      round(statistics.median(times), 2), flush=True)
    render()


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/update.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    rows, verdicts = [], []
    for name, info in data["batches"].items():
        took: dict[bool, dict[int, float]] = {True: {}, False: {}}
        for run in sitting.runs:
            if run["batch"] == name:
                took[bool(run["ours"])][int(run["round"])] = statistics.median(run["update_s"])
        paired = sorted(set(took[True]) & set(took[False]))
        ratio = [took[True][r] / took[False][r] for r in paired]
        if len(ratio) >= MIN_ROUNDS:
            gain = 1 - statistics.median(ratio)
            verdict = f"saves {gain:.0%}: " + (
                "pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %)"
            )
        else:
            verdict = f"{len(ratio)} paired round(s): no verdict below {MIN_ROUNDS}"
        verdicts.append((name, verdict, ratio))
        diff = data.get("logprob_diff", {}).get(name)
        for ours in (True, False):
            rows.append(
                f"| {name} ({info['source']}: {info['sequences']} sequences, {info['tokens']} "
                f"tokens, {info['trained']} trained) | {_LABELS[ours]} | "
                f"{spread(list(took[ours].values()))} |"
                + (f" {diff['mean']:.1e} / {diff['max']:.1e} |" if ours and diff else " - |")
            )
    pays = all("pays (" in v for _, v, _ in verdicts)
    decided = all(len(ratio) >= MIN_ROUNDS for _, _, ratio in verdicts)
    lines = "".join(
        f"- {name}: ours / peft's, paired by round: {', '.join(f'{x:.2f}x' for x in ratio)}; "
        f"{verdict}.\n"
        for name, verdict, ratio in verdicts
    )
    body = (
        f"Each batch replayed through `policy_update` as RL runs it ({data['updates']} updates "
        f"per run, lr 0; micro-batches of at most {data['budget']} padded tokens, shared prompt "
        f"prefixes; LoRA r {data['rank']} on all linear layers, B drawn at std "
        f"{data.get('b_std', B_STD)} as in trained adapters), embedded SmolLM2-135M-Instruct "
        f"in `dtype = \"auto\"` ({data['dtype']} here); {ROUNDS} interleaved rounds, the order "
        "alternating. The batches are the trained sequences of a stored step of each template "
        "(`tests/benchmarks/update_batches.json`).\n\n"
        "| batch | LoRA layers | s per update (median of a run; median [min-max] of runs) "
        "| trained tokens' logprob, ours − peft's: mean / largest |Δ| |\n|---|---|---|---|\n" + "\n".join(rows) + "\n\n" + lines
        + "\nVerdict: LoRA layers in the base's precision "
        + ("**not decided** (a batch has fewer paired rounds than 3)." if not decided
           else "**pay** on every batch: kept." if pays
           else "do **NOT** pay on every batch: remove `lora_compute`.")
        + " The unit test `tests/trainer/loop/test_update.py` checks that the layers compute in "
        "bf16 and that the logprobs agree with peft's fp32 layers up to bf16 rounding.\n"
    )
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        render()
    elif sys.argv[1:2] == ["capture"] and len(sys.argv) == 5:
        capture(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
    elif not sys.argv[1:]:
        main()
    else:
        raise SystemExit(
            "usage: python -m tests.benchmarks.bench_update [render | capture NAME RUN_DIR STEP]"
        )
