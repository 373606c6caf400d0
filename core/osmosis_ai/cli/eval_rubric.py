"""``osmosis eval rubric -d DATA -r RUBRIC --model ID``: score a dataset's answers with a judge.

As in the original SDK: each row's existing answer (``solution_str`` by default) is scored
against the rubric by an LLM judge, ``-n`` times, on ``[--score-min, --score-max]``, and the
summary is the one ``osmosis eval run`` prints, plus the judge's calls, cache hits and cost.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from osmosis_ai.cli._eval_view import Head, print_summary
from osmosis_ai.console import state

if TYPE_CHECKING:
    from osmosis_ai.grading import JudgeModel, JudgeUsage, RubricJudge
    from osmosis_ai.grading._answers import AnswersResult

__all__ = ["add_rubric_command"]


def _usage_line(usage: JudgeUsage, cache_hit_rate: float | None) -> str:
    cost = f"${usage.cost_usd:.4f}"
    if usage.unpriced_calls:
        cost += f" (+ {usage.unpriced_calls} calls without a known price)"
    rate = "" if cache_hit_rate is None else f" ({cache_hit_rate * 100:.0f}% of lookups)"
    return (
        f"{usage.calls} calls ({usage.retries} retries), {usage.cache_hits} cache hits{rate}, "
        f"{usage.failures} failures, cost {cost}"
    )


def _print(
    result: AnswersResult, dataset: Path, model: str, n: int, hit_rate: float | None
) -> None:
    assert result.run_dir is not None
    shown = Head(f"rubric ({dataset.name}, column {result.column})", model, n, result.run_dir)
    print_summary(shown, result.summary, "completed")
    state.console.print(f"[cyan]judge[/] {_usage_line(result.usage, hit_rate)}")


def rubric_command(
    data: Annotated[Path, typer.Option("--data", "-d", help="Dataset with the answers to score.")],
    rubric: Annotated[
        str, typer.Option("--rubric", "-r", help="The rubric text, or a file holding it.")
    ],
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="Judge model: 'embedded', a model folder, an http(s) URL or a LiteLLM id.",
        ),
    ],
    n: Annotated[
        int, typer.Option("-n", "--n", "--number", min=1, help="Judgements per answer.")
    ] = 1,
    score_min: Annotated[float, typer.Option("--score-min", help="Lowest score.")] = 0.0,
    score_max: Annotated[float, typer.Option("--score-max", help="Highest score.")] = 1.0,
    column: Annotated[
        str | None,
        typer.Option("--column", help="The answers' column (default: solution_str, response...)."),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            "--mode", help="'json' (score + reasons) or 'levels' (G-Eval level probabilities)."
        ),
    ] = "json",
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N rows.")] = None,
    pass_threshold: Annotated[
        float | None, typer.Option("--pass-threshold", help="Passing score (default: max).")
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Judge calls in flight.")
    ] = 8,
    cache_file: Annotated[
        Path | None,
        typer.Option("--cache", help="A JSON-lines judge cache to reuse across runs."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Run folder (default .osmosis/evals/rubric-<time>/); a path ending in .json "
            "also gets the results as one JSON file (as osmosis-ai 0.3 wrote them).",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="Key for the judge model (default: the provider's environment variable, "
            "which is safer: a flag shows in the process list and shell history).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=0.001, help="Seconds one judge call may take (default 120)."),
    ] = None,
) -> None:
    """Score a dataset's existing answers against a rubric with an LLM judge."""
    from osmosis_ai.grading import JudgeModel

    judge_model = JudgeModel(model, api_key=api_key, timeout_s=timeout or 120.0)
    judge = _judge(rubric, judge_model, mode, score_min, score_max, n, concurrency, cache_file)
    json_file, run_dir = _output_paths(output)
    result = asyncio.run(
        _judge_all(data, judge, column=column, n=n, limit=limit, pass_threshold=pass_threshold,
                   run_dir=run_dir)
    )
    hit_rate = judge.cache.hit_rate if judge.cache is not None else None
    _report(result, data, model, n, hit_rate, run_dir=run_dir, json_file=json_file,
            json_out=json_out)


def _output_paths(output: Path | None) -> tuple[Path | None, Path]:
    """``--output``: the JSON file to also write (a path ending in .json) and the run folder."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    json_file = output if output is not None and output.suffix.lower() == ".json" else None
    default_dir = Path(".osmosis") / "evals" / f"rubric-{stamp}"
    run_dir = default_dir if output is None or json_file is not None else output
    return json_file, run_dir


async def _judge_all(
    data: Path, judge: RubricJudge, *, column: str | None, n: int, limit: int | None,
    pass_threshold: float | None, run_dir: Path,
) -> AnswersResult:
    """Judge every answer in ``data`` (the run folder gets results.jsonl); close the judge."""
    from osmosis_ai.grading._answers import judge_answers

    try:
        return await judge_answers(
            data,
            judge,
            column=column,
            n=n,
            limit=limit,
            pass_threshold=pass_threshold,
            run_dir=run_dir,
        )
    finally:
        await judge.aclose()


def _report(
    result: AnswersResult, data: Path, model: str, n: int, hit_rate: float | None, *,
    run_dir: Path, json_file: Path | None, json_out: bool,
) -> None:
    """Write ``-o FILE.json`` if asked; print the summary as JSON (``--json``) or as text."""
    payload = {
        "run_dir": str(run_dir),
        "column": result.column,
        "model": model,
        "summary": result.summary.model_dump(mode="json"),
        "judge": {**result.usage.model_dump(), "cache_hit_rate": hit_rate},
    }
    if json_file is not None:
        _write_results(json_file, payload, run_dir)
    if json_out:
        state.emit_json(payload)
        return
    _print(result, data, model, n, hit_rate)
    if json_file is not None:
        state.console.print(f"results written to {json_file}", highlight=False, markup=False)


def _write_results(path: Path, payload: dict[str, Any], run_dir: Path) -> None:
    """``-o FILE.json``: the summary and every judged row (the run folder's results.jsonl)."""
    import json

    from osmosis_ai.errors import ConfigError
    from osmosis_ai.safe_io import read_jsonl

    rows: list[Any] = []
    results = run_dir / "results.jsonl"
    if results.exists():
        rows = list(read_jsonl(results).records)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**payload, "results": rows}, indent=2), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--output {path}: cannot write it ({exc.strerror or exc})") from None


def _judge(
    rubric: str, model: JudgeModel, mode: str, score_min: float, score_max: float, n: int,
    concurrency: int, cache_file: Path | None,
) -> RubricJudge:
    """The judge the options describe; a bad option is a ConfigError naming it."""
    from osmosis_ai.errors import ConfigError
    from osmosis_ai.grading import JudgeCache, RubricJudge, Scale

    if mode not in ("json", "levels"):
        raise ConfigError(f"--mode must be 'json' or 'levels', got {mode!r}")
    if not score_max > score_min:
        raise ConfigError(f"--score-max ({score_max:g}) must be above --score-min ({score_min:g})")
    # "@file.txt" is how osmosis-ai 0.3 named a rubric file; a bare path works too.
    rubric_path = Path(rubric.removeprefix("@"))
    rubric_text: str | Path = rubric_path if rubric_path.is_file() else rubric
    cache: JudgeCache | bool = JudgeCache(cache_file) if cache_file is not None else True
    try:
        return RubricJudge(
            rubric_text,
            model=model,
            mode=cast(Any, mode),
            scale=Scale(min=score_min, max=score_max),
            temperature=None if n == 1 else 1.0,
            max_concurrent=concurrency,
            cache=cache,
        )
    except ValueError as exc:
        raise ConfigError(f"--rubric {rubric!r}: {exc}") from None


def add_rubric_command(eval_app: typer.Typer) -> None:
    """Add ``rubric`` to the ``osmosis eval`` group."""
    eval_app.command("rubric")(rubric_command)
