"""``osmosis train submit``: run GRPO training in the foreground with live progress.

The run is recorded under ``<workspace>/runs/<name>-<timestamp>/`` (config copy, status.json,
metrics.jsonl, checkpoints/) so the run-lifecycle commands can read it. The trainer (torch,
peft) is imported only when a command runs, keeping ``osmosis --help`` fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmosis_ai.cli._output import state
from osmosis_ai.errors import ConfigError, MissingExtraError

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["ascii_chart", "register", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], *, lo: float | None = None, hi: float | None = None) -> str:
    """One character per value, scaled between ``lo`` and ``hi`` (default: the data range)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    lo = min(finite) if lo is None else lo
    hi = max(finite) if hi is None else hi
    span = hi - lo
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append(" ")
            continue
        frac = 0.5 if span <= 0 else min(max((v - lo) / span, 0.0), 1.0)
        out.append(_BARS[round(frac * (len(_BARS) - 1))])
    return "".join(out)


def ascii_chart(values: list[float], *, height: int = 8, label: str = "reward") -> str:
    """A small multi-line plot of ``values`` (one column per step) with a y axis."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return f"{label}: no data"
    lo, hi = min(0.0, min(finite)), max(1.0, max(finite))
    labels = {height: hi, (height + 1) // 2: (lo + hi) / 2, 1: lo}
    rows = []
    for level in range(height, 0, -1):
        top = lo + (hi - lo) * level / height
        bottom = lo + (hi - lo) * (level - 1) / height
        cells = "".join(
            "█"
            if math.isfinite(v) and v >= top
            else ("▄" if math.isfinite(v) and v > bottom else " ")
            for v in values
        )
        axis = f"{labels[level]:6.2f} ┤" if level in labels else "       │"
        rows.append(axis + cells)
    rows.append("       └" + "─" * len(values) + f"  {label} per step (1..{len(values)})")
    return "\n".join(rows)


def _fmt(metrics: dict[str, Any], key: str, spec: str = ".3f") -> str:
    value = metrics.get(key)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "-"
    return format(value, spec)


def _reasons(metrics: dict[str, Any]) -> str:
    parts = [
        f"{k.removeprefix('failed/')} {v:.0f}"
        for k, v in metrics.items()
        if k.startswith("failed/") and isinstance(v, int | float) and v
    ]
    return f" ({', '.join(parts)})" if parts else ""


class _LiveView:
    """Progress bar + reward sparkline + last-step metrics, redrawn on every report."""

    def __init__(self, total_steps: int, start_step: int = 0) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]training[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("steps"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=state.console,
        )
        self.task = self.progress.add_task("train", total=max(total_steps, 1), completed=start_step)
        self.rewards: list[float] = []
        self.val: list[float] = []
        self.last: dict[str, Any] = {}
        self.phase = "starting"

    def on_phase(self, text: str) -> None:
        self.phase = text

    def on_report(self, report: Any) -> None:
        if report.kind == "eval":
            self.val.append(float(report.metrics.get("val_reward_mean", math.nan)))
            return
        self.last = report.metrics
        self.rewards.append(float(report.metrics.get("reward_mean", math.nan)))
        self.progress.update(self.task, completed=report.step)
        self.phase = "training"

    def __rich__(self) -> RenderableType:
        from rich.console import Group
        from rich.text import Text

        m = self.last
        lines: list[RenderableType] = [self.progress]
        if self.rewards:
            lines.append(
                Text.assemble(
                    ("reward ", "bold"),
                    (sparkline(self.rewards, lo=0.0, hi=1.0), "green"),
                    f"  last {_fmt(m, 'reward_mean')}  pass {_fmt(m, 'pass_rate', '.0%')}",
                )
            )
            lines.append(
                Text(
                    f"loss {_fmt(m, 'loss', '.4f')}  entropy {_fmt(m, 'entropy', '.2f')}  "
                    f"kl {_fmt(m, 'kl', '.4f')}  len {_fmt(m, 'response_length', '.0f')}  "
                    f"step {_fmt(m, 'step_time_s', '.0f')}s\n"
                    f"rollouts {_fmt(m, 'rollouts', '.0f')}  failed "
                    f"{_fmt(m, 'failed_rollouts', '.0f')}{_reasons(m)}  zero-variance groups "
                    f"{_fmt(m, 'zero_variance_groups', '.0f')}/{_fmt(m, 'groups', '.0f')}",
                    style="dim",
                )
            )
        if self.val:
            lines.append(
                Text(
                    f"validation reward {sparkline(self.val, lo=0.0, hi=1.0)} "
                    f"last {self.val[-1]:.3f}"
                )
            )
        lines.append(Text(f"[{self.phase}]", style="dim"))
        return Group(*lines)


class _LineView:
    """One plain line per step and per setup phase, for logs and pipes (no terminal to redraw)."""

    def __init__(self, total_steps: int) -> None:
        self.total = total_steps
        self.started = time.perf_counter()
        self.rewards: list[float] = []

    def on_phase(self, text: str) -> None:
        state.console.print(
            f"[{_clock(self.started)}] {text}", highlight=False, soft_wrap=True, markup=False
        )

    def on_report(self, report: Any) -> None:
        m = report.metrics
        if report.kind == "eval":
            line = (
                f"validation step {report.step}: reward {_fmt(m, 'val_reward_mean')} "
                f"pass {_fmt(m, 'val_pass_rate', '.0%')}"
            )
        else:
            self.rewards.append(float(m.get("reward_mean", math.nan)))
            done = report.step / max(report.total_steps, 1)
            line = (
                f"step {report.step}/{report.total_steps} ({done:.0%}) reward "
                f"{_fmt(m, 'reward_mean')} {sparkline(self.rewards, lo=0.0, hi=1.0)} pass "
                f"{_fmt(m, 'pass_rate', '.0%')} loss {_fmt(m, 'loss', '.4f')} len "
                f"{_fmt(m, 'response_length', '.0f')} failed {_fmt(m, 'failed_rollouts', '.0f')}/"
                f"{_fmt(m, 'rollouts', '.0f')}{_reasons(m)} step {_fmt(m, 'step_time_s', '.0f')}s"
            )
        state.console.print(
            f"[{_clock(self.started)}] {line}", highlight=False, soft_wrap=True, markup=False
        )


def _clock(started: float) -> str:
    seconds = int(time.perf_counter() - started)
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def _require_trainer() -> None:
    import importlib.util

    for module in ("torch", "transformers", "peft"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError("osmosis train", "trainer", module)


def _runs_root(config: Any) -> Path:
    out = config.output_dir()
    return Path(out) if out is not None else Path(config.workspace_root) / "runs"


def _summary(plan: Any, config: Any, run: Any) -> str:
    t = config.training
    return (
        f"[bold]run[/] {run.path}\n"
        f"rollout {config.experiment.rollout} ({plan.entrypoint.name}) · model "
        f"{config.experiment.model_path} · dataset {plan.dataset.name} ({len(plan.rows)} rows)\n"
        f"{plan.total_steps} steps × {t.rollout_batch_size} rows × {t.n_samples_per_prompt} "
        f"samples · engine {plan.engine} on {plan.device} · LoRA r={config.lora.r}"
    )


def submit(
    config_path: Annotated[
        Path, typer.Argument(help="Training config (configs/training/NAME.toml).")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="Run name (default: the config's file name).")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume", help="Continue a run folder (runs/NAME-...) from its latest checkpoint."
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON (no live display).")
    ] = False,
) -> None:
    """Train the config's rollout with GRPO + LoRA in this process, saving checkpoints."""
    from osmosis_ai.config import load_training_config

    config = load_training_config(config_path)
    # Idle OpenMP threads sleep instead of spinning: on a CPU shared with other work, spinning
    # threads made training steps several times slower. Read once, when torch first loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if not state.debug:
        # tqdm reads this when first imported (the GGUF conversion shows a bare tqdm bar).
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    _require_trainer()
    from osmosis_trainer.loop import RunDir, create_run_dir, plan_job, run_training

    plan = plan_job(config)
    if plan.total_steps < 1:
        raise ConfigError(f"{config_path}: the run has no steps (empty dataset?)")
    if resume is not None:
        if not (resume / "status.json").exists():
            raise ConfigError(f"--resume {resume}: not a run folder (no status.json)")
        run = RunDir(path=resume, name=resume.name)
    else:
        run = create_run_dir(_runs_root(config), name or config_path.stem, config_file=config_path)
    run.update_status(total_steps=plan.total_steps, model=config.experiment.model_path)
    started = time.perf_counter()
    if json_out:
        _quiet_libraries()
        result = asyncio.run(run_training(config, run, plan=plan, resume=resume is not None))
    else:
        result = _run_live(config, run, plan, resume is not None)
    elapsed = time.perf_counter() - started
    _report(result, run, elapsed, json_out)


def _quiet_libraries() -> None:
    """Keep the live display readable: no download/convert bars, no library deprecation noise
    (``--debug`` keeps everything)."""
    if state.debug:
        return
    import warnings

    for module in ("transformers", "peft", "torch"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=module)
        warnings.filterwarnings("ignore", category=UserWarning, module=module)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - the trainer extra brings transformers
        pass


def _run_live(config: Any, run: Any, plan: Any, resume: bool) -> Any:
    from rich.live import Live

    from osmosis_trainer.loop import run_training

    _quiet_libraries()
    state.console.print(_summary(plan, config, run))
    view: _LineView | _LiveView
    display: contextlib.AbstractContextManager[Any]
    if state.console.is_terminal:
        view = _LiveView(plan.total_steps)
        display = Live(view, console=state.console, refresh_per_second=4, transient=False)
    else:
        # A log file or a pipe: a live display would only show up once, at the end.
        view = _LineView(plan.total_steps)
        display = contextlib.nullcontext()
    with display:
        return asyncio.run(
            run_training(
                config,
                run,
                plan=plan,
                resume=resume,
                on_report=view.on_report,
                on_phase=view.on_phase,
            )
        )


def _report(result: Any, run: Any, elapsed: float, json_out: bool) -> None:
    rewards = [float(h.get("reward_mean", math.nan)) for h in result.history]
    payload = {
        "run": str(run.path),
        "status": result.status,
        "steps": result.steps_done,
        "last_checkpoint": str(result.last_checkpoint) if result.last_checkpoint else None,
        "wall_time_s": round(elapsed, 1),
        "reward_mean_per_step": rewards,
    }
    if json_out:
        state.emit_json(payload)
        return
    con = state.console
    if rewards:
        con.print()
        con.print(ascii_chart(rewards), highlight=False)
        first, last = rewards[0], rewards[-1]
        con.print(f"reward: first step {first:.3f} → last step {last:.3f}")
    con.print(
        f"[bold green]{result.status}[/] {result.steps_done} steps in {elapsed / 60:.1f} min · "
        f"metrics {run.path / 'metrics.jsonl'}"
    )
    if result.last_checkpoint:
        con.print(
            f"checkpoint {result.last_checkpoint}/adapter (PEFT: "
            "PeftModel.from_pretrained(base_model, path))"
        )


def register(app: typer.Typer) -> None:
    """Add the ``train`` command group to the root app."""
    train_app = typer.Typer(
        name="train", help="Train a rollout with GRPO + LoRA.", no_args_is_help=True
    )
    train_app.command("submit")(submit)
    app.add_typer(train_app, name="train")
