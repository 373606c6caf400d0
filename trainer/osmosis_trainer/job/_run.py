"""``run_training``: everything a training run needs, built from a training config.

It loads the dataset and the rollout, loads the base model once (the HF engine serves a private
copy, so generation never sees half-updated weights), wraps the training copy with LoRA, serves
the policy through the gateway and runs the :class:`~osmosis_trainer.loop.Trainer`. It sits above the rooms it wires together
(``loop``, ``warm_start``, ``distributed``, ``server_workflow``), which never import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osmosis_ai.errors import TrainingError
from osmosis_ai.runs import RunDir, read_status
from osmosis_trainer.job._cluster import ClusterJob
from osmosis_trainer.job._engines import local_engine
from osmosis_trainer.job._plan import JobPlan, needs_entrypoint, plan_job
from osmosis_trainer.loop import (
    GatewayRolloutSource,
    LoopSettings,
    StepReport,
    TraceSampler,
    Trainer,
    TrainResult,
    attach_lora,
    resolve_settings,
    token_texts,
)
from osmosis_trainer.trackers import open_trackers

if TYPE_CHECKING:
    from peft import PeftModel

    from osmosis_ai.config import SamplingConfig, TrainingConfig
    from osmosis_ai.rollout.running import Entrypoint, RolloutRunner
    from osmosis_ai.serving import InferenceEngine
    from osmosis_ai.serving.gateway import PolicyGateway
    from osmosis_trainer.loop import RolloutSource
    from osmosis_trainer.models import LoadedModel

__all__ = ["run_training"]

logger = logging.getLogger("osmosis")

_MAX_VALIDATION_ROWS = 32


async def run_training(
    config: TrainingConfig,
    run: RunDir,
    *,
    plan: JobPlan | None = None,
    resume: bool | Path = False,
    on_report: Callable[[StepReport], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> TrainResult:
    """Run a whole training job in this process and return how it ended.

    Args:
        config: the loaded training config.
        run: the run folder (metrics, checkpoints, status).
        plan: a :func:`plan_job` result, if already computed.
        resume: ``True`` to continue from the run's latest checkpoint, or a checkpoint path.
        on_report: called after every step and validation.
        on_phase: called with a short description as setup progresses.
    """

    def phase(text: str) -> None:
        run.update_status(status="running", phase="setup", activity=text)
        if on_phase is not None:
            on_phase(text)

    try:
        return await _run(config, run, plan, resume, on_report, phase)
    except BaseException as exc:
        status = read_status(run.path) or {}
        if status.get("status") not in ("failed", "stopped", "killed", "finished"):
            stopped = isinstance(exc, KeyboardInterrupt | asyncio.CancelledError)
            run.update_status(
                status="stopped" if stopped else "failed",
                phase="cleanup" if stopped else "error", activity=None,
                error=f"{type(exc).__name__}: {exc}",
            )
        raise


@dataclass
class _Parts:
    """What a job is made of, built by :func:`_prepare` before anything is started."""

    plan: JobPlan
    entry: Entrypoint | None
    """The rollout's entrypoint; ``None`` for a ``[remote]`` run until its gateway is up."""
    grader: tuple[type[Any], Any] | None
    """``[remote]`` runs scored by the entrypoint's Grader (``reward = "grader"``/``"auto"``)."""
    loaded: LoadedModel
    settings: LoopSettings
    sampling: SamplingConfig
    """``[sampling]`` with its length resolved (the gateway enforces it)."""
    dtype: str
    """The base weights' dtype, ``[training] dtype`` resolved on this machine."""


def _prepare(config: TrainingConfig, plan: JobPlan, phase: Callable[[str], None]) -> _Parts:
    """Load the rollout (failing fast, before the model) and the model; resolve settings."""
    from osmosis_ai.rollout.running import load_entrypoint, load_remote_grader
    from osmosis_trainer.models import load_model, training_dtype

    entry = None if config.remote is not None else load_entrypoint(plan.entrypoint)
    # "auto" without a Grader is a ConfigError naming both fixes.
    grader = load_remote_grader(config) if needs_entrypoint(config) and entry is None else None
    dtype = training_dtype(config.training.dtype, plan.device)
    phase(f"loading {config.experiment.model_path} on {plan.device} in {dtype}")
    loaded = load_model(config.experiment.model_path, device=plan.device, dtype=dtype)
    settings = resolve_settings(
        config, n_rows=len(plan.rows), pad_id=int(loaded.tokenizer.pad_token_id),
        device=plan.device, dtype=dtype,
    )
    sampling = config.sampling.model_copy(update={"max_tokens": settings.max_completion_length})
    return _Parts(plan, entry, grader, loaded, settings, sampling, dtype)


@contextlib.contextmanager
def _job_environment(env: dict[str, str]) -> Iterator[None]:
    """``[env]`` for the job's duration: in-process rollouts read it from ``os.environ``."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _runner(
    config: TrainingConfig,
    run: RunDir,
    parts: _Parts,
    entry: Entrypoint,
    gateway: PolicyGateway,
    cluster: ClusterJob | None,
    n: int,
) -> RolloutRunner:
    """A rollout runner of ``n`` samples per row (the source asks for other ``n`` at eval)."""
    from osmosis_ai.rollout.running import RolloutRunner

    t = config.training
    return RolloutRunner(
        entry, gateway, n_samples=n, concurrency=t.step_concurrency,
        workflow_timeout_s=t.agent_workflow_timeout_s, grader_timeout_s=t.grader_timeout_s,
        sampling=parts.sampling.as_params(), artifacts_root=run.artifacts,
        backend=cluster.backend(entry, gateway) if cluster is not None else "local",
    )


async def _run(
    config: TrainingConfig,
    run: RunDir,
    plan: JobPlan | None,
    resume: bool | Path,
    on_report: Callable[[StepReport], None] | None,
    phase: Callable[[str], None],
) -> TrainResult:
    """Prepare the parts, start the engine and the gateway, then wire and run the trainer."""
    with _job_environment(config.env):
        parts = _prepare(config, plan or plan_job(config), phase)
        # What the run trained in: "auto" resolves per machine, and results differ by dtype.
        run.update_status(dtype=parts.dtype)
        cluster, engine = await _start_engine(
            config, run, parts.plan, parts.loaded, parts.settings, phase
        )
        try:
            return await _serve_and_train(
                config, run, parts, cluster, engine, resume, on_report, phase
            )
        finally:
            await engine.close()
            if cluster is not None:
                cluster.close()


async def _serve_and_train(
    config: TrainingConfig,
    run: RunDir,
    parts: _Parts,
    cluster: ClusterJob | None,
    engine: InferenceEngine,
    resume: bool | Path,
    on_report: Callable[[StepReport], None] | None,
    phase: Callable[[str], None],
) -> TrainResult:
    from osmosis_ai.serving import new_api_key
    from osmosis_ai.serving.gateway import PolicyGateway

    lora = config.lora
    model = attach_lora(
        parts.loaded.model, r=lora.r, alpha=lora.alpha, dropout=lora.dropout,
        target_modules=lora.target_modules, seed=config.training.seed,
    )
    host = config.cluster.gateway_host if cluster is not None else "127.0.0.1"
    # A key per run: the rollouts get it through gateway.route(), so nothing else (another
    # process on the machine, a host on the cluster network) can drive the policy.
    async with PolicyGateway(
        engine, sampling=parts.sampling, host=host, api_key=new_api_key(),
        max_body_bytes=config.gateway.max_body_bytes,
    ) as gateway:
        entry = parts.entry
        if entry is None:  # [remote]: mounts /v1/rollout/completed on the gateway
            from osmosis_trainer.server_workflow import remote_entrypoint_for

            entry = remote_entrypoint_for(
                config, gateway, grader_cls=parts.grader[0] if parts.grader else None,
                grader_config=parts.grader[1] if parts.grader else None,
            )
        make_runner = functools.partial(_runner, config, run, parts, entry, gateway, cluster)
        source = (cluster.source if cluster is not None else GatewayRolloutSource)(
            make_runner(config.training.n_samples_per_prompt), gateway,
            make_runner=make_runner, max_prompt_length=config.training.max_prompt_length,
        )
        trainer = _make_trainer(
            config, run, parts.plan, model, source, parts.settings, parts.loaded, on_report
        )
        try:
            return await _train(
                trainer, config, run, parts.plan, resume, parts.loaded, on_report, phase
            )
        finally:
            await source.aclose()


async def _start_engine(
    config: TrainingConfig,
    run: RunDir,
    plan: JobPlan,
    loaded: LoadedModel,
    settings: LoopSettings,
    phase: Callable[[str], None],
) -> tuple[ClusterJob | None, InferenceEngine]:
    """Join the Ray cluster (``[cluster]``: this process is the driver; workflows, and engines
    when asked, run on actors) and start the inference engine."""
    cluster = ClusterJob(config, run) if config.cluster.address is not None else None
    if cluster is not None:
        phase(f"joining the Ray cluster at {config.cluster.address}")
        cluster.connect()
    phase(f"starting the {plan.engine} engine")
    # The HF engine copies the base model before LoRA is attached.
    engine = (
        await cluster.engine_pool(settings.max_completion_length, loaded)
        if cluster is not None and config.cluster.engines
        else local_engine(config, loaded, plan.device, run, settings.max_completion_length)
    )
    return cluster, engine


def _make_trainer(
    config: TrainingConfig,
    run: RunDir,
    plan: JobPlan,
    model: PeftModel,
    source: RolloutSource,
    settings: LoopSettings,
    loaded: LoadedModel,
    on_report: Callable[[StepReport], None] | None,
) -> Trainer:
    n_val = config.evaluation.limit or min(len(plan.rows), _MAX_VALIDATION_ROWS)
    return Trainer(
        model, source, plan.rows, settings, run, device=plan.device,
        eval_rows=plan.rows[:n_val] if config.checkpoints.eval_interval else None,
        on_report=on_report,
        tensorboard="tensorboard" in config.logging.report_to,
        traces=TraceSampler(
            run.path, config.logging.trace_samples_per_step,
            decode=token_texts(loaded.tokenizer),
            max_tokens=config.logging.trace_max_tokens,
        ),
        trackers=open_trackers(
            config.logging.report_to, run.path, run.run_id,
            project=config.logging.project or run.name,
            config=config.model_dump(mode="json", exclude={"env"}),
        ),
    )


async def _train(
    trainer: Trainer,
    config: TrainingConfig,
    run: RunDir,
    plan: JobPlan,
    resume: bool | Path,
    loaded: LoadedModel,
    on_report: Callable[[StepReport], None] | None,
    phase: Callable[[str], None],
) -> TrainResult:
    """Resume (when asked), run the warm start (unless a resumed checkpoint is past it), train."""
    resumed = False
    if resume:
        phase("resuming")
        resumed = await _resume(trainer, run, resume, config.warm_start is not None)
    if config.warm_start is not None and not resumed:
        from osmosis_trainer.warm_start import run_warm_start

        phase("warm start")
        await run_warm_start(
            trainer, config, plan.demonstrations, loaded.tokenizer,
            bad_rows=plan.bad_demonstrations, on_report=on_report,
        )
        from osmosis_ai.serving import return_freed_memory

        # The demonstrations' activations are free: RL starts from a heap handed back.
        await asyncio.to_thread(return_freed_memory)
    phase("training")
    # What is alive now (model, tokenizer, engine, servers) lives for the whole run. Frozen,
    # the cyclic collector stops walking it at each full collection: the update forces two
    # per step (return_freed_memory), 0.45 s each on the embedded model without the freeze.
    gc.collect()
    gc.freeze()
    try:
        return await trainer.train()
    finally:
        gc.unfreeze()


async def _resume(trainer: Trainer, run: RunDir, resume: bool | Path, warm: bool) -> bool:
    """Restore the given checkpoint, else the latest step, else the warm start's; ``False``
    when a run with ``[warm_start]`` died before its phase ended (the phase is redone)."""
    from osmosis_trainer.checkpoints import warm_checkpoint

    path = resume if isinstance(resume, Path) else None
    if await trainer.resume(path):
        return True
    if path is None and warm:
        found = warm_checkpoint(run.checkpoints)
        if found is None:
            logger.info("no checkpoint yet: the warm start runs again")
            return False
        return await trainer.resume(found)
    if path is None:
        raise TrainingError(f"{run.path}: nothing to resume (no checkpoint yet)")
    return False

