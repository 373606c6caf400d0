"""``osmosis eval run CONFIG``: evaluate a rollout locally, with a live progress bar."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from osmosis_ai.cli._eval_view import (
    Head,
    fmt,
    fmt_cmp,
    make_progress,
    print_results,
    print_summary,
    progress_events,
    report_paired,
    report_single,
    signed,
)
from osmosis_ai.console import state
from osmosis_ai.errors import ConfigError

if TYPE_CHECKING:
    from osmosis_ai.eval import EvalOptions, EvalPlan

__all__ = ["register"]

eval_app = typer.Typer(
    name="eval",
    help="Evaluate a rollout locally against a model, before any GPU is spent.",
    no_args_is_help=True,
)


# The longer options of ``eval run``, named so its signature stays readable.
_ModelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--model",
        "-m",
        help="Override model_path: a trained checkpoint RUN[:STEP] (STEP a number, latest or "
        "best; see 'osmosis model list'), 'embedded', a model folder, an http(s) URL or a "
        "LiteLLM id. Give it twice to compare the first against the second.",
    ),
]
_BaselineOption = Annotated[
    bool,
    typer.Option(
        "--baseline",
        help="Also evaluate the checkpoint's base model on the same rows and print the "
        "reward difference with a paired bootstrap confidence interval.",
    ),
]
_NameOption = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="A named run in .osmosis/evals/NAME/: running the command again continues it.",
    ),
]
_SecretsFileOption = Annotated[
    str | None,
    typer.Option(
        "--secrets-file",
        help="KEY=VALUE lines (a dotenv file; '-' reads stdin) put into the rollout's "
        "environment for this run, e.g. the [secrets] the hosted model needs. Never saved.",
    ),
]
_VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v",
        help="Stream the rollout's and osmosis's log lines (and library output) to stderr.",
    ),
]


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
    model: _ModelOption = None,
    baseline: _BaselineOption = False,
    name: _NameOption = None,
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
    max_in_flight: Annotated[
        int | None,
        typer.Option("--max-in-flight", help="Same as --concurrency (the osmosis-ai 0.3 name)."),
    ] = None,
    secrets_file: _SecretsFileOption = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask before --fresh deletes results.")
    ] = False,
    verbose: _VerboseOption = False,
) -> None:
    """Run the rollout over the dataset; write per-sample results and traces; print a summary."""
    from osmosis_ai.cli._secrets_file import apply_secrets_file
    from osmosis_ai.eval import EvalOptions, baseline_for
    from osmosis_ai.eval._run import check_run_folder

    models = _checked_models(config, model, baseline)
    concurrency = _concurrency(concurrency, max_in_flight)
    apply_secrets_file(secrets_file)
    _prepare_environment(config, verbose)
    if fresh and name is not None and not yes:
        _confirm_fresh(config, name)
    options = EvalOptions(
        limit=limit, n=n, concurrency=concurrency, model=models[0] if models else None,
        output=output, resume=resume, name=name, rows=rows, retry_failed=retry_failed,
        fresh=fresh, dataset_file=dataset_file,
    )
    base_model = baseline_for(config, options) if baseline else dict(enumerate(models)).get(1)
    args = _child_args(options, models, baseline)
    check_run_folder(config, options)  # before a submit hands the run to a child process
    if ctx.info_name == "submit":
        _submit(config, options, args, json_out)
    else:
        _run_and_report(config, options, base_model, json_out, args, verbose=verbose)


def _concurrency(concurrency: int | None, max_in_flight: int | None) -> int | None:
    """``--concurrency`` and its osmosis-ai 0.3 name ``--max-in-flight``: one value."""
    if concurrency is not None and max_in_flight is not None and concurrency != max_in_flight:
        raise ConfigError(
            f"--concurrency {concurrency} and --max-in-flight {max_in_flight} disagree; they "
            "are the same setting: pass one"
        )
    return concurrency if concurrency is not None else max_in_flight


def _prepare_environment(config: Path, verbose: bool) -> None:
    """Before the run: the config's ``[env]`` into this process (the rollout runs here, or in a
    server it starts), ``[advanced]`` keys named as unused, and ``--verbose`` logging."""
    import os

    from osmosis_ai.config import load_eval_config

    cfg = load_eval_config(config)
    os.environ.update(cfg.env)
    ignored = cfg.ignored_advanced()
    if ignored:
        state.warn(
            f"{config}: [advanced] {', '.join(ignored)}: settings of the hosted trainer of "
            "osmosis-ai 0.3, not used by a local eval (ignored)"
        )
    if verbose:
        for name in ("osmosis", "osmosis_ai", "osmosis_trainer", "osmosis_integrations"):
            logger = logging.getLogger(name)
            logger.setLevel(logging.INFO)
            if _VERBOSE_HANDLER not in logger.handlers:  # once, however often main() runs
                logger.addHandler(_VERBOSE_HANDLER)


_VERBOSE_HANDLER = logging.StreamHandler()
_VERBOSE_HANDLER.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))


def _confirm_fresh(config: Path, name: str) -> None:
    """``--fresh`` deletes a named run's results: on a terminal, ask first (``--yes`` skips)."""
    import sys

    from osmosis_ai.config import find_workspace_root

    results = find_workspace_root(config) / ".osmosis" / "evals" / name / "results.jsonl"
    if not results.is_file() or not (sys.stdin.isatty() and state.console.is_terminal):
        return
    if not typer.confirm(f"--fresh deletes the results of eval run {name}; continue?"):
        raise typer.Exit(1)


def _checked_models(config: Path, model: list[str] | None, baseline: bool) -> list[str]:
    """The ``--model`` values, once the config exists and the flags agree."""
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
    return models


def _run_and_report(
    config: Path, options: EvalOptions, base_model: str | None, json_out: bool, args: list[str],
    *, verbose: bool = False,
) -> None:
    """Run the eval (paired with ``base_model`` when given) under a progress bar; report it."""
    from osmosis_ai.eval import run_eval, run_paired_eval

    if not (state.debug or verbose):
        _quiet_third_party_output()
    holder: dict[str, Any] = {}
    progress = make_progress(enabled=not json_out)
    events = progress_events(progress, "eval", holder)
    try:
        with progress:
            if base_model is None:
                report_single(asyncio.run(run_eval(config, options, events=events)), json_out)
                return
            baseline_events = progress_events(progress, "baseline", {})
            paired = asyncio.run(
                run_paired_eval(
                    config, options, base_model, events=events, baseline_events=baseline_events
                )
            )
    except KeyboardInterrupt:
        _report_interrupted(holder.get("plan"), json_out, args)
        raise typer.Exit(130) from None
    report_paired(paired, json_out)


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
        from osmosis_ai.errors import UnreadableFileError
        from osmosis_ai.runs._process import process_alive
        from osmosis_ai.safe_io import read_json_object

        try:  # an unreadable one records no live worker: it is written anew below
            previous = read_json_object(busy, under=run_dir.parent)
        except UnreadableFileError:
            previous = {}

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
    from osmosis_ai.safe_io import open_append

    with os.fdopen(open_append(log), "ab") as fh:  # a link there is refused, not written through
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
    from osmosis_ai.safe_io import read_json_object

    summary = (
        EvalSummary.model_validate(read_json_object(summary_path))
        if summary_path.exists()
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
        print_summary(plan, summary, "interrupted")
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
    from rich.markup import escape
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
            "'osmosis eval submit CONFIG'.", markup=False,
        )
        return
    table = Table(box=None, pad_edge=False)
    for col in ("name", "status", "model", "done", "reward", "pass rate", "failed", "vs baseline"):
        table.add_column(col, overflow="fold")
    problems: list[str] = []
    for v in views:
        d = v.as_dict()
        problems += d["problems"]
        s = d["summary"] or {}
        total = d["work_items"]
        cmp = d["comparison"]
        table.add_row(  # from eval folders: escaped, never markup
            escape(v.name),
            escape(v.status),
            escape(str(d["model"] or "-")),
            f"{d['done']}/{total}" if total else str(d["done"]),
            fmt((s.get("reward") or {}).get("mean")),
            "-" if s.get("pass_rate") is None else f"{s['pass_rate'] * 100:.1f}%",
            str(s.get("failed", "-")),
            fmt_cmp(cmp),
        )
    state.console.print(table)
    for problem in problems:  # files left out (osmosis_ai.safe_io): the rest is listed
        state.console.print(f"skipped {problem}", highlight=False, markup=False)


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

    from osmosis_ai.eval import evals_root, find_eval_run

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
    for problem in data["problems"]:  # files left out (osmosis_ai.safe_io)
        console.print(f"skipped {problem}", highlight=False, markup=False)
    if info is None:
        console.print(f"[bold]eval {escape(view.name)}[/]: {escape(view.status)} (not started)")
        tail = view.log_tail()
        if tail:
            console.print(escape(tail))
        return
    summary = _summary_of(data["summary"], view.path)
    rest = (
        f"({view.status}): config {info.config_name}, model {info.model}, n={info.n}, "
        f"{data['done']}/{info.work_items} work items, started {info.started_at}"
        + (f", finished {info.finished_at}" if info.finished_at else "")
    )
    console.print(f"[bold]eval {escape(view.name)}[/] {escape(rest)}")
    if info.checkpoint:
        ck = info.checkpoint
        console.print(f"  checkpoint: run {ck['run']} step {ck['step']} (base {ck['base_model']})",
                      markup=False)
    if summary is not None:
        print_summary(Head(info.config_name, info.model, info.n, view.path), summary, view.status)
    cmp = data["comparison"]
    if cmp:
        console.print(
            f"vs baseline {cmp['baseline']}: reward {fmt(cmp['candidate_mean'])} vs "
            f"{fmt(cmp['baseline_mean'])}, diff {signed(cmp['diff'])}, "
            f"{cmp['confidence'] * 100:g}% CI [{signed(cmp['ci_low'])}, "
            f"{signed(cmp['ci_high'])}] over {cmp['rows']} rows", markup=False,
        )
    print_results(data["results"], view.path)
    if view.status in ("crashed", "failed"):
        tail = view.log_tail()
        if tail:
            console.print("last lines of eval.log:")
            console.print(escape(tail))
    if output is not None:
        console.print(f"written to {output}")


def _summary_of(raw: dict[str, Any] | None, run_dir: Path) -> Any:
    """The run's summary as an ``EvalSummary``; ``None`` (said once) when it is not one."""
    from pydantic import ValidationError

    from osmosis_ai.eval import EvalSummary

    if not raw:
        return None
    try:
        return EvalSummary.model_validate(raw)
    except ValidationError as exc:
        first = str(exc).splitlines()[0]
        state.console.print(
            f"skipped {run_dir / 'summary.json'}: not an eval summary ({first})",
            highlight=False, markup=False,
        )
        return None


def register(app: typer.Typer) -> None:
    """Add the ``eval`` command group to the root app."""
    from osmosis_ai.cli.eval_rubric import add_rubric_command

    add_rubric_command(eval_app)
    app.add_typer(eval_app, name="eval")
