"""A trained model against a baseline on the same rows: two eval runs and a paired bootstrap.

The candidate runs first into the run folder, the baseline into its ``baseline/`` subfolder
with the same rows, ``n``, dataset and sampling; ``comparison.json`` then holds the paired
difference of their rewards with its confidence interval. A named run continues both halves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from osmosis_ai.errors import ConfigError
from osmosis_ai.eval._compare import Comparison, compare_records
from osmosis_ai.eval._run import (
    EndpointFactory,
    EvalEvents,
    EvalOptions,
    EvalResult,
    _write_info,
    resolve_model,
    run_eval,
)

__all__ = ["PairedResult", "baseline_for", "pair_results", "run_paired_eval"]


@dataclass
class PairedResult:
    """What :func:`run_paired_eval` returns."""

    candidate: EvalResult
    baseline: EvalResult
    comparison: Comparison


def baseline_for(config_path: str | Path, options: EvalOptions) -> str:
    """The base model of the checkpoint ``options.model`` names (what ``--baseline`` compares
    against); a clear error when the model is not a trained checkpoint."""
    from osmosis_ai.config import load_eval_config
    from osmosis_ai.runs import runs_root_for

    cfg = load_eval_config(Path(config_path))
    spec = options.model or cfg.experiment.model_path
    _, _, _, checkpoint = resolve_model(spec, runs_root_for(cfg))
    if checkpoint is None:
        raise ConfigError(
            f"--baseline compares a trained checkpoint with its base model, but the model "
            f"{spec!r} is not a run under runs/: pass --model RUN[:STEP] (see 'osmosis model "
            "list'), or name the baseline with a second --model"
        )
    base: str = checkpoint["base_model"]
    return base


async def run_paired_eval(
    config_path: str | Path,
    options: EvalOptions,
    baseline_model: str,
    *,
    events: EvalEvents | None = None,
    baseline_events: EvalEvents | None = None,
    endpoint_factory: EndpointFactory | None = None,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedResult:
    """Evaluate ``options.model`` then ``baseline_model`` on the same rows, and compare them."""
    options = dataclasses.replace(options, baseline=baseline_model)
    candidate = await run_eval(
        config_path, options, events=events, endpoint_factory=endpoint_factory
    )
    plan = candidate.plan
    base_dir = plan.run_dir / "baseline"
    base_options = EvalOptions(
        limit=plan.limit,
        n=plan.n,
        concurrency=plan.concurrency,
        model=baseline_model,
        output=base_dir,
        resume=(base_dir / "run.json").is_file(),
        rows=",".join(str(r) for r in plan.rows) if plan.rows is not None else None,
        dataset_file=plan.dataset,
    )
    base_options = dataclasses.replace(
        base_options, retry_failed=options.retry_failed and base_options.resume
    )
    baseline = await run_eval(
        config_path, base_options, events=baseline_events, endpoint_factory=endpoint_factory
    )
    return pair_results(
        candidate, baseline, resamples=resamples, confidence=confidence, seed=seed
    )


def pair_results(
    candidate: EvalResult,
    baseline: EvalResult,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedResult:
    """Compare two finished eval runs of the same rows: write the candidate run's
    ``comparison.json`` and record the baseline in its ``run.json``."""
    plan = candidate.plan
    comparison = compare_records(
        candidate.records,
        baseline.records,
        candidate_name=plan.model,
        baseline_name=baseline.plan.model,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )
    (plan.run_dir / "comparison.json").write_text(
        comparison.model_dump_json(indent=2), encoding="utf-8"
    )
    if candidate.info.baseline != baseline.plan.model:
        candidate.info.baseline = baseline.plan.model
        _write_info(plan.run_dir, candidate.info)
    return PairedResult(candidate=candidate, baseline=baseline, comparison=comparison)
