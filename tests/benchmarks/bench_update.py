"""The RL update on the learning templates' own batches: two speed paths against their library
alternatives, LoRA layers in the base's precision (against peft's fp32 LoRA layers) and a
group's prompt computed once (against transformers' padded forward of every sequence).

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
SmolLM2-135M-Instruct in ``dtype = "auto"`` with transformers' default attention (SDPA).
``ROUNDS`` interleaved rounds, the order alternating.

The shared prompt is judged here and not only on ``trainer_real``'s step: that case has one
38-token prompt per group and no system prompt, while the templates' agents carry a system
prompt and tool schemas in every sequence of a group, which is what the path is for.

Run: ``python -m tests.benchmarks update``; each run goes to ``docs/benchmarks/update.json`` as
it ends and the section is rendered from that file (``python -m tests.benchmarks.bench_update
render`` redoes it without measuring). ``python -m tests.benchmarks.bench_update capture NAME
RUN_DIR STEP`` stores a batch: the step's traced samples that trained.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
TITLE = (
    "RL update on the templates' multi-turn batches: bf16 LoRA layers and shared prompts against "
    "the libraries' defaults"
)
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
    "ours": "ours, the defaults: LoRA layers in the base's precision under autocast, a group's "
    "prompt once",
    "peft": "peft's fp32 LoRA layers, inputs cast up (the library's default)",
    "noshare": "every sequence whole and padded (transformers' forward; share_prompt_prefix = "
    "false)",
}
PATHS = {
    # config without the path: what the path is
    "peft": "LoRA layers in the base's precision (`lora_compute`)",
    "noshare": "a group's prompt once (packed rows or cached keys and values, `_prefix`)",
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


def _run(model: Any, settings: Any, seqs: list[Any], config: str) -> list[float]:
    """Seconds of each of ``UPDATES`` updates under ``config`` (a key of ``_LABELS``)."""
    if config == "noshare":
        algorithm = settings.algorithm.model_copy(update={"share_prompt_prefix": False})
        settings = dataclasses.replace(settings, algorithm=algorithm)
    times = []
    with _layers(config != "peft"):
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
        _run(model, settings, seqs, "ours")  # warm-up: first-call allocations and kernels
    configs = list(_LABELS)
    for r in range(ROUNDS):
        for name, seqs in work.items():
            for config in configs if r % 2 == 0 else configs[::-1]:
                times = _run(model, settings, seqs, config)
                sitting.record({"batch": name, "config": config, "round": r, "update_s": times})
                print(name, config, r, round(statistics.median(times), 2), flush=True)
    render()


def _config(run: dict[str, Any]) -> str:
    """A run's config; runs stored before the shared-prompt rows say ``ours`` as a bool."""
    if "config" in run:
        return str(run["config"])
    return "ours" if run["ours"] else "peft"


def _verdict(ratio: list[float]) -> str:
    if len(ratio) < MIN_ROUNDS:
        return f"{len(ratio)} paired round(s): no verdict below {MIN_ROUNDS}"
    gain = 1 - statistics.median(ratio)
    return f"saves {gain:.0%}: " + ("pays (>= 10 %)" if gain >= 0.10 else "does NOT pay (< 10 %)")


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/update.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    rows: list[str] = []
    verdicts: dict[str, list[tuple[str, str, list[float]]]] = {p: [] for p in PATHS}
    for name, info in data["batches"].items():
        took: dict[str, dict[int, float]] = {c: {} for c in _LABELS}
        for run in sitting.runs:
            if run["batch"] == name:
                took[_config(run)][int(run["round"])] = statistics.median(run["update_s"])
        for without in PATHS:
            paired = sorted(set(took["ours"]) & set(took[without]))
            ratio = [took["ours"][r] / took[without][r] for r in paired]
            if ratio:
                verdicts[without].append((name, _verdict(ratio), ratio))
        diff = data.get("logprob_diff", {}).get(name)
        for config, label in _LABELS.items():
            if not took[config]:
                continue
            rows.append(
                f"| {name} ({info['source']}: {info['sequences']} sequences, {info['tokens']} "
                f"tokens, {info['trained']} trained) | {label} | {spread(list(took[config].values()))} |"
                + (f" {diff['mean']:.1e} / {diff['max']:.1e} |" if config == "ours" and diff else " - |")
            )
    lines = ""
    for without, found in verdicts.items():
        if not found:
            continue
        decided = all(len(ratio) >= MIN_ROUNDS for _, _, ratio in found)
        pays = all("pays (" in v for _, v, _ in found)
        lines += "".join(
            f"- {PATHS[without]}, {name}: ours / without, paired by round: "
            f"{', '.join(f'{x:.2f}x' for x in ratio)}; {verdict}.\n"
            for name, verdict, ratio in found
        )
        lines += f"- Verdict, {PATHS[without]}: " + (
            "**not decided** (a batch has fewer paired rounds than 3).\n" if not decided
            else "**pays** on every batch: kept.\n" if pays
            else "does **NOT** pay on every batch: remove it.\n"
        )
    body = (
        f"Each batch replayed through `policy_update` as RL runs it ({data['updates']} updates "
        f"per run, lr 0; micro-batches of at most {data['budget']} padded tokens; LoRA r "
        f"{data['rank']} on all linear layers, B drawn at std {data.get('b_std', B_STD)} as in "
        "trained adapters), embedded SmolLM2-135M-Instruct in `dtype = \"auto\"` "
        f"({data['dtype']} here); {ROUNDS} interleaved rounds, the order alternating. The "
        "batches are the trained sequences of a stored step of each template "
        "(`tests/benchmarks/update_batches.json`).\n\n"
        "| batch | configuration | s per update (median of a run; median [min-max] of runs) "
        "| trained tokens' logprob, bf16 − fp32 LoRA layers: mean / largest |Δ| |\n"
        "|---|---|---|---|\n" + "\n".join(rows) + "\n\n" + lines
        + "\nThe unit tests `tests/trainer/loop/test_update.py` (bf16 LoRA layers agree with "
        "peft's fp32 ones up to bf16 rounding) and `tests/trainer/loop/test_packed.py`, "
        "`test_batch.py` (shared prompts give the plain forward's logprobs and gradients) "
        "check what each path computes.\n"
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
