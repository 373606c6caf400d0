"""Local evaluation of a rollout: ``osmosis eval run`` as a library.

``await run_eval("configs/eval/calc.toml", EvalOptions(limit=5))`` runs the rollout over the
dataset against the configured model, writes ``results.jsonl`` (one record per sample),
``traces/`` (each sample's messages and policy calls), ``run.json`` and ``summary.json`` into
the run folder, and returns the summary. The metric functions are pure and reusable.
"""

from __future__ import annotations

from osmosis_ai.eval._journal import Journal, hash_file, hash_rollout_dir, read_journal
from osmosis_ai.eval._metrics import (
    EvalSummary,
    RewardStats,
    pass_at_k,
    pass_at_k_values,
    summarize,
)
from osmosis_ai.eval._records import EvalRecord, EvalRunInfo
from osmosis_ai.eval._run import (
    EvalEvents,
    EvalOptions,
    EvalPlan,
    EvalResult,
    plan_eval,
    run_eval,
)

__all__ = [
    "EvalEvents",
    "EvalOptions",
    "EvalPlan",
    "EvalRecord",
    "EvalResult",
    "EvalRunInfo",
    "EvalSummary",
    "Journal",
    "RewardStats",
    "hash_file",
    "hash_rollout_dir",
    "pass_at_k",
    "pass_at_k_values",
    "plan_eval",
    "read_journal",
    "run_eval",
    "summarize",
]
