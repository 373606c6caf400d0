"""Local evaluation: run a rollout over a dataset, journal each result, summarise.

``run_eval`` = the rollout runner + a policy endpoint for the chosen model (the policy gateway
in front of the embedded HF engine, a vLLM URL or a LiteLLM model). Results are appended to an
fsynced journal as they finish, so an interrupted run keeps every finished row and
``resume=True`` continues it; the rollout code and the dataset are fingerprinted so a resume
refuses to mix results of different code or data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from osmosis_ai.errors import ConfigError, OsmosisError
from osmosis_ai.eval._journal import Journal, hash_file, hash_rollout_dir, read_journal
from osmosis_ai.eval._metrics import EvalSummary, summarize
from osmosis_ai.eval._records import EvalRecord, EvalRunInfo
from osmosis_ai.eval._traces import outcome_records, write_trace
from osmosis_ai.rollout._scope import PolicyEndpoint

__all__ = ["EvalEvents", "EvalOptions", "EvalPlan", "EvalResult", "plan_eval", "run_eval"]

logger = logging.getLogger("osmosis")

DEFAULT_CONCURRENCY = 8

EndpointFactory = Callable[
    [str, dict[str, Any]], contextlib.AbstractAsyncContextManager[PolicyEndpoint]
]
"""``factory(model, sampling)`` -> async context manager yielding a PolicyEndpoint."""


@dataclass
class EvalOptions:
    """Command-line overrides of the eval config."""

    limit: int | None = None
    n: int | None = None
    concurrency: int | None = None
    model: str | None = None
    output: Path | None = None
    resume: bool = False


@dataclass
class EvalPlan:
    """Everything an eval run needs, resolved from the config and the options."""

    config_path: Path
    config_name: str
    workspace: Path
    rollout_dir: Path
    entrypoint: Path
    dataset: Path
    model: str
    n: int
    limit: int | None
    offset: int
    concurrency: int
    pass_threshold: float
    workflow_timeout_s: float
    grader_timeout_s: float
    sampling: dict[str, Any]
    run_dir: Path
    resume: bool


@dataclass
class EvalResult:
    """What :func:`run_eval` returns."""

    plan: EvalPlan
    info: EvalRunInfo
    summary: EvalSummary
    records: list[EvalRecord]
    new_records: int
    resumed_records: int
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)


@dataclass
class EvalEvents:
    """Progress callbacks (the CLI draws its progress bar from them)."""

    on_plan: Callable[[EvalPlan], None] = lambda plan: None
    on_start: Callable[[int, int], None] = lambda total, done: None
    on_record: Callable[[EvalRecord], None] = lambda record: None
    on_phase: Callable[[str], None] = lambda phase: None
    """Called with "loading model" before the endpoint starts and "running" once it is up."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def plan_eval(config_path: str | Path, options: EvalOptions) -> EvalPlan:
    """Load the eval config and combine it with the command-line options.

    With ``resume``, settings not given on the command line (model, n, limit) default to the
    interrupted run's, so ``--resume`` alone continues it.
    """
    from osmosis_ai.config import load_eval_config

    path = Path(config_path)
    cfg = load_eval_config(path)
    ev = cfg.evaluation
    missing = cfg.missing_secrets()
    if missing:
        raise ConfigError(
            f"{path}: [secrets] requires {', '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not set in the environment; export "
            "them before running the eval"
        )
    run_dir = _run_dir(Path(cfg.workspace_root), path.stem, options)
    previous = _previous_info(run_dir) if options.resume else None
    n = options.n if options.n is not None else (previous.n if previous else ev.n)
    limit = (
        options.limit if options.limit is not None else (previous.limit if previous else ev.limit)
    )
    model = options.model or (previous.model if previous else cfg.experiment.model_path)
    concurrency = options.concurrency or ev.concurrency or DEFAULT_CONCURRENCY
    for flag, value in (("--n", n), ("--limit", limit), ("--concurrency", concurrency)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1 (got {value})")
    return EvalPlan(
        config_path=path.resolve(),
        config_name=path.stem,
        workspace=Path(cfg.workspace_root),
        rollout_dir=cfg.rollout_dir(),
        entrypoint=cfg.entrypoint_path(),
        dataset=cfg.dataset_path(),
        model=model,
        n=n,
        limit=limit,
        offset=0,
        concurrency=concurrency,
        pass_threshold=float(ev.pass_threshold),
        workflow_timeout_s=float(ev.agent_workflow_timeout_s),
        grader_timeout_s=float(ev.grader_timeout_s),
        sampling=_sampling(cfg),
        run_dir=run_dir,
        resume=options.resume,
    )


def _run_dir(workspace: Path, name: str, options: EvalOptions) -> Path:
    if options.output is not None:
        return options.output
    if options.resume:
        return _latest_run_dir(workspace / ".osmosis" / "evals", name)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return workspace / ".osmosis" / "evals" / f"{name}-{stamp}"


def _previous_info(run_dir: Path) -> EvalRunInfo:
    info_path = run_dir / "run.json"
    if not info_path.is_file():
        raise OsmosisError(
            f"--resume: {run_dir} holds no eval run (no run.json); drop --resume to start a "
            "fresh run there"
        )
    return EvalRunInfo.model_validate_json(info_path.read_text(encoding="utf-8"))


def _sampling(cfg: Any) -> dict[str, Any]:
    params: dict[str, Any] = cfg.sampling.as_params()
    return params


def _latest_run_dir(root: Path, name: str) -> Path:
    runs = sorted(p for p in root.glob(f"{name}-*") if (p / "run.json").is_file())
    if not runs:
        raise OsmosisError(
            f"--resume: no earlier eval run of '{name}' under {root}. Run without --resume, or "
            "pass --output DIR with the run folder to continue"
        )
    return runs[-1]


def _check_resume(info: EvalRunInfo, plan: EvalPlan, rollout_hash: str, dataset_hash: str) -> None:
    where = plan.run_dir
    if info.rollout_hash != rollout_hash:
        raise OsmosisError(
            f"--resume refused: the rollout code in {plan.rollout_dir} changed since the run in "
            f"{where} started. Results of different code must not be mixed; start a fresh run "
            "(drop --resume)"
        )
    if info.dataset_hash != dataset_hash:
        raise OsmosisError(
            f"--resume refused: the dataset {plan.dataset} changed since the run in {where} "
            "started; start a fresh run (drop --resume)"
        )
    for what, old, new in (
        ("model", info.model, plan.model),
        ("n", info.n, plan.n),
        ("limit", info.limit, plan.limit),
    ):
        if old != new:
            raise OsmosisError(
                f"--resume refused: the run in {where} used {what}={old!r}, this command asks "
                f"for {what}={new!r}; pass the same value or start a fresh run"
            )


def _prepare_run_dir(plan: EvalPlan) -> tuple[EvalRunInfo, list[EvalRecord]]:
    from osmosis_ai import __version__

    rollout_hash = hash_rollout_dir(plan.rollout_dir)
    dataset_hash = hash_file(plan.dataset)
    info_path = plan.run_dir / "run.json"
    if plan.resume:
        info = _previous_info(plan.run_dir)
        _check_resume(info, plan, rollout_hash, dataset_hash)
        records = read_journal(plan.run_dir / "results.jsonl", repair=True)
        info.status = "running"
        info.finished_at = None
        return info, records
    if info_path.exists() or (plan.run_dir / "results.jsonl").exists():
        raise OsmosisError(
            f"{plan.run_dir} already holds an eval run; pass --resume to continue it, or "
            "choose another --output folder"
        )
    info = EvalRunInfo(
        config_path=str(plan.config_path),
        config_name=plan.config_name,
        rollout_dir=str(plan.rollout_dir),
        entrypoint=str(plan.entrypoint),
        dataset=str(plan.dataset),
        model=plan.model,
        n=plan.n,
        limit=plan.limit,
        offset=plan.offset,
        pass_threshold=plan.pass_threshold,
        rollout_hash=rollout_hash,
        dataset_hash=dataset_hash,
        started_at=_now(),
        osmosis_version=__version__,
    )
    return info, []


def _write_info(run_dir: Path, info: EvalRunInfo) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / "run.json.tmp"
        tmp.write_text(info.model_dump_json(indent=2), encoding="utf-8")
        tmp.replace(run_dir / "run.json")
    except OSError as exc:
        raise OsmosisError(
            f"cannot write the eval run folder {run_dir}: {exc}. Pass --output with a "
            "writable folder"
        ) from exc


@contextlib.asynccontextmanager
async def default_endpoint(model: str, sampling: dict[str, Any]) -> AsyncIterator[PolicyEndpoint]:
    """The policy gateway in front of the engine ``model`` names (embedded, folder, URL, LiteLLM)."""
    from osmosis_ai.eval._endpoint import open_policy_endpoint

    async with open_policy_endpoint(model, sampling) as endpoint:
        yield endpoint


async def run_eval(
    config_path: str | Path,
    options: EvalOptions | None = None,
    *,
    events: EvalEvents | None = None,
    endpoint_factory: EndpointFactory | None = None,
) -> EvalResult:
    """Evaluate the rollout of an eval config; see the module docstring.

    Cancelling the task (Ctrl-C) stops the in-flight rollouts, keeps every finished record and
    marks the run ``interrupted``; the cancellation is then re-raised.
    """
    from osmosis_ai.data import read_dataset
    from osmosis_ai.rollout import load_entrypoint

    options = options or EvalOptions()
    events = events or EvalEvents()
    plan = plan_eval(config_path, options)
    events.on_plan(plan)
    entry = load_entrypoint(plan.entrypoint)
    info, previous = _prepare_run_dir(plan)
    done = {(r.row_index, r.run_index) for r in previous}
    # A first streaming pass validates and counts the selection, so a bad row stops the eval
    # before any rollout runs; the runner then reads the rows lazily (datasets may be large).
    selected = sum(1 for _ in read_dataset(plan.dataset, limit=plan.limit, offset=plan.offset))
    info.work_items = selected * plan.n

    def pending_rows() -> Iterator[Any]:
        for row in read_dataset(plan.dataset, limit=plan.limit, offset=plan.offset):
            if any((row.row_index, k) not in done for k in range(plan.n)):
                yield row

    _write_info(plan.run_dir, info)
    events.on_start(info.work_items, len(done))
    new: list[EvalRecord] = []
    started = time.perf_counter()
    interrupted = False
    factory = endpoint_factory or default_endpoint
    try:
        with Journal(plan.run_dir / "results.jsonl") as journal:
            if len(done) < info.work_items:
                events.on_phase("loading model")
                async with factory(plan.model, plan.sampling) as endpoint:
                    info.model_load_s = round(time.perf_counter() - started, 3)
                    started = time.perf_counter()
                    events.on_phase("running")
                    async for record in _stream(plan, entry, endpoint, pending_rows(), done):
                        journal.append(record)
                        new.append(record)
                        events.on_record(record)
    except (asyncio.CancelledError, KeyboardInterrupt):
        interrupted = True
        raise
    finally:
        wall = time.perf_counter() - started
        records = previous + new
        summary = summarize(records, pass_threshold=plan.pass_threshold, n=plan.n, wall_time_s=wall)
        finished = {(r.row_index, r.run_index) for r in records}
        complete = not interrupted and len(finished) >= info.work_items
        info.status = "completed" if complete else ("interrupted" if interrupted else "failed")
        info.finished_at = _now()
        info.summary = summary.model_dump(mode="json")
        _write_info(plan.run_dir, info)
        (plan.run_dir / "summary.json").write_text(
            summary.model_dump_json(indent=2), encoding="utf-8"
        )
    return EvalResult(
        plan=plan,
        info=info,
        summary=summary,
        records=records,
        new_records=len(new),
        resumed_records=len(previous),
        interrupted=interrupted,
    )


async def _stream(
    plan: EvalPlan,
    entry: Any,
    endpoint: PolicyEndpoint,
    rows: Iterator[Any],
    done: set[tuple[int, int]],
) -> AsyncIterator[EvalRecord]:
    from osmosis_ai.rollout import RolloutRunner

    runner = RolloutRunner(
        entry,
        endpoint,
        n_samples=plan.n,
        concurrency=plan.concurrency,
        workflow_timeout_s=plan.workflow_timeout_s,
        grader_timeout_s=plan.grader_timeout_s,
        sampling=plan.sampling,
    )
    async with runner:
        async for outcome in runner.run(rows):
            if (outcome.row_index, outcome.sample_index) in done:
                continue  # finished before the interruption; keep the journaled result
            for record, sample in outcome_records(outcome, pass_threshold=plan.pass_threshold):
                record.trace = write_trace(plan.run_dir, record, sample, outcome)
                yield record


def iter_records(run_dir: Path) -> Iterator[EvalRecord]:
    """The records of an eval run folder."""
    yield from read_journal(run_dir / "results.jsonl")
