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
import dataclasses
import logging
import os
import re
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from osmosis_ai.errors import ConfigError, OsmosisError
from osmosis_ai.eval._journal import Journal, hash_file, hash_rollout_dir, read_journal
from osmosis_ai.eval._metrics import EvalSummary, summarize
from osmosis_ai.eval._records import EvalRecord, EvalRunInfo
from osmosis_ai.eval._traces import outcome_records, write_trace
from osmosis_ai.rollout.scope import PolicyEndpoint
from osmosis_ai.safe_io import read_json_object

__all__ = ["EvalEvents", "EvalOptions", "EvalPlan", "EvalResult", "plan_eval", "run_eval"]

logger = logging.getLogger("osmosis")

DEFAULT_CONCURRENCY = 8

EndpointFactory = Callable[..., contextlib.AbstractAsyncContextManager[PolicyEndpoint]]
"""``factory(model, sampling)`` -> async context manager yielding a PolicyEndpoint; called with
``adapter=<PEFT folder>`` too when a trained checkpoint is evaluated."""


@dataclass
class EvalOptions:
    """Command-line overrides of the eval config."""

    limit: int | None = None
    n: int | None = None
    concurrency: int | None = None
    model: str | None = None
    """``embedded``, a model folder, an http(s) URL, a LiteLLM id, or a trained checkpoint
    ``RUN[:STEP]`` (a run under ``<workspace>/runs/``; STEP a number, ``latest`` or ``best``)."""
    output: Path | None = None
    resume: bool = False
    name: str | None = None
    """A named run in ``.osmosis/evals/<name>/``: continued when it exists (unless ``fresh``)."""
    rows: str | None = None
    """Only these dataset rows (0-based file positions): ``"3,7,10-20"``."""
    retry_failed: bool = False
    """When continuing a run, run its failed samples again (their old results are dropped)."""
    fresh: bool = False
    """Start a named run over: its earlier results are deleted."""
    dataset_file: Path | None = None
    """Evaluate this dataset file instead of the config's ``dataset``."""
    baseline: str | None = None
    """Set by :func:`run_paired_eval`: the baseline model that runs after this one (recorded,
    so readers know the run is not over until ``comparison.json`` is written)."""


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
    """What was asked for, as recorded: a model spec, or ``<run folder>:<step>``."""
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
    engine_model: str = ""
    """What the engine loads: ``model``, or the base model of a checkpoint."""
    adapter: Path | None = None
    """The checkpoint's PEFT adapter, served on top of ``engine_model``."""
    rows: list[int] | None = None
    retry_failed: bool = False
    checkpoint: dict[str, Any] | None = None
    baseline: str | None = None
    max_body_bytes: int | None = None
    """The config's ``[gateway] max_body_bytes`` (the limit of the gateway the run starts)."""
    notes: list[str] = field(default_factory=list)
    """Warnings about the plan the CLI prints before the run (e.g. ``[secrets]`` not set for
    a local model)."""

    def __post_init__(self) -> None:
        if not self.engine_model:
            self.engine_model = self.model


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
    workspace = Path(cfg.workspace_root)
    run_dir, resume = _run_dir(workspace, path.stem, options)
    previous = _previous_info(run_dir) if resume else None
    n = options.n if options.n is not None else (previous.n if previous else ev.n)
    limit = (
        options.limit if options.limit is not None else (previous.limit if previous else ev.limit)
    )
    spec = options.model or (previous.model if previous else cfg.experiment.model_path)
    from osmosis_ai.runs import runs_root_for

    model, engine_model, adapter, checkpoint = resolve_model(spec, runs_root_for(cfg))
    notes = _check_secrets(cfg, path, engine_model)
    rows = parse_rows(options.rows) if options.rows is not None else None
    if rows is None and previous is not None and options.rows is None:
        rows = previous.rows
    dataset = cfg.dataset_path()
    if options.dataset_file is not None:
        dataset = options.dataset_file.expanduser().resolve()
        if not dataset.is_file():
            raise ConfigError(
                f"--dataset-file {options.dataset_file} does not exist; pass a .jsonl, .json, "
                ".csv or .parquet file"
            )
    elif previous is not None and Path(previous.dataset) != dataset:
        dataset = Path(previous.dataset)
    concurrency = options.concurrency or ev.concurrency or DEFAULT_CONCURRENCY
    for flag, value in (("--n", n), ("--limit", limit), ("--concurrency", concurrency)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be at least 1 (got {value})")
    if options.retry_failed and not resume:
        raise ConfigError(
            "--retry-failed re-runs the failed samples of an earlier run: use it with --name "
            "NAME (an existing named run) or --resume"
        )
    return EvalPlan(
        config_path=path.resolve(),
        config_name=path.stem,
        workspace=Path(cfg.workspace_root),
        rollout_dir=cfg.rollout_dir(),
        entrypoint=cfg.entrypoint_path(),
        dataset=dataset,
        model=model,
        engine_model=engine_model,
        adapter=adapter,
        checkpoint=checkpoint,
        rows=rows,
        retry_failed=options.retry_failed,
        baseline=options.baseline,
        n=n,
        limit=limit,
        offset=0,
        concurrency=concurrency,
        pass_threshold=float(ev.pass_threshold),
        workflow_timeout_s=float(ev.agent_workflow_timeout_s),
        grader_timeout_s=float(ev.grader_timeout_s),
        sampling=_sampling(cfg),
        run_dir=run_dir,
        resume=resume,
        max_body_bytes=cfg.gateway.max_body_bytes,
        notes=notes,
    )


def _check_secrets(cfg: Any, path: Path, engine_model: str) -> list[str]:
    """``[secrets] required`` names keys the hosted model needs: missing with a hosted model,
    the eval cannot run; with a local model (embedded, a folder, a local server) it can, and
    the missing names are only a warning (returned as plan notes)."""
    missing = cfg.missing_secrets()
    if not missing:
        return []
    names = ", ".join(missing)
    verb = "is" if len(missing) == 1 else "are"
    spec = engine_model.strip()
    local = spec.startswith(("http://", "https://")) or _is_local_model(spec)
    if not local:
        raise ConfigError(
            f"{path}: [secrets] requires {names}, which {verb} not set in the environment; "
            "export them (or pass --secrets-file FILE) before running the eval, or evaluate a "
            "local model (--model embedded)"
        )
    return [
        f"{path}: [secrets] requires {names}, which {verb} not set; the model {spec} is local, "
        "so the eval runs without them (a rollout that reads them may fail)"
    ]


def _is_local_model(spec: str) -> bool:
    from osmosis_ai.serving.preflight import _is_local

    return _is_local(spec)


_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_ROWS_PART = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_rows(text: str) -> list[int]:
    """``"3,7,10-20"`` -> ``[3, 7, 10, 11, ..., 20]`` (sorted, unique, 0-based, ranges inclusive)."""
    rows: set[int] = set()
    parts = [p.strip() for p in text.split(",")]
    for part in parts:
        m = _ROWS_PART.match(part)
        if m is None:
            raise ConfigError(
                f"--rows {text!r}: {part!r} is not a row number or range; use 0-based row "
                "numbers and inclusive ranges, e.g. --rows 3,7,10-20"
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ConfigError(f"--rows {text!r}: range {part!r} runs backwards; write {hi}-{lo}")
        if hi - lo > 10_000_000:
            raise ConfigError(f"--rows {text!r}: range {part!r} is too large")
        rows.update(range(lo, hi + 1))
    return sorted(rows)


def resolve_model(
    spec: str, runs_root: Path
) -> tuple[str, str, Path | None, dict[str, Any] | None]:
    """``(recorded model, engine model, adapter, checkpoint info)`` for a ``--model`` value.

    A trained checkpoint ``RUN[:STEP]`` (a run under ``<workspace>/runs/``) becomes its base
    model plus its adapter, recorded as ``<run folder>:<step>`` so a resume finds the same one;
    anything else is the model itself.
    """
    from osmosis_ai.models import looks_like_checkpoint_ref, resolve_checkpoint
    from osmosis_ai.runs import resolve_model_path

    if not looks_like_checkpoint_ref(spec, runs_root):
        return spec, spec, None, None
    ref = resolve_checkpoint(spec, runs_root)
    if ref.base_model == "unknown":
        raise ConfigError(
            f"checkpoint {ref.label}: the run's base model is unknown (no config.toml in "
            f"{ref.run_dir}); evaluate its adapter with a run folder that has its config"
        )
    info = {
        "run": ref.run_id,
        "step": ref.step,
        "path": str(ref.path),
        "base_model": ref.base_model,
        "reward": ref.reward,
    }
    # A Hub id base model is served from the local Hugging Face cache, as in training.
    return ref.label, resolve_model_path(ref.base_model), ref.adapter_dir, info


def check_run_name(options: EvalOptions) -> None:
    """Refuse a ``--name`` that is not a plain folder name (``../x``, ``a/b``) or comes with
    ``--output``: checked before anything is written (``eval submit`` included)."""
    if options.name is None:
        return
    if options.output is not None:
        raise ConfigError("pass either --name or --output, not both")
    if not _RUN_NAME.fullmatch(options.name):
        raise ConfigError(
            f"--name {options.name!r}: use letters, digits, '-', '_' and '.' (starting with "
            "a letter or digit, at most 100 characters)"
        )


def check_run_folder(config_path: str | Path, options: EvalOptions) -> None:
    """Refuse, before anything runs or is submitted, the options' run folder when it exists and
    holds a link or special file (see :func:`_refuse_planted`)."""
    from osmosis_ai.config import load_eval_config

    path = Path(config_path)
    workspace = Path(load_eval_config(path).workspace_root)
    _refuse_planted(_pick_run_dir(workspace, path.stem, options)[0])


def _refuse_planted(run_dir: Path) -> None:
    """An eval folder written into again (``--output``, ``--name``, ``--resume``) may be copied
    or crafted: a link there (``run.json.tmp`` to a file of yours) would be written through and
    a FIFO would block. Refused naming what to remove."""
    from osmosis_ai.safe_io import planted_entries

    planted = planted_entries(run_dir, skip=("artifacts",)) if run_dir.is_dir() else []
    if planted:
        raise ConfigError(
            f"eval folder {run_dir} holds {', '.join(planted)}, a link or special file "
            "(FIFO, socket, device); the eval would write through it. Osmosis writes only "
            "plain files and folders there: remove them (a crafted or altered folder), or "
            "run into a new folder"
        )


def _run_dir(workspace: Path, name: str, options: EvalOptions) -> tuple[Path, bool]:
    """The run folder (checked for planted entries) and whether the run continues an earlier
    one; ``--fresh`` empties a named one."""
    run_dir, resume = _pick_run_dir(workspace, name, options)
    _refuse_planted(run_dir)
    if options.name is not None and options.fresh and (run_dir / "run.json").is_file():
        _discard_run(run_dir)
        resume = options.resume
    return run_dir, resume


def _pick_run_dir(workspace: Path, name: str, options: EvalOptions) -> tuple[Path, bool]:
    """The run folder and whether the run continues an earlier one (nothing written)."""
    root = workspace / ".osmosis" / "evals"
    if options.name is not None:
        check_run_name(options)
        run_dir = root / options.name
        return run_dir, (run_dir / "run.json").is_file() or options.resume
    if options.fresh:
        raise ConfigError("--fresh starts a named run over: use it with --name NAME")
    if options.output is not None:
        return options.output, options.resume
    if options.resume:
        return _latest_run_dir(root, name), True
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return root / f"{name}-{stamp}", False


def _discard_run(run_dir: Path) -> None:
    """Delete an eval run's files (only the ones an eval writes) for ``--fresh``."""
    for child in ("results.jsonl", "run.json", "summary.json", "comparison.json"):
        (run_dir / child).unlink(missing_ok=True)
    for child in ("traces", "baseline"):
        shutil.rmtree(run_dir / child, ignore_errors=True)


def _previous_info(run_dir: Path) -> EvalRunInfo:
    info_path = run_dir / "run.json"
    if not info_path.exists() and not info_path.is_symlink():
        raise OsmosisError(
            f"--resume: {run_dir} holds no eval run (no run.json); drop --resume to start a "
            "fresh run there"
        )
    data = read_json_object(info_path, under=run_dir.parent)  # UnreadableFileError names it
    try:
        return EvalRunInfo.model_validate(data)
    except ValidationError as exc:
        first = str(exc).splitlines()[0]
        raise OsmosisError(
            f"--resume: {info_path} is not an eval run record ({first}); drop --resume to start "
            "a fresh run"
        ) from None


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
        ("rows", info.rows, plan.rows),
    ):
        if old != new:
            raise OsmosisError(
                f"--resume refused: the run in {where} used {what}={old!r}, this command asks "
                f"for {what}={new!r}; pass the same value or start a fresh run (--fresh with "
                "--name)"
            )


def _prepare_run_dir(plan: EvalPlan) -> tuple[EvalRunInfo, list[EvalRecord]]:
    from osmosis_ai import __version__
    from osmosis_ai.runs._process import describe_process

    rollout_hash = hash_rollout_dir(plan.rollout_dir)
    dataset_hash = hash_file(plan.dataset)
    info_path = plan.run_dir / "run.json"
    if plan.resume:
        info = _previous_info(plan.run_dir)
        _check_resume(info, plan, rollout_hash, dataset_hash)
        records = read_journal(plan.run_dir / "results.jsonl", repair=True)
        if plan.retry_failed:
            records = _drop_failed(plan.run_dir / "results.jsonl", records)
        info.status = "running"
        info.finished_at = None
        info.pid = os.getpid()
        info.worker = describe_process()
        info.baseline = plan.baseline or info.baseline
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
        engine_model=plan.engine_model,
        checkpoint=plan.checkpoint,
        rows=plan.rows,
        pid=os.getpid(),
        worker=describe_process(),
        baseline=plan.baseline,
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


def _drop_failed(journal: Path, records: list[EvalRecord]) -> list[EvalRecord]:
    """Remove every sample of the work items that had a failure; rewrite the journal atomically.

    The whole (row, run) item goes, so it is run again as a unit.
    """
    failed = {(r.row_index, r.run_index) for r in records if r.status == "failed"}
    if not failed:
        return records
    kept = [r for r in records if (r.row_index, r.run_index) not in failed]
    tmp = journal.with_name(journal.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in kept:
            fh.write(r.model_dump_json() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(journal)
    return kept


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
async def default_endpoint(
    model: str, sampling: dict[str, Any], *, adapter: Path | None = None,
    max_body_bytes: int | None = None,
) -> AsyncIterator[PolicyEndpoint]:
    """The policy gateway in front of the engine ``model`` names (embedded, folder, URL, LiteLLM),
    serving the LoRA ``adapter`` on top of it when one is given."""
    from osmosis_ai.eval._endpoint import open_policy_endpoint

    async with open_policy_endpoint(
        model, sampling, adapter=adapter, max_body_bytes=max_body_bytes
    ) as endpoint:
        yield endpoint


def _select(plan: EvalPlan) -> Iterator[Any]:
    """The rows to evaluate: ``--rows`` (keeping their file positions as row indices) or the
    first ``limit`` rows."""
    from osmosis_ai.data import read_dataset

    if plan.rows is None:
        yield from read_dataset(plan.dataset, limit=plan.limit, offset=plan.offset)
        return
    wanted = set(plan.rows)
    taken = 0
    last = -1
    for row in read_dataset(plan.dataset):
        last = row.source_row_index
        if row.source_row_index in wanted:
            yield dataclasses.replace(row, row_index=row.source_row_index)
            taken += 1
            if plan.limit is not None and taken >= plan.limit:
                return
        if row.source_row_index >= plan.rows[-1]:
            return
    raise ConfigError(
        f"--rows asks for row {plan.rows[-1]}, but {plan.dataset} has {last + 1} rows "
        f"(0-{last}); rows are 0-based"
    )


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
    from osmosis_ai.rollout.running import load_entrypoint

    options = options or EvalOptions()
    events = events or EvalEvents()
    plan = plan_eval(config_path, options)
    events.on_plan(plan)
    entry = load_entrypoint(plan.entrypoint)
    if endpoint_factory is None:
        from osmosis_ai.serving.preflight import check_model_reachable

        # A hosted model without its key, or a server that is down: one line, nothing written.
        check_model_reachable(plan.engine_model)
    info, previous = _prepare_run_dir(plan)
    done = {(r.row_index, r.run_index) for r in previous}
    # A first streaming pass validates and counts the selection, so a bad row stops the eval
    # before any rollout runs; the runner then reads the rows lazily (datasets may be large).
    selected = sum(1 for _ in _select(plan))
    info.work_items = selected * plan.n

    def pending_rows() -> Iterator[Any]:
        for row in _select(plan):
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
                extra = _endpoint_options(plan, custom_factory=endpoint_factory is not None)
                async with factory(plan.engine_model, plan.sampling, **extra) as endpoint:
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
        records = previous + new
        summary = _close_run(plan, info, records, time.perf_counter() - started, interrupted)
    return EvalResult(
        plan=plan,
        info=info,
        summary=summary,
        records=records,
        new_records=len(new),
        resumed_records=len(previous),
        interrupted=interrupted,
    )


def _endpoint_options(plan: EvalPlan, *, custom_factory: bool) -> dict[str, Any]:
    """Keyword arguments for the endpoint factory: the adapter to serve, and the gateway's
    body limit (test factories take no gateway limit)."""
    extra: dict[str, Any] = {"adapter": plan.adapter} if plan.adapter else {}
    if not custom_factory:
        extra["max_body_bytes"] = plan.max_body_bytes
    return extra


def _close_run(
    plan: EvalPlan, info: EvalRunInfo, records: list[EvalRecord], wall: float, interrupted: bool
) -> EvalSummary:
    """Summarize ``records`` and write the run's final ``info.json`` and ``summary.json``."""
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
    return summary


async def _stream(
    plan: EvalPlan,
    entry: Any,
    endpoint: PolicyEndpoint,
    rows: Iterator[Any],
    done: set[tuple[int, int]],
) -> AsyncIterator[EvalRecord]:
    from osmosis_ai.rollout.running import RolloutRunner

    runner = RolloutRunner(
        entry,
        endpoint,
        n_samples=plan.n,
        concurrency=plan.concurrency,
        workflow_timeout_s=plan.workflow_timeout_s,
        grader_timeout_s=plan.grader_timeout_s,
        sampling=plan.sampling,
        artifacts_root=plan.run_dir / "artifacts",  # ctx.artifacts_dir: one folder per rollout
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
