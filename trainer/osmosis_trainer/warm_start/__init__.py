"""The warm start: a supervised phase on demonstrations before RL step 1 (``[warm_start]``).

Demonstrations (see :func:`osmosis_ai.data.load_demonstrations`) are rendered exactly as the
HF engine renders the same conversation during RL (:mod:`._render`), trained into the run's
LoRA adapter (:mod:`._phase`), and saved as ``<run>/checkpoints/warm/`` (``RUN:warm``), which RL
then continues from and a resumed run restarts from.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from osmosis_ai.errors import TrainingError
from osmosis_trainer.checkpoints import WARM, DataPosition, save_checkpoint, warm_checkpoint
from osmosis_trainer.warm_start._phase import (
    WarmStartSettings,
    WarmStartStep,
    plan_warm_steps,
    resolve_warm_settings,
    train_warm_start,
    warm_update,
)
from osmosis_trainer.warm_start._render import (
    RenderedDemo,
    RenderReport,
    WarmStartRenderer,
    eos_token_ids,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from osmosis_ai.config import TrainingConfig
    from osmosis_ai.data import Demonstration
    from osmosis_trainer.loop import StepReport, Trainer

__all__ = [
    "RenderReport",
    "RenderedDemo",
    "WarmStartRenderer",
    "WarmStartSettings",
    "WarmStartStep",
    "eos_token_ids",
    "plan_warm_steps",
    "resolve_warm_settings",
    "run_warm_start",
    "train_warm_start",
    "warm_checkpoint",
    "warm_update",
]

logger = logging.getLogger("osmosis")


def _skips(report: RenderReport, bad_rows: int) -> str:
    counts = dict(report.skipped)
    if bad_rows:
        counts["bad_row"] = bad_rows
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


async def run_warm_start(
    trainer: Trainer,
    config: TrainingConfig,
    demos: list[Demonstration],
    tokenizer: PreTrainedTokenizerBase,
    *,
    bad_rows: int = 0,
    on_report: Callable[[StepReport], None] | None = None,
) -> Path | None:
    """Run the phase on ``trainer``'s model, save ``checkpoints/warm`` and serve it.

    Returns the checkpoint (``None`` when the run was asked to stop during the phase).

    Raises:
        TrainingError: no demonstration survives rendering (with the counts by reason).
    """
    ws = config.warm_start
    assert ws is not None
    report = await _render(trainer, config, demos, tokenizer, bad_rows)
    settings = resolve_warm_settings(ws, trainer.s, config.training.seed)
    total = plan_warm_steps(len(report.demos), settings.batch_size, settings.epochs)
    summary = _announce(report, settings, total, bad_rows)
    trainer.metrics.drop_kind("warm_start")  # a phase cut short by a crash is redone whole
    run = trainer.run_dir
    run.update_status(status="running", phase="train", activity="warm start", warm_start=summary)
    t0 = time.perf_counter()
    steps = await trainer.run_torch(
        functools.partial(
            train_warm_start,
            trainer.model,
            report.demos,
            settings,
            device=trainer.device,
            on_step=_step_recorder(trainer, summary, on_report),
            should_stop=run.stop_requested,
        )
    )
    if len(steps) < total:
        return None  # a stop request: the trainer records the stop
    return await _save_warm(trainer, steps, summary, time.perf_counter() - t0)


async def _render(
    trainer: Trainer,
    config: TrainingConfig,
    demos: list[Demonstration],
    tokenizer: PreTrainedTokenizerBase,
    bad_rows: int,
) -> RenderReport:
    """The demonstrations rendered as the engine renders them; raises when none is left."""
    from osmosis_trainer.loop._policy import _causal_lm

    ws = config.warm_start
    assert ws is not None
    where = str(config.warm_start_dataset_path(must_exist=False))
    renderer = WarmStartRenderer(tokenizer, eos_token_ids(_causal_lm(trainer.model), tokenizer))
    report = await asyncio.to_thread(
        renderer.render_all, demos, max_tokens=ws.max_tokens, where=where
    )
    for example in report.examples:
        logger.warning("warm start: skipped %s", example)
    if not report.demos:
        raise TrainingError(
            f"[warm_start] dataset {where}: no demonstration to train on ({len(demos)} valid "
            f"rows; left out: {_skips(report, bad_rows)}). "
            + (report.examples[0] if report.examples else "")
        )
    return report


def _announce(
    report: RenderReport, settings: WarmStartSettings, total: int, bad_rows: int
) -> dict[str, object]:
    """Log the phase's size; returns its summary (``status.json``'s ``warm_start``)."""
    tokens = sum(d.trained_tokens for d in report.demos)
    logger.info(
        "warm start: %d demonstrations (%d assistant tokens; left out: %s), %d epochs, %d steps",
        len(report.demos),
        tokens,
        _skips(report, bad_rows),
        settings.epochs,
        total,
    )
    return {
        "demonstrations": len(report.demos),
        "skipped": dict(report.skipped) | ({"bad_row": bad_rows} if bad_rows else {}),
        "trained_tokens_per_epoch": tokens,
        "total_steps": total,
        "step": 0,
    }


def _step_recorder(
    trainer: Trainer, summary: dict[str, object], on_report: Callable[[StepReport], None] | None
) -> Callable[[WarmStartStep], None]:
    """What each warm step does from the training thread: metrics, status, log, ``on_report``
    (on the event loop's thread)."""
    from osmosis_trainer.loop import StepReport

    loop = asyncio.get_running_loop()

    def on_step(step: WarmStartStep) -> None:
        metrics = step.metrics()
        trainer.metrics.write(step.step, metrics, kind="warm_start")
        summary.update(step=step.step, loss=step.loss, token_accuracy=step.token_accuracy)
        trainer.run_dir.update_status(warm_start=summary)
        logger.info(
            "warm start step %d/%d (epoch %d): loss %.4f, token accuracy %.1f%%",
            step.step,
            step.total_steps,
            step.epoch,
            step.loss,
            100 * step.token_accuracy,
        )
        if on_report is not None:
            report_ = StepReport(step.step, step.total_steps, "warm_start", metrics)
            loop.call_soon_threadsafe(on_report, report_)

    return on_step


async def _save_warm(
    trainer: Trainer, steps: list[WarmStartStep], summary: dict[str, object], time_s: float
) -> Path:
    """Save ``checkpoints/warm`` (RL continues from it) and serve its adapter as version 0."""
    run = trainer.run_dir
    last = steps[-1]
    path = save_checkpoint(
        run.checkpoints,
        step=0,
        model=trainer.model,
        optimizer=trainer.optimizer,
        scheduler=trainer.scheduler,
        data=DataPosition(),
        name=WARM,
        meta={
            "kind": "warm_start",
            "metrics": {
                "warm_start/loss": last.loss,
                "warm_start/token_accuracy": last.token_accuracy,
            },
            "warm_start": {**summary, "first_loss": steps[0].loss, "time_s": round(time_s, 1)},
        },
    )
    trainer.last_checkpoint = path
    await trainer.source.push_adapter(path / "adapter", 0)
    summary.update(done=True, checkpoint=str(path))
    run.update_status(warm_start=summary, last_checkpoint=str(path))
    return path
