"""The training loop: rollouts → advantages → LoRA update → adapter push → metrics/checkpoints.

Orchestration only; the math lives in :mod:`osmosis_trainer.grpo` and one update in
:func:`osmosis_trainer.loop.policy_update`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import shutil
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from osmosis_ai.errors import TrainingError
from osmosis_ai.rollout.running import RolloutRow
from osmosis_ai.safe_io import open_append
from osmosis_ai.serving import FreesIdleMemory, return_freed_memory
from osmosis_trainer.checkpoints import (
    DataPosition,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_adapter,
    save_checkpoint,
)
from osmosis_trainer.loop._data import DataCursor
from osmosis_trainer.loop._metrics import MetricsWriter
from osmosis_trainer.loop._optim import build_optimizer, build_scheduler
from osmosis_trainer.loop._policy import load_adapter_weights
from osmosis_trainer.loop._rollouts import (
    GradedSample,
    RolloutSource,
    StepRollouts,
    TrainBatch,
    build_train_batch,
)
from osmosis_trainer.loop._run import RunDir
from osmosis_trainer.loop._settings import LoopSettings
from osmosis_trainer.loop._traces import TraceSampler
from osmosis_trainer.loop._update import NonFiniteLossError, policy_update
from osmosis_trainer.trackers import Tracker

__all__ = ["StepReport", "TrainResult", "Trainer"]

logger = logging.getLogger("osmosis")


# Adapter folders kept for serving (the engine may still be loading the previous one).
_KEEP_ADAPTERS = 2


_T = TypeVar("_T")


@dataclass(frozen=True)
class _Collected:
    rollouts: StepRollouts
    started_at: float
    duration_s: float
    position_after: DataPosition
    """The data cursor right after this step's rows were taken."""


@dataclass
class StepReport:
    """What the loop tells its progress callback after each step (and each validation)."""

    step: int
    total_steps: int
    kind: str
    metrics: dict[str, float]


@dataclass
class TrainResult:
    """How the run ended."""

    steps_done: int
    status: str
    last_checkpoint: Path | None
    history: list[dict[str, float]]


class Trainer:
    """Runs GRPO steps over a dataset with a rollout source and a LoRA-wrapped model.

    ``settings`` comes from :func:`~osmosis_trainer.loop.resolve_settings` (a loaded training
    config, or its sections built in code: both train the same way).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        source: RolloutSource,
        rows: Sequence[RolloutRow],
        settings: LoopSettings,
        run: RunDir,
        *,
        device: torch.device | str = "cpu",
        eval_rows: Sequence[RolloutRow] | None = None,
        on_report: Callable[[StepReport], None] | None = None,
        tensorboard: bool = True,
        traces: TraceSampler | None = None,
        trackers: Sequence[Tracker] = (),
    ) -> None:
        self.model = model
        self.source = source
        self.rows = rows
        self.s = settings
        self.run_dir = run
        self.device = device
        self.eval_rows = list(eval_rows) if eval_rows is not None else []
        self.on_report = on_report
        self.traces = traces
        t, a = settings.training, settings.algorithm
        self.optimizer = build_optimizer(model, lr=t.lr, weight_decay=a.weight_decay)
        self.scheduler = build_scheduler(
            self.optimizer,
            warmup_steps=a.warmup_steps,
            total_steps=settings.total_steps,
            schedule=a.lr_schedule,
        )
        self.cursor: DataCursor[RolloutRow] = DataCursor(rows, t.rollout_batch_size, seed=t.seed)
        self.metrics = MetricsWriter(run.path, tensorboard=tensorboard, trackers=trackers)
        self.step = 0
        self._position = self.cursor.position
        self._last_step_end: float | None = None
        self.history: list[dict[str, float]] = []
        self._update_thread: ThreadPoolExecutor | None = None
        self.last_checkpoint: Path | None = None

    # -- resume -----------------------------------------------------------------------------

    async def resume(self, checkpoint: Path | None = None) -> bool:
        """Restore the latest (or the given) checkpoint; returns False when there is none."""
        path = checkpoint or latest_checkpoint(self.run_dir.checkpoints)
        if path is None:
            return False
        state = load_checkpoint(path)
        load_adapter_weights(self.model, state.adapter_dir)
        self.optimizer.load_state_dict(state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        restore_rng(state.rng)
        t = self.s.training
        self.cursor = DataCursor(self.rows, t.rollout_batch_size, seed=t.seed, position=state.data)
        self.step = state.step
        self._position = state.data
        self.last_checkpoint = path
        self.metrics.truncate_after(self.step)
        await self.source.push_adapter(state.adapter_dir, self.step)
        logger.info("resumed from %s at step %d", path, self.step)
        return True

    # -- the loop ---------------------------------------------------------------------------

    async def train(self) -> TrainResult:
        """Run steps until ``total_steps`` (or a stop request); always records the outcome.

        With ``rollouts_ahead = 1`` the next step's rollouts are collected while the current
        update runs (a worker thread trains; the gateway keeps serving): one step off-policy,
        corrected by the importance weights against the sampler's logprobs.
        """
        self.run_dir.update_status(
            status="running", phase="train", activity="training", step=self.step,
            total_steps=self.s.total_steps,
        )
        status = "finished"
        ahead: asyncio.Task[_Collected] | None = None
        try:
            while self.step < self.s.total_steps:
                if self.run_dir.stop_requested():
                    status = "stopped"
                    break
                step = self.step + 1
                got = await ahead if ahead is not None else await self._collect(step)
                ahead = None
                if self.s.algorithm.rollouts_ahead and step < self.s.total_steps:
                    ahead = asyncio.create_task(self._collect(step + 1))
                await self._train_step(step, got)
            if self.step > 0 and self._latest_step() != self.step:
                self.run_dir.update_status(phase="finalize", activity="final checkpoint")
                self._checkpoint()
        except NonFiniteLossError as exc:
            self._fail(exc)
            where = self.last_checkpoint or "none was saved yet"
            raise TrainingError(f"{exc} The last good checkpoint is kept: {where}") from exc
        except BaseException as exc:
            self._fail(exc)
            raise
        finally:
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)
            self.metrics.close()
            if self._update_thread is not None:
                self._update_thread.shutdown(wait=False)
                self._update_thread = None
        self.run_dir.update_status(
            status=status, phase="complete" if status == "finished" else "cleanup",
            activity=None, step=self.step, finished_at=time.time(),
            last_checkpoint=str(self.last_checkpoint) if self.last_checkpoint else None,
        )
        return TrainResult(self.step, status, self.last_checkpoint, self.history)

    def _fail(self, exc: BaseException) -> None:
        interrupted = isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
        status = "stopped" if interrupted else "failed"
        self.run_dir.update_status(
            status=status, phase="cleanup" if interrupted else "error", activity=None,
            step=self.step, finished_at=time.time(), error=f"{type(exc).__name__}: {exc}",
            last_checkpoint=str(self.last_checkpoint) if self.last_checkpoint else None,
        )

    def _latest_step(self) -> int | None:
        if self.last_checkpoint is None:
            return None
        digits = self.last_checkpoint.name.removeprefix("step_")
        return int(digits) if digits.isdigit() else 0  # checkpoints/warm: before step 1

    async def _collect(self, step: int) -> _Collected:
        """Take the step's rows and run their rollouts (a task of its own when run ahead)."""
        rows = self.cursor.next_batch()
        position = self.cursor.position
        t0 = time.perf_counter()
        if not self.s.algorithm.rollouts_ahead:
            self.run_dir.update_status(activity="rollouts", step=step - 1)
        ro = await self.source.collect(rows, step=step)
        return _Collected(ro, t0, time.perf_counter() - t0, position)

    async def _train_step(self, step: int, got: _Collected) -> None:
        t0 = time.perf_counter()
        ro = got.rollouts
        self._log_failures(ro, step)
        self._check_failures(ro, step)
        batch = build_train_batch(ro.samples, self.s.algorithm)
        self.run_dir.update_status(activity="update", step=step - 1)
        update_metrics: dict[str, float] = {}
        traced = self.traces.pick(ro) if self.traces is not None and self.traces.per_step else []
        logprobs: dict[int, list[float | None]] = {}
        try:
            if batch.sequences:
                if not self.s.algorithm.rollouts_ahead and isinstance(self.source, FreesIdleMemory):
                    # No rollout runs during this update: the engine's merged weights can go
                    # and come back with the new adapter (BENCHMARKS.md, trainer_real).
                    await self.source.release_idle_memory()
                # The rollouts' freed KV caches sit in the engine thread's malloc arena, which
                # the update's thread does not reuse: handed back first, the update's
                # activations do not stack on top of them (BENCHMARKS.md, trainer_real).
                await self.run_torch(return_freed_memory)
                stats = await self.run_torch(
                    functools.partial(
                        policy_update, self.model, self.optimizer, batch.sequences,
                        self.s, device=self.device, where=f"step {step}",
                        keep=self.traces.rows(traced, batch) if self.traces else (),
                    ),
                )
                update_metrics = stats.as_metrics()
                logprobs = stats.logprobs
                # The update's activations are free now; handed back, the worker's resident
                # size stays near one step's peak instead of ratcheting up (7 -> 9 GB over 8
                # CPU steps).
                await self.run_torch(return_freed_memory)
        finally:
            # Also when the update failed (without the trainer's logprobs then): the traces
            # show what the step trained on.
            if traced:
                await self._write_traces(step, traced, batch, logprobs)
        lr = float(self.scheduler.get_last_lr()[0])
        with warnings.catch_warnings():
            # A first step whose groups all had zero variance updates nothing; the schedule
            # still follows the step count, so torch's "scheduler before optimizer" note is moot.
            warnings.filterwarnings("ignore", message=r".*lr_scheduler\.step\(\)` before")
            self.scheduler.step()
        t_train = time.perf_counter() - t0
        self.step = step
        # The checkpoint's data position: rows of steps run ahead are served again on resume.
        self._position = got.position_after
        if batch.sequences:
            # Only the engine reads it, right away: atomic, but no fsync (checkpoints have one).
            adapter = save_adapter(
                self.model, self.run_dir.adapters / f"step_{step:06d}", durable=False
            )
            await self.source.push_adapter(adapter, step)
            self._prune_adapters()
        now = time.perf_counter()
        elapsed = now - max(got.started_at, self._last_step_end or got.started_at)
        self._last_step_end = now
        metrics = _rollout_metrics(ro, self.s.evaluation.pass_threshold)
        metrics.update(update_metrics)
        metrics.update(
            lr=lr,
            zero_variance_groups=float(batch.n_zero_variance_groups),
            groups=float(batch.n_groups),
            step_time_s=elapsed,
            rollout_time_s=got.duration_s,
            train_time_s=t_train,
            tokens_per_s=metrics.get("completion_tokens", 0.0) / max(elapsed, 1e-9),
            epoch=float(self.cursor.epoch),
        )
        self._record(step, metrics, "train")
        # Validation first: the checkpoint then captures the RNG state the next step starts from.
        c = self.s.checkpoints
        if c.eval_interval and step % c.eval_interval == 0 and self.eval_rows:
            await self.validate(step)
        if step % c.checkpoint_save_freq == 0:
            self._checkpoint(metrics)

    async def _write_traces(
        self,
        step: int,
        traced: list[GradedSample],
        batch: TrainBatch,
        logprobs: dict[int, list[float | None]],
    ) -> None:
        """The step's bounded trajectory sample, with the logprobs its update computed."""
        assert self.traces is not None
        records = await self.run_torch(
            functools.partial(self.traces.records, step, traced, batch, logprobs)
        )
        self.traces.write(step, records)

    async def run_torch(self, work: Callable[[], _T]) -> _T:
        """Run ``work`` (an update, the warm start) on the trainer's one torch thread, off the
        event loop, which keeps serving the gateway and the rollouts run ahead.

        Every update on that one thread lets glibc serve its activations from one arena, reused
        step after step: resident memory stays at one update's peak.
        """
        if self._update_thread is None:
            self._update_thread = ThreadPoolExecutor(1, thread_name_prefix="osmosis-update")
        return await asyncio.get_running_loop().run_in_executor(self._update_thread, work)

    def _record(self, step: int, metrics: dict[str, float], kind: str) -> None:
        self.metrics.write(step, metrics, kind=kind)
        if kind == "train":
            self.history.append({"step": float(step), **metrics})
        self.run_dir.update_status(step=step, **{f"last_{kind}": _summary(metrics)})
        if self.on_report is not None:
            self.on_report(StepReport(step, self.s.total_steps, kind, metrics))

    def _log_failures(self, ro: StepRollouts, step: int) -> None:
        """Append the step's failures to ``<run>/failures.jsonl`` (counts and examples)."""
        if not ro.n_failed:
            return
        record = {
            "step": step,
            "failed": ro.n_failed,
            "rollouts": ro.n_rollouts,
            "reasons": dict(ro.failure_reasons),
            "examples": ro.failure_examples,
        }
        failures = open_append(self.run_dir.path / "failures.jsonl")  # never via a link
        with os.fdopen(failures, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def _check_failures(self, ro: StepRollouts, step: int) -> None:
        budget = self.s.algorithm.max_failure_rate
        if ro.n_rollouts and ro.failure_rate > budget:
            reasons = ", ".join(f"{k} ×{v}" for k, v in ro.failure_reasons.most_common())
            example = f" First error: {ro.failure_examples[0]}" if ro.failure_examples else ""
            raise TrainingError(
                f"step {step}: {ro.n_failed} of {ro.n_rollouts} rollouts failed "
                f"({ro.failure_rate:.0%} > [algorithm] max_failure_rate "
                f"{budget:.0%}): {reasons}.{example} Fix the rollout (try "
                "'osmosis eval run' on the eval config) or raise max_failure_rate."
            )
        if not ro.samples:
            overlong = int(ro.metrics.get("overlong_prompts", 0))
            if overlong:
                limit = self.s.training.max_prompt_length
                raise TrainingError(
                    f"step {step}: no rollout produced a trainable sample: {overlong} of "
                    f"{ro.n_rollouts} had a policy prompt longer than [training] "
                    f"max_prompt_length ({limit} tokens; an agent's tool schemas count too). "
                    "Raise max_prompt_length in the training config."
                )
            raise TrainingError(
                f"step {step}: no rollout produced a trainable sample ({ro.n_rollouts} rollouts, "
                f"{ro.n_failed} failed, {ro.n_untrainable} without token data or removed). "
                "Training needs policy calls through the osmosis gateway (ctx.chat, "
                "OsmosisStrandsAgent or OsmosisAgent) and a grader that sets rewards."
            )

    def _checkpoint(self, metrics: dict[str, float] | None = None) -> None:
        self.last_checkpoint = save_checkpoint(
            self.run_dir.checkpoints,
            step=self.step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            data=self._position,
            meta={"metrics": _summary(metrics or (self.history[-1] if self.history else {}))},
        )
        self.run_dir.update_status(last_checkpoint=str(self.last_checkpoint))

    def _prune_adapters(self) -> None:
        folders = sorted(p for p in self.run_dir.adapters.glob("step_*") if p.is_dir())
        for old in folders[: max(len(folders) - _KEEP_ADAPTERS, 0)]:
            shutil.rmtree(old, ignore_errors=True)

    async def validate(self, step: int) -> dict[str, float]:
        """Score the policy on the validation rows; recorded as an ``eval`` metrics record."""
        self.run_dir.update_status(activity="validation")
        t0 = time.perf_counter()
        ev = self.s.evaluation
        ro = await self.source.collect(self.eval_rows, step=step, n_samples=ev.n)
        metrics = {f"val_{k}": v for k, v in _rollout_metrics(ro, ev.pass_threshold).items()}
        metrics["val_time_s"] = time.perf_counter() - t0
        self._record(step, metrics, "eval")
        return metrics


def _summary(metrics: dict[str, float]) -> dict[str, float]:
    keys = ("reward_mean", "pass_rate", "loss", "val_reward_mean", "val_pass_rate", "step_time_s")
    return {k: metrics[k] for k in keys if k in metrics}


def _rollout_metrics(ro: StepRollouts, pass_threshold: float) -> dict[str, float]:
    rewards = [s.reward for s in ro.samples]
    lengths = [float(s.completion_tokens) for s in ro.samples]
    n = len(rewards)
    out: dict[str, float] = {
        "reward_mean": statistics.fmean(rewards) if rewards else math.nan,
        "reward_std": statistics.pstdev(rewards) if n > 1 else 0.0,
        "reward_min": min(rewards) if rewards else math.nan,
        "reward_max": max(rewards) if rewards else math.nan,
        "pass_rate": sum(r >= pass_threshold for r in rewards) / n if n else math.nan,
        "response_length": statistics.fmean(lengths) if lengths else 0.0,
        "truncation_ratio": sum(s.truncated for s in ro.samples) / n if n else 0.0,
        "completion_tokens": float(sum(lengths)),
        "samples": float(n),
        "rollouts": float(ro.n_rollouts),
        "failed_rollouts": float(ro.n_failed),
        "failure_rate": ro.failure_rate,
        "untrainable_samples": float(ro.n_untrainable),
        "prefix_mismatch": float(ro.prefix_mismatch),
    }
    out.update({f"failed/{k}": float(v) for k, v in ro.failure_reasons.items()})
    out.update(ro.metrics)
    out.update(tool_metrics(ro.samples))
    return out


def tool_metrics(samples: Sequence[GradedSample]) -> dict[str, float]:
    """Tool use of a step's graded samples: the share that called a tool at all, tool calls
    and policy calls (turns) per sample. An agent that learns to act shows here first."""
    n = len(samples)
    if not n:
        return {}
    return {
        "tools/call_rate": sum(s.tool_calls > 0 for s in samples) / n,
        "tools/calls_per_rollout": sum(s.tool_calls for s in samples) / n,
        "tools/turns_per_rollout": sum(s.model_calls for s in samples) / n,
    }
