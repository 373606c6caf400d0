"""A training run's ``[heldout]`` comparison: its last checkpoint against the base model, and
against the warm start's checkpoint when the run had one.

The same paired evaluation as ``osmosis eval run --model RUN --baseline`` (one eval run per
model on the same rows, a paired bootstrap of the reward difference), run by the training
worker after the last step; with a warm start, ``RUN:warm`` is evaluated on the same rows too,
so the report separates what the demonstrations taught from what RL added. The eval runs land
in the run folder's ``heldout/`` (the base model in ``baseline/``, the warm start in ``warm/``)
and the report in ``heldout.json``, which the end screen, ``train info`` and the dashboard read.

With several named held-out files (``[heldout.datasets]``), each file is evaluated the same way
in ``heldout/<name>/``; ``heldout.json`` holds the first file's report at its top level (what a
reader of one-file reports finds) and every further file's report, named, in ``sets``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from osmosis_ai.errors import ConfigError
from osmosis_ai.eval._compare import Comparison, compare_records
from osmosis_ai.eval._paired import PairedResult, baseline_for, pair_results
from osmosis_ai.eval._run import EvalEvents, EvalOptions, EvalResult, default_endpoint, run_eval
from osmosis_ai.rollout.scope import PolicyEndpoint
from osmosis_ai.runs import HELDOUT_FILE
from osmosis_ai.safe_io import read_json_object

__all__ = [
    "HeldOutModel",
    "HeldOutPlan",
    "HeldOutReport",
    "HeldOutSet",
    "plan_heldout",
    "read_heldout",
    "run_heldout",
    "warm_checkpoint",
]

WARM_CHECKPOINT = "warm"
"""The warm start's checkpoint folder under ``<run>/checkpoints/``, addressed as ``RUN:warm``."""


class HeldOutModel(BaseModel):
    """One model's result on the held-out rows."""

    role: Literal["base", "warm", "trained"] = Field(
        description="base: the model before training; warm: after the warm start ([warm_start]) "
        "only; trained: the run's last checkpoint."
    )
    model: str = Field(description="What was evaluated (a model, or a checkpoint RUN:STEP).")
    samples: int = Field(description="Samples graded or failed (skipped ones left out).")
    pass_rate: float | None
    reward_mean: float | None
    tool_call_rate: float | None = Field(description="Share of samples with a tool call.")
    tool_calls_per_rollout: float | None
    turns_per_rollout: float | None = Field(description="Mean policy calls per sample.")


class HeldOutReport(Comparison):
    """``heldout.json``: the trained checkpoint against its base model (the inherited fields:
    the paired reward difference, as ``eval run --baseline`` reports it), each model's pass and
    tool-use rates, and paired pass-rate differences against the base model and the warm start."""

    models: list[HeldOutModel] = Field(
        default_factory=list, description="base, warm (when the run had a warm start), trained."
    )
    pass_vs_base: Comparison | None = Field(
        default=None, description="Trained minus base, paired on each row's pass rate."
    )
    pass_vs_warm: Comparison | None = Field(
        default=None, description="Trained minus the warm start, paired on each row's pass rate."
    )
    name: str | None = Field(
        default=None, description="The held-out set's name ([heldout.datasets]); None for the "
        "one-file form.",
    )
    dataset: str | None = Field(default=None, description="The held-out file's name.")
    sets: list[HeldOutReport] = Field(
        default_factory=list,
        description="The reports of the further held-out files ([heldout.datasets] after the "
        "first, whose report is this one's top level), in the config's order.",
    )

    def result(self, role: str) -> HeldOutModel | None:
        """The result of ``role`` (base, warm or trained), if it ran."""
        return next((m for m in self.models if m.role == role), None)

    def each_set(self) -> list[HeldOutReport]:
        """Every held-out file's report in order: this one, then ``sets``."""
        return [self, *self.sets]


@dataclass(frozen=True)
class HeldOutSet:
    """One held-out file: its name (``None`` in the one-file form) and path (``None``: the eval
    config's dataset)."""

    name: str | None
    dataset: Path | None

    def output(self, run_path: Path) -> Path:
        """Where its eval runs go: ``heldout/`` (one file) or ``heldout/<name>/``."""
        out = run_path / "heldout"
        return out if self.name is None else out / self.name


@dataclass(frozen=True)
class HeldOutPlan:
    """What the ``[heldout]`` section of a training config resolves to."""

    eval_config: Path
    sets: tuple[HeldOutSet, ...]
    n: int
    concurrency: int
    """Rollouts in flight at once: the eval config's ``[evaluation] concurrency``, else as many
    as one training step ran. The models are the run's own, served in process, so the step's
    batch fits. ``eval run``'s default of 8 decodes in smaller batches: the quick start's
    trained adapter took 115 s on its 24 rows at 8, 88-99 s at 32 (fp32; 54 s at 32 in bf16,
    the precision it trained in; docs/heldout_concurrency.jsonl)."""

    @property
    def dataset(self) -> Path | None:
        """The first held-out file (the only one in the one-file form)."""
        return self.sets[0].dataset


def plan_heldout(config: Any) -> HeldOutPlan | None:
    """Resolve and check ``[heldout]`` of a training config (``None`` when the section is
    absent); a :class:`ConfigError` names the field and the fix, so ``train submit`` fails
    before any training rather than after it."""
    section = config.heldout
    if section is None:
        return None
    from osmosis_ai.config import load_eval_config
    from osmosis_ai.runs import runs_root_for

    where = f"{config._where()}: [heldout]"
    eval_path = config.resolve_path(section.eval_config)
    if not eval_path.is_file():
        raise ConfigError(
            f"{where}.eval_config = {section.eval_config!r}: no such file ({eval_path}); name "
            "an eval config such as configs/eval/<name>.toml"
        )
    eval_config = load_eval_config(eval_path)
    sets = tuple(
        _checked_set(config, where, name, path) for name, path in section.named_datasets()
    )
    if runs_root_for(config).resolve() != runs_root_for(eval_config).resolve():
        raise ConfigError(
            f"{where}: the run's checkpoints go to {runs_root_for(config)} ([checkpoints] "
            f"output_dir), where the eval config cannot find them ({runs_root_for(eval_config)}); "
            "drop output_dir or run 'osmosis eval run --model RUN --baseline' yourself"
        )
    t = config.training
    concurrency = (
        eval_config.evaluation.concurrency
        or t.step_concurrency
    )
    return HeldOutPlan(eval_config=eval_path, sets=sets, n=section.n, concurrency=concurrency)


def _checked_set(config: Any, where: str, name: str | None, path: str | None) -> HeldOutSet:
    """One held-out file, checked: it exists and is not the training dataset."""
    field = "dataset" if name is None else f"datasets.{name}"
    dataset = config.resolve_path(path) if path else None
    if dataset is not None and not dataset.is_file():
        raise ConfigError(
            f"{where}.{field} = {path!r}: no such file ({dataset}); give the "
            "held-out rows' file relative to the workspace root"
        )
    if dataset is not None and dataset.resolve() == config.dataset_path().resolve():
        raise ConfigError(
            f"{where}.{field} is the training dataset: a comparison on rows the run trained on "
            "says nothing about new rows; give a file of rows left out of training"
        )
    return HeldOutSet(name=name, dataset=dataset)


def warm_checkpoint(run_path: Path) -> Path | None:
    """The run's warm-start checkpoint folder, when the run had a warm start."""
    path = run_path / "checkpoints" / WARM_CHECKPOINT
    return path if (path / "adapter").is_dir() else None


def _model_result(role: Any, result: EvalResult) -> HeldOutModel:
    s = result.summary
    return HeldOutModel(
        role=role, model=result.plan.model, samples=s.success + s.failed,
        pass_rate=s.pass_rate, reward_mean=s.reward.mean, tool_call_rate=s.tool_call_rate,
        tool_calls_per_rollout=s.tool_calls_per_rollout, turns_per_rollout=s.turns_per_rollout,
    )


async def run_heldout(
    plan: HeldOutPlan,
    run_path: Path,
    run_id: str,
    *,
    events: EvalEvents | None = None,
    baseline_events: EvalEvents | None = None,
    warm_events: EvalEvents | None = None,
    on_set: Callable[[HeldOutSet], None] | None = None,
) -> HeldOutReport:
    """Evaluate run ``run_id``'s latest checkpoint, its base model and (when the run had a warm
    start) its warm checkpoint on each held-out file; write ``heldout.json`` into ``run_path``
    and return the report (the first file's, with the others in ``sets``). ``on_set`` is
    called for each file before the evals start.

    Each model is loaded once and runs every file at once on that one engine, which batches
    the files' rollouts together, so one file's last long rollouts no longer leave the batch
    nearly empty (BENCHMARKS.md, ``heldout_files``).
    """
    for held in plan.sets:
        if on_set is not None:
            on_set(held)
    base_model = baseline_for(plan.eval_config, EvalOptions(model=run_id))
    outs = [held.output(run_path) for held in plan.sets]
    trained = await _each_file(
        plan,
        [_options(plan, held, out, run_id, baseline=base_model)
         for held, out in zip(plan.sets, outs, strict=True)],
        events,
    )
    base = await _each_file(
        plan,
        [_options(plan, held, out / "baseline", base_model, resume=True)
         for held, out in zip(plan.sets, outs, strict=True)],
        baseline_events,
    )
    warm: list[EvalResult | None] = [None] * len(plan.sets)
    if warm_checkpoint(run_path) is not None:
        warm = list(await _each_file(
            plan,
            [_options(plan, held, out / "warm", f"{run_id}:{WARM_CHECKPOINT}", resume=True)
             for held, out in zip(plan.sets, outs, strict=True)],
            warm_events,
        ))
    reports = [
        _report(held, pair_results(t, b), w)
        for held, t, b, w in zip(plan.sets, trained, base, warm, strict=True)
    ]
    report = reports[0].model_copy(update={"sets": reports[1:]})
    (run_path / HELDOUT_FILE).write_text(report.model_dump_json(indent=2), encoding="utf-8")
    return report


def _options(
    plan: HeldOutPlan, held: HeldOutSet, out: Path, model: str, *, baseline: str | None = None,
    resume: bool = False,
) -> EvalOptions:
    """One model on one held-out file, into ``out`` (continued if ``resume`` and the folder
    holds a run); the trained model's run records its ``baseline``."""
    return EvalOptions(
        model=model, n=plan.n, output=out, dataset_file=held.dataset,
        resume=resume and (out / "run.json").is_file(), concurrency=plan.concurrency,
        baseline=baseline,
    )


async def _each_file(
    plan: HeldOutPlan, options: list[EvalOptions], events: EvalEvents | None
) -> list[EvalResult]:
    """One model on every held-out file at once, all on one endpoint (``options`` differ only in
    the file and the output folder). The first failure cancels the other files' evals and is
    raised as it is (not wrapped in an exception group)."""
    shared = _SharedEndpoint()
    try:
        async with shared, asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(run_eval(
                    plan.eval_config, o, events=events, endpoint_factory=shared.open
                ))
                for o in options
            ]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


class _SharedEndpoint:
    """An endpoint factory for several eval runs of one model: the first run that needs the
    model starts its endpoint, the others get the same one; it stops when the block ends."""

    def __init__(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()
        self._endpoint: PolicyEndpoint | None = None

    async def __aenter__(self) -> _SharedEndpoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    @contextlib.asynccontextmanager
    async def open(
        self, model: str, sampling: dict[str, Any], *, adapter: Path | None = None
    ) -> AsyncIterator[PolicyEndpoint]:
        async with self._lock:
            if self._endpoint is None:
                from osmosis_ai.serving.preflight import check_model_reachable

                check_model_reachable(model)
                self._endpoint = await self._stack.enter_async_context(
                    default_endpoint(model, sampling, adapter=adapter)
                )
        yield self._endpoint


def _report(held: HeldOutSet, paired: PairedResult, warm: EvalResult | None) -> HeldOutReport:
    """One held-out file's report from its three eval runs."""
    trained_name = paired.candidate.plan.model

    def by_pass(other: EvalResult) -> Comparison:
        return compare_records(
            paired.candidate.records, other.records, candidate_name=trained_name,
            baseline_name=other.plan.model, measure="pass",
        )

    models = [_model_result("base", paired.baseline)]
    if warm is not None:
        models.append(_model_result("warm", warm))
    models.append(_model_result("trained", paired.candidate))
    return HeldOutReport(
        **paired.comparison.model_dump(),
        models=models,
        pass_vs_base=by_pass(paired.baseline),
        pass_vs_warm=by_pass(warm) if warm is not None else None,
        name=held.name,
        dataset=held.dataset.name if held.dataset is not None else None,
    )


def read_heldout(run_path: Path) -> HeldOutReport | None:
    """The run's held-out report, or ``None`` when none ran (or its file is unreadable). A
    report of an older run (the reward comparison alone) reads with no models."""
    path = run_path / HELDOUT_FILE
    try:  # safe_io: a regular file in the run, size, depth and integer caps
        data = read_json_object(path, under=Path(run_path).parent)
        return HeldOutReport.model_validate(data)
    except ValueError:  # UnreadableFileError and pydantic's ValidationError
        return None
