"""GRPO step time and peak memory: osmosis's trainer against TRL's ``GRPOTrainer``.

Both train LoRA (r=8, alpha=16, all linear layers, dropout 0) on the same model with 8 prompts
x 4 samples per step, temperature 1, loss ``dapo`` (set explicitly on both sides), no KL, lr
1e-4, and the same reward (fraction of even token ids, EOS excluded, at least 4 tokens). TRL is
pinned (``trl==1.16.0`` in the dev extra); its model is loaded by transformers'
``AutoModelForCausalLM.from_pretrained`` (SDPA attention), and each row says which of its
settings it ran (``Setup``: precision, gradient checkpointing, micro-batches). Ours runs its
production path: rollout runner -> ``ctx.chat`` -> policy gateway (loopback HTTP) -> HF engine
(adapter pushed every step) -> token-exact trajectories -> update.

Cases here: ``tiny`` and ``small`` (random Qwen2 built offline, 32 new tokens); the real model
(the embedded SmolLM2-135M-Instruct) is :mod:`tests.benchmarks.bench_trainer_real`, which
runs its rows through :func:`_run`. Every run is a fresh Python process, so its peak resident
memory (``ru_maxrss``; plus a vLLM engine server's when one runs) is its own. Step time is the
median of a run's steps after its warm-up; rows run interleaved round by round (A B C A B C),
so ratios are paired by round.

Run: ``python -m tests.benchmarks trainer`` (``OSMOSIS_BENCH_RUNS`` rounds, default 3; the
GPU case runs where CUDA is available, one round). Each run's result goes to
``docs/benchmarks/trainer.json`` as it ends and the section is rendered from that file
(``python -m tests.benchmarks.bench_trainer render`` redoes it without measuring).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.benchmarks._report import library_env, load_note, spread, trainer_openmp
from tests.benchmarks._stored import Sitting

NAME = "trainer"
TITLE = "GRPO step: osmosis vs TRL GRPOTrainer (random models)"
COMMAND = "python -m tests.benchmarks trainer"
CODE = (
    "trainer/osmosis_trainer",
    ":!trainer/osmosis_trainer/distributed",  # Ray only: a single-process run never loads it
    "core/osmosis_ai/serving",
    "core/osmosis_ai/rollout",
    "tests/benchmarks/bench_trainer.py",
)
"""What the section measures (its fingerprint)."""
PROMPTS = 8
GROUP = 4
TARGET_STEP = 0.40
"""On-policy step time at most this fraction of TRL's (issue 14, the real-model case)."""
TARGET_MEMORY = 0.40
"""Peak resident memory at most this fraction of TRL's (the real-model case)."""


@dataclass
class Case:
    name: str
    hidden: int = 0
    layers: int = 0
    heads: int = 0
    new_tokens: int = 32
    device: str = "cpu"
    measured: int = 6
    """Steps timed after the warm-up (their median is the run's step time)."""
    warmup: int = 2
    embedded: bool = False
    """The embedded SmolLM2-135M-Instruct (real weights) instead of a random model."""
    full_length: bool = False
    """Every completion runs to ``new_tokens`` (ours: the engine is told of no EOS id; TRL:
    ``min_new_tokens``), so each row does the same work per step. Otherwise when the sampled
    rows happen to end decides it: the same seeds sample differently under another attention
    or precision (one sitting: 1399 against 1609 tokens per step for the same code path)."""

    def describe(self) -> str:
        model = (
            "embedded SmolLM2-135M-Instruct, real weights"
            if self.embedded
            else f"Qwen2 hidden {self.hidden}, {self.layers} layers, random init"
        )
        up_to = "" if self.full_length else "up to "
        return (
            f"{model}; {PROMPTS} prompts x {GROUP} samples x {up_to}{self.new_tokens} new tokens; "
            f"{self.device}; {self.warmup} warm-up + {self.measured} timed steps per run"
        )


@dataclass
class Setup:
    """One row: who trains, and what differs from the defaults."""

    label: str
    who: str = "ours"
    threads: int = 2
    ahead: int = 0
    engine: str = "hf"
    micro_batch_tokens: int | None = None
    """``[algorithm] micro_batch_tokens``; None: the device's default."""
    share_prefix: bool = True
    """``[algorithm] share_prompt_prefix``: a group's prompt runs once in the update."""
    profile: bool = False
    """Record where the step's CPU time and memory go (see ``_trainer_phases``)."""
    system_words: int = 0
    """Ours: a system prompt of this many words on every row, shared by all the groups (the
    quick start's long system-and-tools prompt is the case shared prefixes are for)."""
    dtype: str | None = None
    """Ours: ``[training] dtype`` (None: ``auto``). TRL: ``"bfloat16"`` sets ``bf16=True``
    (autocast over fp32 weights), else fp32."""
    without: str = ""
    """Ours: a speed path with no setting of its own, replaced in this run's process by its
    library alternative (see :func:`_switch_off`)."""
    gradient_checkpointing: bool = False
    """TRL: ``gradient_checkpointing`` (TRL 1.16's default is True; its fastest setting on
    both CPU and GPU runs without)."""
    trl_micro_rows: int = 0
    """TRL: completions per forward/backward (``per_device_train_batch_size``, with
    ``gradient_accumulation_steps`` making up the 32 of a step); 0: TRL's default, all 32 in
    one forward/backward."""


NO_EOS = 10**9
"""A token id no model samples: with it as the only EOS id, a row ends on its budget."""


def _no_merge(*_: Any) -> str:
    return "switched off by the benchmark"


def _peft_merge_serve(self: Any, state: Any) -> None:
    """``HFEngine._serve`` done peft's way: ``unmerge_adapter()``, load the new weights into
    the peft layers, ``merge_adapter()`` (in place into the engine's own weights). Each
    unmerge/merge pair rounds the bf16 weights twice, so rounding accumulates over a run (ours
    merges into kept originals instead); this row measures the time."""
    from peft import PeftModel

    from osmosis_trainer.engines._hf_adapter import apply_adapter

    if isinstance(self._model, PeftModel):
        self._model.unmerge_adapter()
    self._model = apply_adapter(self._model, self._adapter, state)
    self._model.merge_adapter()


def _switch_off(path: str) -> None:
    """Replace one speed path in this process (ablation rows only) by its library
    alternative, or turn it off."""
    if path == "merge":  # adapters served through peft's unmerged layers
        import osmosis_trainer.engines._hf as hf

        setattr(hf, "unmergeable_reason", _no_merge)  # noqa: B010
    elif path == "peft_merge":  # peft's merge_adapter / unmerge_adapter instead of _hf_merge
        from osmosis_trainer.engines._hf import HFEngine

        init = HFEngine.__init__

        def own_weights(self: Any, *args: Any, **kwargs: Any) -> None:
            # peft merges in place: into weights of the engine's own, never the trainer's.
            init(self, *args, **{**kwargs, "share_weights": False})

        HFEngine.__init__ = own_weights  # type: ignore[method-assign]
        HFEngine._serve = _peft_merge_serve  # type: ignore[method-assign]
    elif path == "openmp":  # libgomp's own waits: :func:`_worker` skips the worker's setting
        return
    elif path:
        raise ValueError(f"unknown speed path {path!r}")


@dataclass
class Result:
    step_s: float
    tokens_per_step: float
    peak_rss_gb: float
    rollout_s: float | None = None
    update_s: float | None = None
    cpu_s: float | None = None
    """CPU seconds per timed step, all threads (and a vLLM engine server's, if any)."""
    phases: list[dict[str, Any]] | None = None
    attention: str | None = None
    """The attention implementation the trained model ran (``config._attn_implementation``)."""
    dtype: str | None = None
    """The precision the step ran in: ours, ``[training] dtype`` as resolved on this machine;
    TRL, fp32 weights with or without bf16 autocast."""


@dataclass
class Row:
    setup: Setup
    runs: list[Result] = field(default_factory=list)

    def median(self, attr: str) -> float:
        values = [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]
        return statistics.median(values) if values else float("nan")


def _even_reward(ids: list[int], eos: int) -> float:
    body = [t for t in ids if t != eos]
    return 0.0 if len(body) < 4 else sum(t % 2 == 0 for t in body) / len(body)


def _peak_rss_gb() -> float:
    """This process's peak RSS plus that of its waited-for children (a vLLM server)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + children) / 1e6  # ru_maxrss is in KiB on Linux


def _model_path(case: Case, root: Path) -> str:
    if case.embedded:
        return "embedded"
    from osmosis_trainer.models import build_tiny_model

    folder = root / case.name
    if not (folder / "config.json").exists():
        build_tiny_model(
            folder, hidden_size=case.hidden, num_layers=case.layers, num_heads=case.heads
        )
    return str(folder)


def run_ours(case: Case, model: str, root: Path, setup: Setup) -> Result:
    import asyncio

    import torch

    from osmosis_ai.config import load_training_config
    from osmosis_trainer.job import run_training
    from osmosis_trainer.loop import StepReport
    from osmosis_trainer.loop._run import create_run_dir
    from osmosis_trainer.models import load_model, training_dtype
    from tests.e2e.toy_workspace import make_workspace

    prof = None
    if setup.profile:
        from tests.benchmarks import _trainer_phases

        prof = _trainer_phases.PhaseProfiler(_trainer_phases.SETUP)
    if prof is not None:
        _trainer_phases.install(prof)
    torch.set_num_threads(setup.threads)
    _switch_off(setup.without)
    if case.full_length:
        import osmosis_trainer.engines._hf as hf

        setattr(hf, "_eos_ids", lambda *_: [NO_EOS])  # noqa: B010
    eos = int(load_model(model).tokenizer.eos_token_id)
    ws = Path(tempfile.mkdtemp(dir=root))
    config_file = make_workspace(
        ws,
        Path(model),
        eos_id=eos,
        rows=PROMPTS,
        lr=1e-4,
        total_epochs=100,
        max_steps=case.warmup + case.measured,
        rollout_batch_size=PROMPTS,
        n_samples_per_prompt=GROUP,
        max_response_length=case.new_tokens,
        max_prompt_length=512,
        device=case.device,
        engine=setup.engine,
        dtype=setup.dtype,
        extra_toml=(
            '\n[checkpoints]\ncheckpoint_save_freq = 1000\n\n[algorithm]\nloss_type = "dapo"\n'
            f"beta = 0.0\nskip_zero_variance_groups = false\nrollouts_ahead = {setup.ahead}\n"
            f"share_prompt_prefix = {str(setup.share_prefix).lower()}\n"
            + (
                f"micro_batch_tokens = {setup.micro_batch_tokens}\n"
                if setup.micro_batch_tokens
                else ""
            )
        ),
    )
    if setup.system_words:
        data = ws / "data" / "even.jsonl"
        system = " ".join(f"rule{i % 50}" for i in range(setup.system_words))
        rows = [json.loads(line) for line in data.read_text().splitlines()]
        data.write_text("".join(json.dumps({**r, "system_prompt": system}) + "\n" for r in rows))
    reports: list[dict[str, float]] = []
    cpu_at_warmup = 0.0

    def record(report: StepReport) -> None:
        nonlocal cpu_at_warmup
        if report.kind == "train":
            reports.append(report.metrics)
            if len(reports) == case.warmup:
                cpu_at_warmup = _cpu_seconds()
                if prof is not None:
                    prof.mark_steady()

    run = create_run_dir(ws / "runs", "bench")
    asyncio.run(run_training(load_training_config(config_file), run, on_report=record))
    steady = reports[case.warmup :]
    return Result(
        step_s=statistics.median(r["step_time_s"] for r in steady),
        tokens_per_step=statistics.fmean(r["completion_tokens"] for r in steady),
        peak_rss_gb=_peak_rss_gb(),
        rollout_s=statistics.median(r["rollout_time_s"] for r in steady),
        update_s=statistics.median(r["train_time_s"] for r in steady),
        cpu_s=(_cpu_seconds() - cpu_at_warmup) / len(steady),
        phases=prof.report(len(steady)) if prof is not None else None,
        dtype=training_dtype(setup.dtype or "auto", case.device),
    )


def _cpu_seconds() -> float:
    """CPU time of this process and its children (a vLLM server), all threads: live ones
    through psutil, ended (and waited-for) ones through ``RUSAGE_CHILDREN``."""
    import resource

    import psutil

    me = psutil.Process()
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = sum(me.cpu_times()[:2]) + ended.ru_utime + ended.ru_stime
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return float(total)


def _trl_model(model: str, device: str) -> tuple[Any, Any]:
    """The model and tokenizer as TRL's users load them: transformers' ``from_pretrained``
    (its default attention, SDPA), fp32, from the same converted weights ours reads."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from osmosis_trainer import models

    src, kwargs = models._embedded_source() if models.is_embedded(model) else (model, {})
    tokenizer = AutoTokenizer.from_pretrained(src, **kwargs)
    loaded: Any = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, **kwargs)
    models._drop_quantizer_marker(loaded)  # only set when read from the GGUF file itself
    return loaded.to(device), tokenizer


def run_trl(case: Case, model: str, root: Path, setup: Setup) -> Result:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    torch.set_num_threads(setup.threads)
    trl_model, tokenizer = _trl_model(model, case.device)
    eos = int(tokenizer.eos_token_id)
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {i} + {i + 1}?"}]} for i in range(PROMPTS)
    ]

    def reward(completion_ids: list[list[int]], **_: Any) -> list[float | None]:
        return [_even_reward(list(ids), eos) for ids in completion_ids]

    class Timer(TrainerCallback):
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
    cpu_at_warmup = 0.0

    class CPU(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            nonlocal cpu_at_warmup
            if len(timer.times) == case.warmup:
                cpu_at_warmup = _cpu_seconds()

    gpu = case.device.startswith("cuda")
    micro = setup.trl_micro_rows or PROMPTS * GROUP
    config = GRPOConfig(
        output_dir=str(Path(tempfile.mkdtemp(dir=root)) / "trl"),
        per_device_train_batch_size=micro,
        # One optimizer step (one generation batch of PROMPTS x GROUP) per micro-batch group.
        gradient_accumulation_steps=PROMPTS * GROUP // micro,
        num_generations=GROUP,
        max_completion_length=case.new_tokens,
        max_steps=case.warmup + case.measured,
        learning_rate=1e-4,
        temperature=1.0,
        loss_type="dapo",
        beta=0.0,
        logging_steps=1,
        report_to="none",
        use_cpu=not gpu,
        bf16=gpu or setup.dtype == "bfloat16",
        gradient_checkpointing=setup.gradient_checkpointing,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
        generation_kwargs={"min_new_tokens": case.new_tokens} if case.full_length else None,
    )
    trainer = GRPOTrainer(
        model=trl_model,
        processing_class=tokenizer,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        peft_config=LoraConfig(
            r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
        callbacks=[timer, CPU()],
    )
    trainer.train()
    tokens = statistics.fmean(timer.tokens[case.warmup :]) if timer.tokens else 0.0
    return Result(
        step_s=statistics.median(timer.times[case.warmup :]),
        tokens_per_step=tokens,
        peak_rss_gb=_peak_rss_gb(),
        cpu_s=(_cpu_seconds() - cpu_at_warmup) / max(len(timer.times) - case.warmup, 1),
        attention=str(getattr(trl_model.config, "_attn_implementation", None)),
        dtype="float32, bf16 autocast" if config.bf16 else "float32",
    )


def _worker(spec: str) -> None:
    """One run in this fresh process; prints its result as the last line."""
    job = json.loads(spec)
    case, setup, root = Case(**job["case"]), Setup(**job["setup"]), Path(job["root"])
    if setup.who != "trl" and setup.without != "openmp":
        trainer_openmp()  # as `osmosis train` runs; TRL keeps the environment its users have
    model = _model_path(case, root)
    run = run_trl if setup.who == "trl" else run_ours
    result = run(case, model, root, setup)
    print("RESULT " + json.dumps(asdict(result)), flush=True)


def memory_need_gb(case: Case, setup: Setup) -> float:
    """Free memory a run of ``setup`` needs before it starts: its expected peak plus a margin
    (real model: TRL fp32 ~13 GB, TRL bf16 ~10 GB, TRL with gradient checkpointing ~6 GB,
    ours ~4 GB; random models far less)."""
    if not case.embedded:
        return 2.0
    if setup.who != "trl":
        return 5.0
    if setup.gradient_checkpointing or setup.trl_micro_rows:
        return 8.0
    return 12.0 if setup.dtype == "bfloat16" else 15.0


def wait_for_memory(need_gb: float, label: str, timeout_s: float = 1800.0) -> None:
    """Wait until the machine has ``need_gb`` of available memory (``MemAvailable``): on a
    shared machine a run started without it would push other people's processes into the
    OOM killer, and its own figures would be those of a thrashing machine."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while (free := psutil.virtual_memory().available / 1e9) < need_gb:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{label}: needs {need_gb:.0f} GB of free memory and the machine has had "
                f"{free:.1f} GB for {timeout_s / 60:.0f} min; run it when the machine is quieter"
            )
        print(f"  waiting: {label} needs {need_gb:.0f} GB free, {free:.1f} GB now", flush=True)
        time.sleep(30)


def _run(case: Case, setup: Setup, root: Path) -> Result:
    wait_for_memory(memory_need_gb(case, setup), setup.label)
    spec = json.dumps({"case": asdict(case), "setup": asdict(setup), "root": str(root)})
    proc = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.bench_trainer", "--worker", spec],
        capture_output=True,
        text=True,
        check=False,
        env=library_env(),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{setup.label} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = Result(**json.loads(lines[-1].removeprefix("RESULT ")))
    print(f"  {case.name} | {setup.label}: {result}", flush=True)
    return result


def _runs() -> int:
    return max(1, int(os.environ.get("OSMOSIS_BENCH_RUNS", "3")))


def _measure(
    case: Case,
    setups: list[Setup],
    root: Path,
    runs: int,
    on_run: Callable[[int, int, Result], None] | None = None,
) -> list[Row]:
    """Every setup ``runs`` times, interleaved (A B C A B C ...: a slow minute on the shared
    machine does not fall on one setup only, and run ``i`` of two rows are neighbours, so
    their ratio is paired). ``on_run(row index, round, result)`` runs after each run."""
    _model_path(case, root)  # build a random model once, before the runs
    rows = [Row(s) for s in setups]
    for done in range(1, runs + 1):
        for i, row in enumerate(rows):
            result = _run(case, row.setup, root)
            row.runs.append(result)
            if on_run is not None:
                on_run(i, done, result)
    return rows


def _table(case: Case, rows: list[Row], reference: Row) -> str:
    lines = [
        f"**{case.name}** ({case.describe()}; median of {len(rows[0].runs)} run(s) per row)",
        "",
        "| trainer | step time | CPU s/step | rollouts / update | generated tokens/step "
        "| tokens/s | step vs TRL | peak RSS | RSS vs TRL | step times of the runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ref_step, ref_rss = reference.median("step_s"), reference.median("peak_rss_gb")
    for row in rows:
        step, rss = row.median("step_s"), row.median("peak_rss_gb")
        split = (
            f"{row.median('rollout_s'):.2f} s / {row.median('update_s'):.2f} s"
            if row.setup.who == "ours"
            else "-"
        )
        tokens = row.median("tokens_per_step")
        each = ", ".join(f"{r.step_s:.2f}" for r in row.runs)
        lines.append(
            f"| {row.setup.label} | {step:.3f} s | {row.median('cpu_s'):.2f} | {split} "
            f"| {tokens:.0f} | {tokens / step:.0f} | {step / ref_step:.2f}x | {rss:.2f} GB "
            f"| {rss / ref_rss:.2f}x | {each} |"
        )
    return "\n".join(lines)


def _verdict(
    name: str,
    ours: Row,
    trl: Row,
    *,
    memory: bool,
    trl_bf16: Row | None = None,
    trl_micro: Row | None = None,
) -> str:
    ratio = ours.median("step_s") / trl.median("step_s")
    met = "met" if ratio <= TARGET_STEP else "NOT met"
    cpu = ours.median("cpu_s") / trl.median("cpu_s")
    text = (
        f"- {name}: on-policy step = **{ratio:.2f}x** TRL's (median of "
        f"{len(ours.runs)} vs {len(trl.runs)} runs; target <= {TARGET_STEP:.2f}x: {met}; "
        f"CPU seconds per step {cpu:.2f}x)"
    )
    if memory:
        mem = ours.median("peak_rss_gb") / trl.median("peak_rss_gb")
        mem_met = "met" if mem <= TARGET_MEMORY else "NOT met"
        text += (
            f"; peak RSS = **{mem:.2f}x** TRL's ({ours.median('peak_rss_gb'):.2f} GB vs "
            f"{trl.median('peak_rss_gb'):.2f} GB; target <= {TARGET_MEMORY:.2f}x: {mem_met}; "
            "TRL's default runs all "
            f"{PROMPTS * GROUP} completions of a step as one forward/backward, without "
            "micro-batches, which sets most of its peak)"
        )
    if trl_micro is not None:
        text += (
            f"; against TRL with `gradient_accumulation_steps="
            f"{PROMPTS * GROUP // trl_micro.setup.trl_micro_rows}` (micro-batches of "
            f"{trl_micro.setup.trl_micro_rows} completions, as near ours as 32 divides): step "
            f"**{ours.median('step_s') / trl_micro.median('step_s'):.2f}x**, peak RSS "
            f"**{ours.median('peak_rss_gb') / trl_micro.median('peak_rss_gb'):.2f}x** "
            f"({trl_micro.median('peak_rss_gb'):.2f} GB)"
        )
    if trl_bf16 is not None:
        text += (
            f"; against TRL with `bf16=True` (autocast, the same precision as ours): step "
            f"**{ours.median('step_s') / trl_bf16.median('step_s'):.2f}x**, peak RSS "
            f"{ours.median('peak_rss_gb') / trl_bf16.median('peak_rss_gb'):.2f}x"
        )
    return text


def _paired(a: Row, b: Row, attr: str) -> list[float]:
    """``a / b`` run by run: run ``i`` of both rows ran in the same round, side by side."""
    return [
        getattr(x, attr) / getattr(y, attr)
        for x, y in zip(a.runs, b.runs, strict=False)
        if getattr(x, attr) and getattr(y, attr)
    ]


@dataclass
class PathCheck:
    """One speed path: the row with it and the row without it (one change apart)."""

    name: str
    with_it: Row
    without: Row
    overlap: bool = False
    """A path that overlaps work (same CPU, less wall): judged on wall time alone."""
    library: str = ""
    """The library alternative the ``without`` row runs instead (e.g. "peft's merge"): the
    path stays only if it beats that by >= 10 %."""
    kept_for: str = ""
    """Why the path stays although it is no faster (not speed: a measured correctness or memory
    property, with the section that measures it)."""

    def line(self) -> str:
        walls = _paired(self.without, self.with_it, "step_s")
        cpus = _paired(self.without, self.with_it, "cpu_s")
        wall = statistics.median(walls) - 1.0 if walls else float("nan")
        cpu = statistics.median(cpus) - 1.0 if cpus else float("nan")
        pays = wall >= 0.10 and (self.overlap or cpu >= 0.10)
        rule = "wall" if self.overlap else "wall and CPU"
        if self.library and not pays and self.kept_for:
            outcome = f"does not beat {self.library} on the step; kept for {self.kept_for}"
        elif self.library:
            outcome = (
                f"stays: beats {self.library} by >= 10 % ({rule})"
                if pays
                else f"does NOT beat {self.library} by 10 %: use the library's"
            )
        else:
            outcome = f"pays (>= 10 % on {rule})" if pays else "gains < 10 %"
        other, mine = (
            (f"with {self.library}", "ours") if self.library else ("without it", "with it")
        )
        return (
            f"- {self.name}: step {spread([r.step_s for r in self.without.runs])} s / "
            f"{self.without.median('cpu_s'):.1f} CPU s {other} ({self.without.setup.label}) "
            f"vs {spread([r.step_s for r in self.with_it.runs])} s / "
            f"{self.with_it.median('cpu_s'):.1f} CPU s {mine} ({self.with_it.setup.label}); "
            f"{other} / {mine}, paired by round: wall {spread(walls)}x, CPU {spread(cpus)}x "
            f"({wall:+.0%} wall, {cpu:+.0%} CPU) -> {outcome}"
        )


def _phase_table(row: Row) -> str:
    """Where the default on-policy step's CPU time and memory go (median over its runs)."""
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for run in row.runs:
        for ph in run.phases or []:
            by_phase.setdefault(ph["phase"], []).append(ph)
    if not by_phase:
        return ""
    lines = [
        f"Where the on-policy step goes ({row.setup.label}; per timed step, median of "
        f"{len(row.runs)} run(s); CPU seconds of all threads; peak RSS is the highest "
        "resident memory sampled while the phase ran, the first step included):",
        "",
        "| phase | CPU s/step | wall s/step | calls/step | peak RSS in phase |",
        "|---|---|---|---|---|",
    ]
    for name, phs in by_phase.items():
        med = {k: statistics.median(p[k] for p in phs) for k in phs[0] if k != "phase"}
        per_step = name != _SETUP_PHASE
        lines.append(
            f"| {name} | {med['cpu_s']:.2f} | {med['wall_s']:.2f} | "
            f"{med['calls_per_step']:.1f} | {med['peak_rss_gb']:.2f} GB |"
            if per_step
            else f"| {name} | - | - | - | {med['peak_rss_gb']:.2f} GB |"
        )
    return "\n".join(lines)


_SETUP_PHASE = "setup: model load, engine copy, gateway (once)"


def _load_note(at_start: float, cores: int | None = None) -> str:
    return (
        f"{load_note(at_start, cores)} The runs of all rows are "
        "interleaved so slow minutes spread over them, and each row is the median over its "
        "runs (counted in its table's heading). CPU seconds per step (all threads of the "
        "process) depend far less on the load than "
        "wall time."
    )


def _openmp_settings() -> dict[str, dict[str, str]]:
    """How the runs set OpenMP's waits (what ``_report.openmp_note`` describes), to store."""
    from osmosis_trainer._openmp import OPENMP_DEFAULTS

    return {
        "ours": {k: os.environ.get(k, v) for k, v in OPENMP_DEFAULTS.items()},
        "libraries": {k: v for k, v in library_env().items() if k in OPENMP_DEFAULTS},
    }


def _openmp_text(openmp: dict[str, dict[str, str]]) -> str:
    ours = ", ".join(f"`{k}={v}`" for k, v in openmp["ours"].items())
    theirs = ", ".join(f"`{k}={v}`" for k, v in openmp["libraries"].items())
    return f"OpenMP: ours {ours} (the training worker's default); the libraries' runs " + (
        theirs + " (set by whoever ran the benchmark)"
        if theirs
        else "libgomp's defaults (none set)"
    )


def _prose(trl: str, dtype: str, openmp: dict[str, dict[str, str]]) -> str:
    """``trl``: its version; ``dtype``: what ours trained in on the CPU (``auto`` resolved)."""
    return (
        f'TRL {trl} (`GRPOTrainer`, `loss_type="dapo"` set explicitly, `beta=0`; each TRL row '
        "names its precision and checkpointing, its defaults being `bf16=True` autocast with "
        "gradient checkpointing, on CPU too) and ours train the same LoRA with the same loss "
        "and reward. "
        "TRL runs as its users run it: its model loaded by transformers' "
        "`AutoModelForCausalLM.from_pretrained` (fp32, transformers' default attention: "
        "SDPA) from the same converted weights ours reads, not by osmosis's `load_model`. "
        'Ours runs `[training] dtype = "auto"`, which on this machine\'s CPU resolves to '
        f"{dtype} base weights (LoRA weights and optimiser state stay "
        "fp32). "
        "'on-policy' trains each step on rollouts of the current adapter, as TRL does; "
        "'rollouts ahead' (`[algorithm] rollouts_ahead = 1`) generates the next step's rollouts "
        "while this one trains (one step off-policy), so its rollout and update times overlap. "
        "Our policy calls go from the rollout runner to the policy gateway over loopback HTTP; "
        "the HF engine decodes in the trainer's process, on its own module copy over the "
        "trainer's frozen base weights, each adapter merged into a copy of the adapted layers' "
        "weights. Peak RSS is the whole run's (`ru_maxrss`). " + _openmp_text(openmp) + "."
    )


CPU_CASES = (
    Case("tiny", hidden=64, layers=2, heads=4, new_tokens=32, measured=40),
    Case("small", hidden=512, layers=8, heads=8, new_tokens=32),
)
GPU_CASE = Case("0.5B-class", hidden=1536, layers=20, heads=12, new_tokens=128, device="cuda")


def _cpu_setups() -> list[Setup]:
    """A CPU case's rows; the last is TRL, the reference of the ratios."""
    return [
        Setup("osmosis, on-policy (defaults)"),
        Setup("osmosis, rollouts ahead", ahead=1),
        Setup("TRL GRPOTrainer", who="trl"),
    ]


def _gpu_setups() -> list[Setup]:
    """The GPU case's rows (vLLM's where it is installed); the last is TRL."""
    import importlib.util

    setups = [
        Setup("osmosis (hf engine), on-policy"),
        Setup("osmosis (hf engine), rollouts ahead", ahead=1),
    ]
    if importlib.util.find_spec("vllm") is not None:
        setups += [
            Setup(f"osmosis (vllm engine), {m}", ahead=a, engine="vllm")
            for a, m in ((0, "on-policy"), (1, "rollouts ahead"))
        ]
    setups.append(Setup("TRL GRPOTrainer", who="trl", threads=1))
    return setups


def _command(runs: int) -> str:
    """The command with the rounds knob when it was set (unset: :data:`COMMAND`)."""
    knob = "OSMOSIS_BENCH_RUNS" in os.environ
    return f"OSMOSIS_BENCH_RUNS={runs} {COMMAND}" if knob else COMMAND


def main() -> None:
    import importlib.metadata

    import torch

    load_at_start = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="bench_trainer_"))
    runs = _runs()
    cuda = torch.cuda.is_available()
    plan = [(case, _cpu_setups(), runs) for case in CPU_CASES]
    if cuda:
        plan.append((GPU_CASE, _gpu_setups(), 1))
    sitting = Sitting.start(
        NAME,
        _command(runs),
        CODE,
        rounds=runs,
        cuda=cuda,
        load_1min=load_at_start,
        cpus=os.cpu_count(),
        trl=importlib.metadata.version("trl"),
        openmp=_openmp_settings(),
        cases=[
            {"case": asdict(case), "setups": [asdict(s) for s in setups], "rounds": rounds}
            for case, setups, rounds in plan
        ],
    )
    for case, setups, rounds in plan:
        _measure(case, setups, root, rounds, on_run=_recorder(sitting, case, setups))
        render()


def _recorder(
    sitting: Sitting, case: Case, setups: list[Setup]
) -> Callable[[int, int, Result], None]:
    """Stores each run of ``case`` as it ends (an interrupted sitting keeps what it measured)."""

    def record(row: int, done: int, result: Result) -> None:
        sitting.record(
            {"case": case.name, "row": row, "label": setups[row].label, "round": done,
             "result": asdict(result)}
        )

    return record


# --- rendering: stored results -> section ------------------------------------------------


def _stored_rows(sitting: Sitting, case: Case, setups: list[dict[str, Any]]) -> list[Row]:
    """A stored case's rows, each with its runs in round order."""
    rows = [Row(Setup(**s)) for s in setups]
    mine = sorted((r for r in sitting.runs if r["case"] == case.name), key=lambda r: r["round"])
    for r in mine:
        rows[int(r["row"])].runs.append(Result(**r["result"]))
    return rows


def _cpu_dtype(cases: list[tuple[Case, list[Row]]]) -> str:
    """What ours trained in on the CPU with ``[training] dtype = "auto"``, from the runs."""
    found = {
        run.dtype
        for case, rows in cases
        if case.device == "cpu"
        for row in rows
        if row.setup.who == "ours" and row.setup.dtype is None
        for run in row.runs
        if run.dtype
    }
    return " / ".join(sorted(found)) or "(no run stored yet)"


def render() -> None:
    """Rewrite the section from ``docs/benchmarks/trainer.json``."""
    sitting = Sitting.for_render(NAME, TITLE, COMMAND)
    if sitting is None:
        return
    data = sitting.data
    cases: list[tuple[Case, list[Row]]] = []
    for stored in data["cases"]:
        case = Case(**stored["case"])
        cases.append((case, _stored_rows(sitting, case, stored["setups"])))
    verdicts, sections = [], []
    for case, rows in cases:
        if not any(row.runs for row in rows):
            sections.append(f"**{case.name}**: no run stored yet.")
            continue
        sections.append(_table(case, rows, rows[-1]))
        if case.device != "cpu":
            continue
        if rows[0].runs and rows[-1].runs:
            verdicts.append(_verdict(case.name, rows[0], rows[-1], memory=False))
        else:
            verdicts.append(f"- {case.name}: no verdict: not every row has a run yet.")
    if not data["cuda"]:
        sections.append("_No CUDA device on this machine: the GPU comparison did not run._")
    body = "\n".join(
        [
            f"Target: the on-policy step at most {TARGET_STEP:.2f}x TRL's (same thread count, "
            "median of runs). The real-model case has its own section (`trainer_real`).",
            "",
            *verdicts,
            "",
            "\n\n".join(sections),
            "",
            _prose(data["trl"], _cpu_dtype(cases), data["openmp"]),
            "",
            _load_note(data["load_1min"], data["cpus"]),
        ]
    )
    print(body, flush=True)
    sitting.write(TITLE, body)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2])
    elif sys.argv[1:] == ["render"]:
        render()
    else:
        main()
