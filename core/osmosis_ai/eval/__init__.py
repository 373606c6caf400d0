"""Local evaluation of a rollout: ``osmosis eval run`` as a library.

``await run_eval("configs/eval/calc.toml", EvalOptions(limit=5))`` runs the rollout over the
dataset against the configured model, writes ``results.jsonl`` (one record per sample),
``traces/`` (each sample's messages and policy calls), ``run.json`` and ``summary.json`` into
the run folder, and returns the summary. The metric functions are pure and reusable.
"""

from __future__ import annotations

from osmosis_ai.eval._compare import (
    Comparison,
    compare_records,
    paired_bootstrap,
    row_passes,
    row_rewards,
)
from osmosis_ai.eval._harvest import DemoReport, demos_from_eval, demos_from_run
from osmosis_ai.eval._heldout import (
    HeldOutModel,
    HeldOutPlan,
    HeldOutReport,
    HeldOutSet,
    plan_heldout,
    read_heldout,
    run_heldout,
    warm_checkpoint,
)
from osmosis_ai.eval._journal import Journal, hash_file, hash_rollout_dir, read_journal
from osmosis_ai.eval._metrics import (
    EvalSummary,
    RewardStats,
    pass_at_k,
    pass_at_k_values,
    summarize,
)
from osmosis_ai.eval._paired import PairedResult, baseline_for, run_paired_eval
from osmosis_ai.eval._records import EvalRecord, EvalRunInfo
from osmosis_ai.eval._run import (
    EvalEvents,
    EvalOptions,
    EvalPlan,
    EvalResult,
    parse_rows,
    plan_eval,
    resolve_model,
    run_eval,
)
from osmosis_ai.eval._store import EvalRunView, evals_root, find_eval_run, list_eval_runs

__all__ = [
    "Comparison",
    "DemoReport",
    "EvalEvents",
    "EvalOptions",
    "EvalPlan",
    "EvalRecord",
    "EvalResult",
    "EvalRunInfo",
    "EvalRunView",
    "EvalSummary",
    "HeldOutModel",
    "HeldOutPlan",
    "HeldOutReport",
    "HeldOutSet",
    "Journal",
    "PairedResult",
    "RewardStats",
    "baseline_for",
    "compare_records",
    "demos_from_eval",
    "demos_from_run",
    "evals_root",
    "find_eval_run",
    "hash_file",
    "hash_rollout_dir",
    "list_eval_runs",
    "paired_bootstrap",
    "plan_heldout",
    "parse_rows",
    "pass_at_k",
    "pass_at_k_values",
    "plan_eval",
    "read_heldout",
    "read_journal",
    "resolve_model",
    "run_heldout",
    "warm_checkpoint",
    "row_passes",
    "row_rewards",
    "run_eval",
    "run_paired_eval",
    "summarize",
]
