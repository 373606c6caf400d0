"""A training run's ``[heldout]`` comparison: its last checkpoint against the base model.

The same paired evaluation as ``osmosis eval run --model RUN --baseline`` (one eval run per
model on the same rows, a paired bootstrap of the reward difference), run by the training
worker after the last step. The eval runs land in the run folder's ``heldout/`` and the
comparison in ``heldout.json``, which the end screen, ``train info`` and the dashboard read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from osmosis_ai.errors import ConfigError
from osmosis_ai.eval._compare import Comparison
from osmosis_ai.eval._paired import baseline_for, run_paired_eval
from osmosis_ai.eval._run import EvalEvents, EvalOptions
from osmosis_ai.runs import HELDOUT_FILE

__all__ = ["HeldOutPlan", "plan_heldout", "read_heldout", "run_heldout"]



@dataclass(frozen=True)
class HeldOutPlan:
    """What the ``[heldout]`` section of a training config resolves to."""

    eval_config: Path
    dataset: Path | None
    n: int


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
    dataset = config.resolve_path(section.dataset) if section.dataset else None
    if dataset is not None and not dataset.is_file():
        raise ConfigError(
            f"{where}.dataset = {section.dataset!r}: no such file ({dataset}); give the "
            "held-out rows' file relative to the workspace root"
        )
    if dataset is not None and dataset.resolve() == config.dataset_path().resolve():
        raise ConfigError(
            f"{where}.dataset is the training dataset: a comparison on rows the run trained on "
            "says nothing about new rows; give a file of rows left out of training"
        )
    if runs_root_for(config).resolve() != runs_root_for(eval_config).resolve():
        raise ConfigError(
            f"{where}: the run's checkpoints go to {runs_root_for(config)} ([checkpoints] "
            f"output_dir), where the eval config cannot find them ({runs_root_for(eval_config)}); "
            "drop output_dir or run 'osmosis eval run --model RUN --baseline' yourself"
        )
    return HeldOutPlan(eval_config=eval_path, dataset=dataset, n=section.n)


async def run_heldout(
    plan: HeldOutPlan,
    run_path: Path,
    run_id: str,
    *,
    events: EvalEvents | None = None,
    baseline_events: EvalEvents | None = None,
) -> Comparison:
    """Evaluate run ``run_id``'s latest checkpoint, then its base model, on the held-out rows;
    write ``heldout.json`` into ``run_path`` and return the comparison."""
    options = EvalOptions(
        model=run_id, n=plan.n, output=run_path / "heldout", dataset_file=plan.dataset
    )
    baseline = baseline_for(plan.eval_config, options)
    result = await run_paired_eval(
        plan.eval_config, options, baseline, events=events, baseline_events=baseline_events
    )
    (run_path / HELDOUT_FILE).write_text(
        result.comparison.model_dump_json(indent=2), encoding="utf-8"
    )
    return result.comparison


def read_heldout(run_path: Path) -> Comparison | None:
    """The run's held-out comparison, or ``None`` when none ran (or its file is unreadable)."""
    path = run_path / HELDOUT_FILE
    try:
        return Comparison.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
