"""GRPO step time: osmosis's trainer against TRL's ``GRPOTrainer``, same model and batch.

Both train LoRA (r=8, alpha=16, all linear layers, dropout 0) on the same random Qwen2 model
built offline, with 8 prompts x 4 samples per step, up to 32 new tokens, temperature 1, loss
``dapo``, no KL, lr 1e-4, and the same reward (fraction of even token ids, EOS excluded, at
least 4 tokens). Ours runs its production path: rollout runner -> ``ctx.chat`` -> policy gateway
-> HF engine (its own model copy, adapter pushed every step) -> token-exact trajectories ->
update; TRL runs ``model.generate`` and its loss in process. Ours also runs with the engine in a
child process (``[training] engine_process = true``: decoding and the update on separate cores).
Step time is the median over the steps after two warm-up steps (40 for the tiny model, 6 for
the small one). TRL is given its best thread count; its gradient checkpointing is
off (on by default, it would only slow TRL down).

On a machine with CUDA a further table compares a 0.5B-class model (random weights, bf16; 128
new tokens) in tokens generated per second of step time: ours with the HF engine and, when
vLLM is installed, with the vLLM engine (adapter loaded after every step), against TRL's
``GRPOTrainer`` generating with ``model.generate``.

Run: ``python -m tests.benchmarks trainer``.
"""

from __future__ import annotations

import os

# Before torch loads: idle OpenMP threads sleep instead of spinning (see osmosis train submit).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.benchmarks._report import write_section

PROMPTS = 8
GROUP = 4
WARMUP = 2


@dataclass
class Case:
    name: str
    hidden: int
    layers: int
    heads: int
    new_tokens: int
    device: str = "cpu"
    measured: int = 6
    """Steps timed after the warm-up (the median is reported): more where steps are cheap."""


@dataclass
class Result:
    label: str
    step_s: float
    tokens_per_step: float
    split: str = "-"
    """Rollouts (generation) / update seconds within a step, where measured."""

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s


def _even_reward(ids: list[int], eos: int) -> float:
    body = [t for t in ids if t != eos]
    return 0.0 if len(body) < 4 else sum(t % 2 == 0 for t in body) / len(body)


def _build(case: Case, root: Path) -> Path:
    from osmosis_trainer.models import build_tiny_model

    return build_tiny_model(
        root / case.name, hidden_size=case.hidden, num_layers=case.layers, num_heads=case.heads
    )


def run_ours(
    case: Case,
    model_dir: Path,
    root: Path,
    *,
    threads: int,
    ahead: int,
    engine: str = "hf",
    process: bool = False,
) -> Result:
    import torch

    from osmosis_ai.config import load_training_config
    from osmosis_trainer.loop import StepReport, create_run_dir, run_training
    from osmosis_trainer.models import load_model
    from tests.e2e.toy_workspace import make_workspace

    torch.set_num_threads(threads)
    eos = int(load_model(str(model_dir)).tokenizer.eos_token_id)
    ws = Path(tempfile.mkdtemp(dir=root))
    config_file = make_workspace(
        ws, model_dir, eos_id=eos, rows=PROMPTS, lr=1e-4, total_epochs=100,
        max_steps=WARMUP + case.measured, rollout_batch_size=PROMPTS, n_samples_per_prompt=GROUP,
        max_response_length=case.new_tokens, max_prompt_length=512, device=case.device,
        engine=engine,
        engine_process=process,
        extra_toml=(
            "\n[checkpoints]\ncheckpoint_save_freq = 1000\n\n[algorithm]\n"
            f"skip_zero_variance_groups = false\nrollouts_ahead = {ahead}\n"
        ),
    )
    reports: list[dict[str, float]] = []

    def record(report: StepReport) -> None:
        if report.kind == "train":
            reports.append(report.metrics)

    run = create_run_dir(ws / "runs", "bench")
    asyncio.run(run_training(load_training_config(config_file), run, on_report=record))
    steady = reports[WARMUP:]
    mode = "rollouts ahead" if ahead else "on-policy"
    where = f"{engine} engine, own process" if process else f"{engine} engine"
    cores = f"{threads} core(s) split" if process else f"{threads} thread(s)"
    label = f"osmosis ({where}), {mode}, {cores}"
    rollout = statistics.median(r["rollout_time_s"] for r in steady)
    update = statistics.median(r["train_time_s"] for r in steady)
    return Result(
        label,
        statistics.median(r["step_time_s"] for r in steady),
        statistics.fmean(r["completion_tokens"] for r in steady),
        f"{rollout:.3f} s / {update:.3f} s",
    )


def run_trl(case: Case, model_dir: Path, root: Path, *, threads: int) -> Result:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from osmosis_trainer.models import load_model

    torch.set_num_threads(threads)
    loaded = load_model(str(model_dir), device=case.device)
    eos = int(loaded.tokenizer.eos_token_id)
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i + 1}?"}]} for i in range(PROMPTS)]

    def reward(completion_ids: list[list[int]], **_: Any) -> list[float]:
        return [_even_reward(list(ids), eos) for ids in completion_ids]

    class Timer(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.times: list[float] = []
            self.tokens: list[float] = []
            self._t = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self._t = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.times.append(time.perf_counter() - self._t)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "completions/mean_length" in logs:
                self.tokens.append(float(logs["completions/mean_length"]) * PROMPTS * GROUP)

    timer = Timer()
    gpu = case.device.startswith("cuda")
    config = GRPOConfig(
        output_dir=str(Path(tempfile.mkdtemp(dir=root)) / "trl"),
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        max_completion_length=case.new_tokens,
        max_steps=WARMUP + case.measured,
        learning_rate=1e-4,
        temperature=1.0,
        logging_steps=1,
        report_to="none",
        use_cpu=not gpu,
        bf16=gpu,
        gradient_checkpointing=False,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=loaded.model,
        processing_class=loaded.tokenizer,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
        callbacks=[timer],
    )
    trainer.train()
    tokens = statistics.fmean(timer.tokens[WARMUP:]) if timer.tokens else 0.0
    return Result(
        f"TRL GRPOTrainer, {threads} thread(s)", statistics.median(timer.times[WARMUP:]), tokens
    )


def _table(case: Case, results: list[Result], trl_best: Result) -> str:
    lines = [
        f"**{case.name}** (Qwen2 hidden {case.hidden}, {case.layers} layers, random init; "
        f"{PROMPTS} prompts x {GROUP} samples x up to {case.new_tokens} new tokens; {case.device})",
        "",
        "| trainer | step time (median) | rollouts / update | generated tokens/step "
        "| tokens/s | vs best TRL |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio = r.step_s / trl_best.step_s
        lines.append(
            f"| {r.label} | {r.step_s:.3f} s | {r.split} | {r.tokens_per_step:.0f} | "
            f"{r.tokens_per_s:.0f} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def _cpu_case(case: Case, root: Path) -> tuple[str, float, float]:
    model_dir = _build(case, root)
    trl = [run_trl(case, model_dir, root, threads=t) for t in (1, 2)]
    ours = [
        run_ours(case, model_dir, root, threads=t, ahead=a) for a in (0, 1) for t in (1, 2)
    ]
    # The engine in its own process: the update and decoding each get one of the 2 cores.
    ours += [run_ours(case, model_dir, root, threads=2, ahead=a, process=True) for a in (0, 1)]
    best_trl = min(trl, key=lambda r: r.step_s)
    best_ours = min(ours, key=lambda r: r.step_s)
    on_policy = min((r for r in ours if "on-policy" in r.label), key=lambda r: r.step_s)
    return (
        _table(case, ours + trl, best_trl),
        best_ours.step_s / best_trl.step_s,
        on_policy.step_s / best_trl.step_s,
    )


def _gpu_case(root: Path) -> str:
    case = Case("0.5B-class", hidden=1536, layers=20, heads=12, new_tokens=128, device="cuda")
    model_dir = _build(case, root)
    import importlib.util

    results = [
        run_ours(case, model_dir, root, threads=1, ahead=0),
        run_ours(case, model_dir, root, threads=1, ahead=1),
    ]
    if importlib.util.find_spec("vllm") is not None:
        results += [
            run_ours(case, model_dir, root, threads=1, ahead=a, engine="vllm") for a in (0, 1)
        ]
    trl = run_trl(case, model_dir, root, threads=1)
    return _table(case, [*results, trl], trl)


def main() -> None:
    import torch

    root = Path(tempfile.mkdtemp(prefix="bench_trainer_"))
    sections = []
    ratios = []
    for case in (
        Case("tiny", hidden=64, layers=2, heads=4, new_tokens=32, measured=40),
        Case("small", hidden=512, layers=8, heads=8, new_tokens=32),
    ):
        table, ratio, on_policy = _cpu_case(case, root)
        print(table, flush=True)
        sections.append(table)
        ratios.append(
            f"{case.name}: best osmosis step = {ratio:.2f}x best TRL step "
            f"(on-policy, as TRL trains: {on_policy:.2f}x)"
        )
    if torch.cuda.is_available():
        table = _gpu_case(root)
        print(table, flush=True)
        sections.append(table)
    else:
        sections.append("_No CUDA device on this machine: the GPU comparison did not run._")
    body = (
        "Target: our step at most half of TRL's (ratio ≤ 0.50).\n\n"
        + "\n".join(f"- {r}" for r in ratios)
        + "\n\n"
        + "\n\n".join(sections)
        + "\n\nosmosis's step includes everything of its production loop: HTTP to the gateway, "
        "the runner, saving the adapter and loading it into the engine. 'rollouts ahead' "
        "(`[algorithm] rollouts_ahead = 1`) generates the next step while this one trains, so "
        "its rollout and update times overlap; 'own process' runs the HF engine in a child process "
        "(`[training] engine_process = true`), so decoding and the update each have a core "
        "instead of sharing one interpreter lock. 'rollouts ahead' is one step off-policy; "
        "'on-policy' trains as TRL does. The machines are virtual and shared: absolute times "
        "move by tens of percent between runs (TRL's tiny step took 0.10, 0.11 and 0.19 s in "
        "three runs one morning), so compare rows of one run, not across runs."
    )
    write_section("trainer", "GRPO step: osmosis vs TRL GRPOTrainer", body, "python -m tests.benchmarks trainer")
