"""``osmosis eval run CONFIG``: evaluate a rollout locally, with a live progress bar."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from osmosis_ai.cli._output import state
from osmosis_ai.errors import ConfigError

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from osmosis_ai.eval import (
        EvalEvents,
        EvalOptions,
        EvalPlan,
        EvalRecord,
        EvalSummary,
        PairedResult,
    )

__all__ = ["register"]

eval_app = typer.Typer(
    name="eval",
    help="Evaluate a rollout locally against a model, before any GPU is spent.",
    no_args_is_help=True,
)


class _ProgressView:
    """Feeds a rich progress bar (on stderr) from eval events."""

    def __init__(self, progress: Progress, label: str = "eval") -> None:
        self.progress = progress
        self.label = label
        self.task: TaskID | None = None
        self.items: set[tuple[int, int]] = set()
        self.rewards: list[float] = []
        self.failed = 0

    def on_start(self, total: int, done: int) -> None:
        self.task = self.progress.add_task(
            self.label, total=total, completed=done, mean="-", failed=0
        )

    def on_phase(self, phase: str) -> None:
        if self.task is not None:
            self.progress.update(
                self.task,
                description=f"{self.label} ({phase})" if phase != "running" else self.label,
            )

    def on_record(self, record: EvalRecord) -> None:
        if record.reward is not None:
            self.rewards.append(record.reward)
        if record.status == "failed":
            self.failed += 1
        key = (record.row_index, record.run_index)
        advance = 0 if key in self.items else 1
        self.items.add(key)
        mean = f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"
        if self.task is not None:
            self.progress.update(self.task, advance=advance, mean=mean, failed=self.failed)


def _make_progress(enabled: bool) -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[mean]}"),
        TextColumn("failed {task.fields[failed]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=state.err_console,
        transient=False,
        disable=not enabled,
    )


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


class _RunHead(Protocol):
    """What the summary header names: an :class:`EvalPlan`, or an eval run read back."""

    @property
    def config_name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def n(self) -> int: ...
    @property
    def run_dir(self) -> Path: ...


@dataclass
class _Head:
    config_name: str
    model: str
    n: int
    run_dir: Path


def _print_summary(
    plan: _RunHead, summary: EvalSummary, status: str, load_s: float | None = None
) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = state.console
    wall = f" in {summary.wall_time_s:.1f} s" if summary.wall_time_s is not None else ""
    if load_s is not None:
        wall += f" (+ {load_s:.1f} s model start)"
    console.print(
        f"[bold]eval {plan.config_name}[/]: {summary.samples} samples, model {plan.model}, "
        f"n={plan.n}{wall} ([bold]{status}[/])"
    )
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="cyan", no_wrap=True)
    table.add_column(overflow="fold")
    r = summary.reward
    table.add_row(
        "reward",
        f"mean {_fmt(r.mean)}  median {_fmt(r.median)}  std {_fmt(r.std)}  "
        f"min {_fmt(r.min)}  max {_fmt(r.max)}  ({r.count} graded)",
    )
    considered = summary.success + summary.failed
    rate = "-" if summary.pass_rate is None else f"{summary.pass_rate * 100:.1f}%"
    table.add_row(
        f"pass rate (reward >= {summary.pass_threshold:g})",
        f"{rate} ({summary.passed}/{considered}; failed samples count as not passed)",
    )
    for k, v in summary.pass_at_k.items():
        table.add_row(k, f"{v:.3f} (unbiased, over {summary.pass_at_k_groups} rows)")
    table.add_row(
        "samples",
        f"{summary.success} success, {summary.failed} failed, {summary.skipped} skipped",
    )
    if summary.failures_by_reason:
        reasons = ", ".join(f"{k} {v}" for k, v in summary.failures_by_reason.items())
        table.add_row("failures", reasons)
        for reason, example in summary.failure_examples.items():
            table.add_row(f"  e.g. {reason}", escape(example))
    per = _fmt(summary.tokens_per_sample, 1)
    table.add_row(
        "tokens",
        f"{summary.prompt_tokens} prompt + {summary.completion_tokens} completion "
        f"({per} per sample)",
    )
    if summary.judge:
        j = summary.judge
        table.add_row(
            "judge",
            f"{j.get('calls', 0):.0f} calls, {j.get('cache_hits', 0):.0f} cache hits, "
            f"{j.get('prompt_tokens', 0):.0f} prompt + {j.get('completion_tokens', 0):.0f} "
            f"completion tokens, cost ${j.get('cost_usd', 0):.4f}",
        )
    if summary.latency_ms:
        lat = summary.latency_ms
        table.add_row(
            "latency",
            f"mean {lat['mean'] / 1000:.2f} s  p50 {lat['p50'] / 1000:.2f} s  "
            f"p95 {lat['p95'] / 1000:.2f} s  max {lat['max'] / 1000:.2f} s",
        )
    table.add_row("results", f"{plan.run_dir / 'results.jsonl'} (traces in traces/)")
    console.print(table)


@eval_app.command("run")
def run_command(
    ctx: typer.Context,
    config: Annotated[Path, typer.Argument(help="Eval config, e.g. configs/eval/calc.toml.")],
    limit: Annotated[
        int | None, typer.Option("--limit", help="Evaluate only the first N rows.")
    ] = None,
    n: Annotated[int | None, typer.Option("--n", help="Runs per row (pass@k for k <= n).")] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", help="Rollouts in flight at once (default 8)."),
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            "-m",
            help="Override model_path: a trained checkpoint RUN[:STEP] (STEP a number, latest or "
            "best; see 'osmosis model list'), 'embedded', a model folder, an http(s) URL or a "
            "LiteLLM id. Give it twice to compare the first against the second.",
        ),
    ] = None,
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline",
            help="Also evaluate the checkpoint's base model on the same rows and print the "
            "reward difference with a paired bootstrap confidence interval.",
        ),
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="A named run in .osmosis/evals/NAME/: running the command again continues it.",
        ),
    ] = None,
    rows: Annotated[
        str | None,
        typer.Option("--rows", help='Only these 0-based dataset rows, e.g. "3,7,10-20".'),
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option("--retry-failed", help="Continuing a run: run its failed samples again."),
    ] = False,
    fresh: Annotated[
        bool,
        typer.Option("--fresh", help="Start the named run (--name) over, deleting its results."),
    ] = False,
    dataset_file: Annotated[
        Path | None,
        typer.Option("--dataset-file", help="Evaluate this dataset file instead of the config's."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Run folder (default .osmosis/evals/<config>-<time>/)."
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue an interrupted run (the latest, or --output DIR)."),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Run the rollout over the dataset; write per-sample results and traces; print a summary."""
    from osmosis_ai.eval import EvalOptions, baseline_for, run_eval, run_paired_eval

    if not config.is_file():
        raise ConfigError(
            f"eval config {config} does not exist; create one with "
            "'osmosis template create NAME' (it writes configs/eval/NAME.toml)"
        )
    models = list(model or [])
    if len(models) > 2:
        raise ConfigError(
            "--model given more than twice: pass one model, or two to compare the first "
            "against the second"
        )
    if baseline and len(models) == 2:
        raise ConfigError("pass either --baseline or a second --model, not both")
    options = EvalOptions(
        limit=limit,
        n=n,
        concurrency=concurrency,
        model=models[0] if models else None,
        output=output,
        resume=resume,
        name=name,
        rows=rows,
        retry_failed=retry_failed,
        fresh=fresh,
        dataset_file=dataset_file,
    )
    base_model = models[1] if len(models) == 2 else None
    if baseline:
        base_model = baseline_for(config, options)
    if ctx.info_name == "submit":
        _submit(config, options, _child_args(options, models, baseline), json_out)
        return
    if not state.debug:
        _quiet_third_party_output()
    holder: dict[str, Any] = {}
    progress = _make_progress(enabled=not json_out)
    events = _events(progress, "eval", holder)
    try:
        with progress:
            if base_model is not None:
                paired = asyncio.run(
                    run_paired_eval(
                        config,
                        options,
                        base_model,
                        events=events,
                        baseline_events=_events(progress, "baseline", {}),
                    )
                )
                result = paired.candidate
            else:
                paired = None
                result = asyncio.run(run_eval(config, options, events=events))
    except KeyboardInterrupt:
        _report_interrupted(holder.get("plan"), json_out, _child_args(options, models, baseline))
        raise typer.Exit(130) from None
    if paired is not None:
        _report_paired(paired, json_out)
        return
    status = result.info.status
    if json_out:
        state.emit_json(
            {
                "run_dir": str(result.plan.run_dir),
                "status": status,
                "model": result.plan.model,
                "model_load_s": result.info.model_load_s,
                "new_records": result.new_records,
                "resumed_records": result.resumed_records,
                "summary": result.summary.model_dump(mode="json"),
            }
        )
        return
    if result.resumed_records:
        state.console.print(
            f"resumed: kept {result.resumed_records} earlier results, ran {result.new_records} more"
        )
    _print_summary(result.plan, result.summary, status, result.info.model_load_s)


def _child_args(options: EvalOptions, models: list[str], baseline: bool) -> list[str]:
    """The ``eval run`` arguments that reproduce ``options`` (for a detached worker)."""
    args: list[str] = []
    for flag, value in (
        ("--limit", options.limit),
        ("--n", options.n),
        ("--concurrency", options.concurrency),
        ("--name", options.name),
        ("--rows", options.rows),
    ):
        if value is not None:
            args += [flag, str(value)]
    for m in models:
        args += ["--model", m]
    for path_flag, path in (("--dataset-file", options.dataset_file), ("--output", options.output)):
        if path is not None:
            args += [path_flag, str(path.resolve())]
    for on, flag in (
        (baseline, "--baseline"),
        (options.retry_failed, "--retry-failed"),
        (options.fresh, "--fresh"),
        (options.resume, "--resume"),
    ):
        if on:
            args.append(flag)
    return args


def _submit(config: Path, options: EvalOptions, args: list[str], json_out: bool) -> None:
    """Start ``eval run`` with the same arguments as a detached worker; print where it runs."""
    import json
    import os
    import subprocess
    import sys
    from datetime import datetime

    from osmosis_ai.config import load_eval_config
    from osmosis_ai.eval._run import check_run_name
    from osmosis_ai.runs._process import describe_process

    check_run_name(options)  # before anything is written under the name
    if options.resume and options.output is None:
        raise ConfigError("eval submit --resume needs --output DIR (or use --name NAME)")
    cfg = load_eval_config(config)
    root = Path(cfg.workspace_root) / ".osmosis" / "evals"
    if options.name is not None:
        run_dir = root / options.name
    elif options.output is not None:
        run_dir = options.output
    else:
        run_dir = root / f"{config.stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        args += ["--output", str(run_dir)]
    busy = run_dir / "submit.json"
    if busy.is_file():
        previous = json.loads(busy.read_text(encoding="utf-8"))
        from osmosis_ai.runs._process import process_alive

        if process_alive(previous.get("worker") or {}) is True:
            raise ConfigError(
                f"eval run {run_dir.name} is already running (pid {previous['worker']['pid']}); "
                f"see 'osmosis eval info {run_dir.name}'"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "eval.log"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from osmosis_ai.cli import main; sys.exit(main())",
        "eval",
        "run",
        str(config.resolve()),
        *args,
    ]
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.getcwd(),
            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "120"},
        )
    submit = {
        "config": config.stem,
        "command": cmd[3:],
        "worker": describe_process(proc.pid),
        "submitted_at": datetime.now().isoformat(timespec="seconds"),
    }
    (run_dir / "submit.json").write_text(json.dumps(submit, indent=2), encoding="utf-8")
    if json_out:
        state.emit_json({"name": run_dir.name, "run_dir": str(run_dir), "pid": proc.pid})
        return
    state.console.print(f"submitted eval {run_dir.name} (pid {proc.pid}): {run_dir}")
    state.console.print(
        f"  follow it: osmosis eval info {run_dir.name}   log: {log}   all runs: osmosis eval list"
    )


def _events(progress: Progress, label: str, holder: dict[str, Any]) -> EvalEvents:
    from osmosis_ai.eval import EvalEvents

    view = _ProgressView(progress, label)
    return EvalEvents(
        on_plan=lambda plan: holder.__setitem__("plan", plan),
        on_start=view.on_start,
        on_record=view.on_record,
        on_phase=view.on_phase,
    )


def _signed(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}"


def _report_paired(paired: PairedResult, json_out: bool) -> None:
    cand, base, cmp = paired.candidate, paired.baseline, paired.comparison
    if json_out:
        state.emit_json(
            {
                "run_dir": str(cand.plan.run_dir),
                "status": cand.info.status,
                "model": cand.plan.model,
                "baseline": base.plan.model,
                "summary": cand.summary.model_dump(mode="json"),
                "baseline_summary": base.summary.model_dump(mode="json"),
                "comparison": cmp.model_dump(mode="json") | {"verdict": cmp.verdict},
            }
        )
        return
    _print_summary(cand.plan, cand.summary, cand.info.status, cand.info.model_load_s)
    state.console.print()
    _print_summary(base.plan, base.summary, base.info.status, base.info.model_load_s)
    state.console.print()
    pct = f"{cmp.confidence * 100:g}%"
    state.console.print(
        f"[bold]compared[/] on {cmp.rows} rows (same rows, n={cand.plan.n}): "
        f"{cmp.candidate} vs {cmp.baseline}"
    )
    state.console.print(
        f"  reward  model {_fmt(cmp.candidate_mean)}  baseline {_fmt(cmp.baseline_mean)}  "
        f"diff {_signed(cmp.diff)}  {pct} CI [{_signed(cmp.ci_low)}, {_signed(cmp.ci_high)}]"
        f"  -> [bold]{cmp.verdict}[/]"
    )
    notes = []
    if cmp.unpaired_rows:
        notes.append(f"{cmp.unpaired_rows} rows left out (no graded sample under one model)")
    if cmp.candidate_failed or cmp.baseline_failed:
        notes.append(
            f"failed samples: model {cmp.candidate_failed}, baseline {cmp.baseline_failed}"
        )
    notes.append(
        f"paired bootstrap over rows, {cmp.resamples} resamples, seed {cmp.seed}; "
        f"{cand.plan.run_dir / 'comparison.json'}"
    )
    for note in notes:
        state.console.print(f"  {note}")


def _quiet_third_party_output() -> None:
    """Keep the terminal for the progress bar: no model-loading bars, no server tracebacks.

    This is the application (the CLI), not the library, so it may set these; ``--debug``
    leaves them alone. Rollout failures are still recorded in the results and traces.
    """
    import logging
    import os

    # Read by transformers when it is first imported (the engine imports it later).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # uvicorn logs a traceback for every request still in flight when the gateway stops
    # (e.g. a generation abandoned by a rollout that timed out).
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)


def _continue_command(plan: EvalPlan, args: list[str]) -> str:
    """The command that continues an interrupted run: the same one for a named run, else the
    same options with ``--resume --output <run dir>``."""
    import shlex

    if "--name" not in args:
        kept: list[str] = []
        skip = False
        for a in args:
            if skip:
                skip = False
            elif a == "--output":
                skip = True
            elif a not in ("--resume", "--fresh"):
                kept.append(a)
        args = [*kept, "--resume", "--output", str(plan.run_dir)]
    else:
        args = [a for a in args if a != "--fresh"]
    return shlex.join(["osmosis", "eval", "run", str(plan.config_path), *args])


def _report_interrupted(plan: EvalPlan | None, json_out: bool, args: list[str]) -> None:
    from osmosis_ai.eval import EvalSummary

    if plan is None:
        state.error("Interrupted before the eval started.")
        return
    summary_path = plan.run_dir / "summary.json"
    summary = (
        EvalSummary.model_validate_json(summary_path.read_text())
        if summary_path.is_file()
        else None
    )
    if json_out:
        state.emit_json(
            {
                "run_dir": str(plan.run_dir),
                "status": "interrupted",
                "summary": summary.model_dump(mode="json") if summary else None,
            }
        )
    elif summary is not None:
        _print_summary(plan, summary, "interrupted")
    state.warn(
        f"interrupted: finished results are kept in {plan.run_dir}. Continue with: "
        f"{_continue_command(plan, args)}"
    )


# ``eval submit`` is ``eval run`` started as a detached worker (the seeds' name for it).
eval_app.command(
    "submit",
    help="Start 'eval run' (same options) in the background; it survives this terminal. "
    "Follow it with 'osmosis eval info NAME'.",
)(run_command)


@eval_app.command("list")
def list_command(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Past and running eval runs of this workspace: status, model, progress, reward."""
    from rich.table import Table

    from osmosis_ai.eval import evals_root, list_eval_runs

    root = evals_root()
    views = list_eval_runs(root)
    if json_out:
        state.emit_json([v.as_dict() for v in views])
        return
    if not views:
        state.console.print(
            f"No eval runs under {root}. Start one with 'osmosis eval run CONFIG' or "
            "'osmosis eval submit CONFIG'."
        )
        return
    table = Table(box=None, pad_edge=False)
    for col in ("name", "status", "model", "done", "reward", "pass rate", "failed", "vs baseline"):
        table.add_column(col, overflow="fold")
    for v in views:
        d = v.as_dict()
        s = d["summary"] or {}
        total = d["work_items"]
        cmp = d["comparison"]
        table.add_row(
            v.name,
            v.status,
            d["model"] or "-",
            f"{d['done']}/{total}" if total else str(d["done"]),
            _fmt((s.get("reward") or {}).get("mean")),
            "-" if s.get("pass_rate") is None else f"{s['pass_rate'] * 100:.1f}%",
            str(s.get("failed", "-")),
            _fmt_cmp(cmp),
        )
    state.console.print(table)


def _fmt_cmp(cmp: dict[str, Any] | None) -> str:
    if not cmp or cmp.get("diff") is None:
        return "-"
    return f"{cmp['diff']:+.3f} [{cmp['ci_low']:+.3f}, {cmp['ci_high']:+.3f}]"


@eval_app.command("info")
def info_command(
    name: Annotated[str, typer.Argument(help="The eval run: its folder name or a prefix.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Also write everything, per-row results included, to this JSON file.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One eval run: settings, status, reward summary, failures, per-row results."""
    import json

    from rich.markup import escape
    from rich.table import Table

    from osmosis_ai.eval import EvalSummary, evals_root, find_eval_run

    view = find_eval_run(evals_root(), name)
    data = view.as_dict(records=True)
    if output is not None:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(json.dumps(data, indent=2), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--output {output}: cannot write it ({exc})") from exc
    if json_out:
        state.emit_json(data)
        return
    console = state.console
    info = view.info
    if info is None:
        console.print(f"[bold]eval {view.name}[/]: {view.status} (not started)")
        tail = view.log_tail()
        if tail:
            console.print(escape(tail))
        return
    summary = EvalSummary.model_validate(data["summary"]) if data["summary"] else None
    console.print(
        f"[bold]eval {view.name}[/] ({view.status}): config {info.config_name}, model "
        f"{info.model}, n={info.n}, {data['done']}/{info.work_items} work items, started "
        f"{info.started_at}" + (f", finished {info.finished_at}" if info.finished_at else "")
    )
    if info.checkpoint:
        ck = info.checkpoint
        console.print(f"  checkpoint: run {ck['run']} step {ck['step']} (base {ck['base_model']})")
    if summary is not None:
        _print_summary(_Head(info.config_name, info.model, info.n, view.path), summary, view.status)
    cmp = data["comparison"]
    if cmp:
        console.print(
            f"vs baseline {cmp['baseline']}: reward {_fmt(cmp['candidate_mean'])} vs "
            f"{_fmt(cmp['baseline_mean'])}, diff {_signed(cmp['diff'])}, "
            f"{cmp['confidence'] * 100:g}% CI [{_signed(cmp['ci_low'])}, "
            f"{_signed(cmp['ci_high'])}] over {cmp['rows']} rows"
        )
    rows = data["results"]
    if rows:
        table = Table(box=None, pad_edge=False, title="results (first 20)")
        for col in ("row", "run", "status", "reward", "error"):
            table.add_column(col, overflow="fold")
        for r in rows[:20]:
            table.add_row(
                str(r["row_index"]),
                str(r["run_index"]),
                r["status"],
                _fmt(r["reward"]),
                escape((r.get("error") or "")[:80]),
            )
        console.print(table)
        if len(rows) > 20:
            console.print(f"  ... {len(rows) - 20} more in {view.path / 'results.jsonl'}")
    if view.status in ("crashed", "failed"):
        tail = view.log_tail()
        if tail:
            console.print("last lines of eval.log:")
            console.print(escape(tail))
    if output is not None:
        console.print(f"written to {output}")


def register(app: typer.Typer) -> None:
    """Add the ``eval`` command group to the root app."""
    from osmosis_ai.cli.eval_rubric import add_rubric_command

    add_rubric_command(eval_app)
    app.add_typer(eval_app, name="eval")
