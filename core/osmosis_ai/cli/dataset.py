"""``osmosis dataset validate FILE``: check a dataset before spending time on it.
``osmosis dataset from-eval`` / ``from-run``: the passed traces of a run as warm-start rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from osmosis_ai.console import state

__all__ = ["register"]

dataset_app = typer.Typer(
    name="dataset",
    help="Inspect and validate datasets (.jsonl, .json, .csv, .parquet); turn passed traces "
    "into warm-start demonstrations.",
    no_args_is_help=True,
)


@dataset_app.command("validate")
def validate_command(
    file: Annotated[Path, typer.Argument(help="The dataset file.")],
    max_errors: Annotated[
        int, typer.Option("--max-errors", help="How many problems to list.", min=1)
    ] = 5,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Read every row and report problems with their file, line and column; exit 1 if any.

    A ``.jsonl`` file of conversations (``{"messages": [...]}`` rows, for ``[warm_start]``) is
    checked as demonstrations: roles, tool calls and their results, JSON arguments."""
    from rich.markup import escape

    from osmosis_ai.data import looks_like_demonstrations, validate_dataset

    if looks_like_demonstrations(file):
        _validate_demonstrations(file, max_errors, json_out)
        return
    report = validate_dataset(file, max_errors=max_errors)
    if json_out:
        payload = report.model_dump(mode="json")
        payload["ok"] = report.ok
        state.emit_json(payload)
    else:
        lines = report.lines()
        mark = "[green]ok[/]" if report.ok else "[red]invalid[/]"
        state.console.print(f"{mark} {escape(lines[0])}", soft_wrap=True)
        if report.columns:
            state.console.print(f"  columns: {', '.join(report.columns)}", markup=False)
        if report.ok and not report.has_label:
            state.console.print(
                "  no ground_truth column: graders will get ctx.label = None", markup=False
            )
        for line in lines[1:]:
            state.console.print(line, soft_wrap=True, markup=False)
    if not report.ok:
        raise typer.Exit(1)


def _validate_demonstrations(file: Path, max_errors: int, json_out: bool) -> None:
    from rich.markup import escape

    from osmosis_ai.data import validate_demonstrations

    report = validate_demonstrations(file, max_errors=max_errors)
    if json_out:
        payload = report.model_dump(mode="json")
        payload["ok"] = report.ok
        payload["kind"] = "demonstrations"
        state.emit_json(payload)
    else:
        lines = report.lines()
        mark = "[green]ok[/]" if report.ok else "[red]invalid[/]"
        state.console.print(f"{mark} {escape(lines[0])}", soft_wrap=True)
        for line in lines[1:]:
            state.console.print(line, soft_wrap=True, markup=False)
        if report.problem_counts:
            counts = ", ".join(f"{k} {v}" for k, v in sorted(report.problem_counts.items()))
            state.console.print(f"  problems by kind: {counts}", markup=False)
    if not report.ok:
        raise typer.Exit(1)


_MIN_REWARD = typer.Option(
    "--min-reward",
    help="Keep samples with at least this reward (default: the run's pass threshold).",
)
_OUTPUT = typer.Option("--output", "-o", help="The JSONL file to write (warm-start rows).")


@dataset_app.command("from-eval")
def from_eval_command(
    run: Annotated[str, typer.Argument(help="Eval run: a name under .osmosis/evals or a folder.")],
    output: Annotated[Path, _OUTPUT],
    min_reward: Annotated[float | None, _MIN_REWARD] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Write the passed rollouts of an eval run as warm-start conversations (rejection sampling)."""
    from osmosis_ai.eval import demos_from_eval

    with _progress(not json_out) as tick:
        report = demos_from_eval(run, output, min_reward=min_reward, on_progress=tick)
    _print_report(report, json_out)


@dataset_app.command("from-run")
def from_run_command(
    run: Annotated[str, typer.Argument(help="Training run, RUN or RUN:STEP.")],
    output: Annotated[Path, _OUTPUT],
    min_reward: Annotated[float | None, _MIN_REWARD] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Write a training run's recorded trajectories that reached the reward as warm-start rows."""
    from osmosis_ai.eval import demos_from_run

    with _progress(not json_out) as tick:
        report = demos_from_run(run, output, min_reward=min_reward, on_progress=tick)
    _print_report(report, json_out)


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr, advanced by ``tick(done, total)``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(
        TextColumn("reading samples"),
        BarColumn(),
        MofNCompleteColumn(),
        console=state.err_console,
        transient=True,
        disable=not enabled,
    )
    task = bar.add_task("samples", total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _print_report(report: Any, json_out: bool) -> None:
    if json_out:
        state.emit_json(report.as_dict())
        return
    for line in report.lines():
        state.console.print(line, soft_wrap=True, markup=False)
    if report.kept == 0:
        state.warn("no sample passed: nothing to warm-start on (try a lower --min-reward)")


def register(app: typer.Typer) -> None:
    """Add the ``dataset`` command group to the root app."""
    from osmosis_ai.cli.platform import add_dataset_upload

    add_dataset_upload(dataset_app)
    app.add_typer(dataset_app, name="dataset")
