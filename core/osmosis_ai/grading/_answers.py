"""Judging a dataset's existing answers (``osmosis eval rubric``), as a library.

Each row's answer column is scored by a :class:`RubricJudge`, ``n`` independent times; every
judgement becomes an :class:`~osmosis_ai.eval.EvalRecord` (a judge failure is a ``failed``
record with the raw reply, never a 0), so the summary is the same as ``osmosis eval run``'s.
The run folder holds ``results.jsonl``, ``summary.json`` and ``traces/`` (one file per
judgement with the answer, the score, the reasons and the judge's raw replies).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osmosis_ai.data._dataset import check_path
from osmosis_ai.data._readers import iter_records
from osmosis_ai.errors import DatasetError
from osmosis_ai.eval import EvalRecord, EvalSummary, summarize
from osmosis_ai.grading._rubric import RubricJudge
from osmosis_ai.grading._types import JudgeUsage, JudgeVerdict

__all__ = ["ANSWER_COLUMNS", "AnswersResult", "judge_answers"]

ANSWER_COLUMNS = ("solution_str", "response", "answer", "completion", "output")
"""Columns tried, in order, when no answer column is named (``solution_str`` as in the SDK)."""
_QUESTION_COLUMNS = ("user_prompt", "prompt", "question", "original_input")
_REFERENCE_COLUMNS = ("ground_truth", "label", "reference")


@dataclass
class AnswersResult:
    """What :func:`judge_answers` returns."""

    records: list[EvalRecord]
    summary: EvalSummary
    usage: JudgeUsage
    column: str
    run_dir: Path | None
    verdicts: list[JudgeVerdict] = field(default_factory=list)


def _load_rows(path: Path, limit: int | None) -> list[tuple[int, int | None, dict[str, Any]]]:
    check_path(path)
    rows = []
    for raw in iter_records(path, str(path)):
        if raw.issue is not None:
            raise DatasetError(str(raw.issue))
        if not isinstance(raw.record, dict):
            raise DatasetError(f"{path}: row {raw.source_row_index} is not an object")
        rows.append((raw.source_row_index, raw.line, raw.record))
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DatasetError(f"{path}: the dataset has no rows")
    return rows


def _pick(row: dict[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = row.get(name)
        if value is not None and str(value).strip():
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return None


def _answer_column(path: Path, first: dict[str, Any], column: str | None) -> str:
    if column is not None:
        if column not in first:
            raise DatasetError(
                f"{path}: no column {column!r} (columns: {', '.join(sorted(first))}); pass the "
                "answers' column with --column"
            )
        return column
    for name in ANSWER_COLUMNS:
        if name in first:
            return name
    raise DatasetError(
        f"{path}: no answer column found (looked for {', '.join(ANSWER_COLUMNS)}; columns: "
        f"{', '.join(sorted(first))}); name it with --column"
    )


def _record(
    row_index: int, source: int, run: int, verdict: JudgeVerdict, threshold: float, ms: float
) -> EvalRecord:
    usage = verdict.usage
    error = None
    if not verdict.ok:
        last = verdict.raw[-1][:300] if verdict.raw else ""
        error = f"{verdict.error}; last reply: {last!r}" if verdict.raw else verdict.error
    return EvalRecord(
        row_index=row_index,
        source_row_index=source,
        run_index=run,
        rollout_id=f"row{row_index}-run{run}",
        sample_id="main",
        status="success" if verdict.ok else "failed",
        reward=verdict.score if verdict.ok else None,
        passed=(verdict.score >= threshold) if verdict.score is not None else None,
        tokens=usage.prompt_tokens + usage.completion_tokens,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        num_calls=usage.calls,
        duration_ms=ms,
        error_type=None if verdict.ok else "judge_error",
        error=error,
        trace=f"traces/row{row_index}-run{run}.json",
    )


async def judge_answers(
    dataset: str | Path,
    judge: RubricJudge,
    *,
    column: str | None = None,
    n: int = 1,
    limit: int | None = None,
    pass_threshold: float | None = None,
    run_dir: Path | None = None,
    on_record: Callable[[EvalRecord], None] | None = None,
) -> AnswersResult:
    """Score the answers in ``dataset`` with ``judge``, ``n`` times each.

    Args:
        dataset: a ``.jsonl``, ``.json``, ``.csv`` or ``.parquet`` file; the task comes from
            ``user_prompt`` (or ``prompt``/``question``), the reference from ``ground_truth``.
        column: the answers' column (default: the first of :data:`ANSWER_COLUMNS` present).
        n: independent judgements per answer (the rubric's stability; pass@k over them).
        pass_threshold: the score that passes (default: the top of the judge's scale).
        run_dir: where to write results, summary and traces (``None``: nothing written).
        on_record: called with each record as it is made (progress bars).
    """
    path = Path(dataset)
    rows = _load_rows(path, limit)
    col = _answer_column(path, rows[0][2], column)
    threshold = judge.scale.max if pass_threshold is None else pass_threshold
    before = judge.usage.model_copy()
    started = time.perf_counter()

    async def one(row_index: int, run: int) -> tuple[EvalRecord, JudgeVerdict]:
        source, line, row = rows[row_index]
        answer = _pick(row, (col,))
        t0 = time.perf_counter()
        if answer is None:
            verdict = JudgeVerdict(ok=False, error=f"{path}:{line or source}: empty {col!r}")
        else:
            verdict = await judge.score(
                answer,
                question=_pick(row, _QUESTION_COLUMNS),
                reference=_pick(row, _REFERENCE_COLUMNS),
                run=run,
            )
        record = _record(
            row_index, source, run, verdict, threshold, (time.perf_counter() - t0) * 1000
        )
        if on_record is not None:
            on_record(record)
        return record, verdict

    done = await asyncio.gather(*(one(i, r) for i in range(len(rows)) for r in range(n)))
    records = [r for r, _ in done]
    summary = summarize(
        records, pass_threshold=threshold, n=n, wall_time_s=time.perf_counter() - started
    )
    usage = judge.usage.model_copy()
    for name in type(usage).model_fields:
        setattr(usage, name, getattr(usage, name) - getattr(before, name))
    result = AnswersResult(records, summary, usage, col, run_dir, verdicts=[v for _, v in done])
    if run_dir is not None:
        _write(run_dir, result, rows)
    return result


def _write(
    run_dir: Path, result: AnswersResult, rows: list[tuple[int, int | None, dict[str, Any]]]
) -> None:
    (run_dir / "traces").mkdir(parents=True, exist_ok=True)
    with (run_dir / "results.jsonl").open("w") as fh:
        for record in result.records:
            fh.write(record.model_dump_json() + "\n")
    for record, verdict in zip(result.records, result.verdicts, strict=True):
        trace = {
            "answer": rows[record.row_index][2].get(result.column),
            "verdict": verdict.model_dump(mode="json"),
        }
        (run_dir / str(record.trace)).write_text(json.dumps(trace, indent=2, ensure_ascii=False))
    summary = {**result.summary.model_dump(mode="json"), "judge": result.usage.model_dump()}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
