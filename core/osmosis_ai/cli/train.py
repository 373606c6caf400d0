"""``osmosis train submit`` / ``resume``: start a training run as a worker process.

The run lives in the run store (:mod:`osmosis_ai.runs`, ``<workspace>/runs/<name>-<time>/``);
the worker (``python -m osmosis_trainer.worker``) trains in a session of its own and records
its progress there. In the foreground this command follows the store and draws today's live
view (Ctrl-C: stop after the current step, with a checkpoint; twice: kill); with ``--detach``
it prints the run name and returns while the worker keeps going. ``list``/``info``/``logs``/
``stop`` live in :mod:`osmosis_ai.cli._train_runs`. Core never imports the trainer.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from osmosis_ai.console import LineView, LiveView, ascii_chart, state
from osmosis_ai.errors import ConfigError, MissingExtraError

__all__ = ["register"]

_WORKER = "osmosis_trainer.worker"
_FOLLOW_POLL_S = 0.25


def _require_trainer() -> None:
    import importlib.util

    for module in ("torch", "transformers", "peft", "osmosis_trainer"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError("osmosis train", "trainer", module)


def _loads_entrypoint(config: Any) -> bool:
    """The run imports ``[experiment] entrypoint``: its workflow, or with ``[remote] reward =
    "grader"`` / ``"auto"`` only its Grader."""
    return config.remote is None or config.remote.reward != "server"


def _precheck(config: Any, pinned: bool) -> None:
    """The config's mistakes as one line each, before a worker starts."""
    missing = config.missing_secrets()
    if missing:
        raise ConfigError(
            f"{config.source_path}: [secrets].required names {', '.join(missing)}, which "
            "are not set in the environment; export them before 'osmosis train submit'"
        )
    if config.remote is not None and not pinned:
        from osmosis_ai.rollout.running import load_remote_grader

        load_remote_grader(config)  # "auto" without a Grader: nothing is sure to score
    elif _loads_entrypoint(config):
        config.entrypoint_path(must_exist=not pinned)
    config.dataset_path()
    from osmosis_ai.eval import plan_heldout

    plan_heldout(config)


class _Report:
    """A metrics record in the shape the views take (``kind``, ``step``, ``metrics``)."""

    def __init__(self, record: dict[str, Any], total_steps: int) -> None:
        self.kind = record.get("kind", "train")
        self.step = int(record.get("step", 0))
        self.total_steps = total_steps
        self.metrics = {
            k: (math.nan if v is None else v)
            for k, v in record.items() if k not in ("kind", "step", "time")
        }


def submit(
    config_path: Annotated[
        Path, typer.Argument(help="Training config (configs/training/NAME.toml).")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="Run name (default: the config's file name).")
    ] = None,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach", "-d",
            help="Train in the background (survives this terminal); print the run name.",
        ),
    ] = False,
    queue: Annotated[
        bool,
        typer.Option(
            "--queue", help="When another run holds the machine, wait (pending) instead of "
            "refusing.",
        ),
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON (no live display).")
    ] = False,
    secrets_file: Annotated[
        str | None,
        typer.Option(
            "--secrets-file",
            help="KEY=VALUE lines (a dotenv file; '-' reads stdin) put into the run's "
            "environment, e.g. the [secrets] it requires. Never written to the run folder.",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y",
            help="Do not ask before training on the committed code when uncommitted files "
            "under the rollout folder are left out (Git Sync).",
        ),
    ] = False,
    working_tree: Annotated[
        bool,
        typer.Option(
            "--working-tree",
            help="Run the rollout folder as it is on disk, uncommitted edits included, instead "
            "of its committed HEAD (Git Sync; ignored when the config pins commit_sha/branch).",
        ),
    ] = False,
) -> None:
    """Train the config's rollout with GRPO + LoRA as a run you can list, stop and resume."""
    from osmosis_ai.cli._secrets_file import apply_secrets_file
    from osmosis_ai.config import load_training_config
    from osmosis_ai.runs import pin_revision, resolve_model_path, snapshot_secrets

    # Set here for the checks below; the worker gets them on its stdin, not its environment.
    from_file = apply_secrets_file(secrets_file)
    config = load_training_config(config_path)
    _require_trainer()
    _warn_ignored_advanced(config, config_path)
    pin = pin_revision(config, sync=not working_tree)
    _precheck(config, pin.pinned)  # a config that cannot run fails on its one error line
    _say_code(pin, config.rollout_dir(must_exist=False), json_out=json_out, yes=yes)
    _warn_literal_secrets(config_path)
    resolve_model_path(config.experiment.model_path)  # a Hub id not cached and offline: fail here
    run = _create_run(config, config_path, pin, name=name, queue=queue)
    if pin.pinned:
        _export_pinned(config, pin, run)
    _start(run, json_out=json_out, detach=detach, resume=False,
           workspace=config.workspace_root,
           secrets={**snapshot_secrets(config_path), **_environ_secrets(from_file)})


def _warn_ignored_advanced(config: Any, config_path: Path) -> None:
    """Say which ``[advanced]`` settings (the 0.3 hosted trainer's) this trainer ignores."""
    ignored = config.ignored_advanced()
    if ignored:
        state.warn(
            f"{config_path}: [advanced] {', '.join(ignored)}: settings of the hosted trainer "
            "of osmosis-ai 0.3, not used by this trainer (ignored)"
        )


def _create_run(config: Any, config_path: Path, pin: Any, *, name: str | None, queue: bool) -> Any:
    """The run's folder, created under the launch lock (capacity checked unless ``--queue``)."""
    from osmosis_ai.runs import check_capacity, create_run_dir, launch_lock, runs_root_for

    exp = config.experiment
    root = runs_root_for(config)
    with launch_lock(root):
        if not queue:
            check_capacity(root, config.training.device)
        return create_run_dir(
            root, name or config_path.stem, config_file=config_path,
            model=exp.model_path, rollout=exp.rollout, dataset=exp.dataset,
            device=config.training.device, workspace_root=str(config.workspace_root),
            code=pin.as_status(),
        )


def _export_pinned(config: Any, pin: Any, run: Any) -> None:
    """Export the pinned revision into the run; its entrypoint must be in it (else the run fails)."""
    from osmosis_ai.runs import export_revision, pinned_path

    export_revision(pin, run.code)
    if _loads_entrypoint(config):
        entry = pinned_path(pin.as_status(), run.code, config.entrypoint_path(must_exist=False))
        if not entry.is_file():
            message = (
                f"{config.source_path}: [experiment].entrypoint {entry.name} is not in "
                f"revision {pin.revision} of {pin.repo_root} (looked for {entry})"
                + ("; commit it, or pass --working-tree" if pin.synced else "")
            )
            run.update_status(status="failed", phase="error", error=message)
            raise ConfigError(message)


def _environ_secrets(from_file: list[str]) -> dict[str, str]:
    """The ``--secrets-file`` names, as the worker reads them from its stdin."""
    import os

    from osmosis_ai.runs import ENVIRON_PREFIX

    return {f"{ENVIRON_PREFIX}{name}": os.environ[name] for name in from_file}


def _say_code(pin: Any, rollout_dir: Path, *, json_out: bool, yes: bool) -> None:
    """Which code the run trains on (Git Sync): the commit and the files it leaves out, or
    the working tree and why. On a terminal, files left out are a question (``--yes``: no)."""
    import sys

    first, *rest = pin.describe(rollout_dir)
    if not json_out:  # on stderr: stdout's first line stays "run NAME (PATH)" for scripts
        state.err_console.print(first, highlight=False, markup=False, soft_wrap=True)
    for line in rest:
        state.warn(line)
    if pin.left_out and not (yes or json_out) and sys.stdin.isatty() and state.console.is_terminal:
        typer.confirm("train on the committed code without them?", default=True, abort=True)


def _warn_literal_secrets(config_path: Path) -> None:
    """A secret written in the config file: the run keeps it redacted, but say where it
    should live instead (the file itself is often committed)."""

    from osmosis_ai.config import literal_secrets
    from osmosis_ai.safe_io import UnreadableFileError, read_toml

    try:
        found = literal_secrets(read_toml(config_path, follow=True)[1])
    except UnreadableFileError:
        return
    if found:
        state.warn(
            f"{config_path} holds secrets in the file ({', '.join(found)}); the run folder "
            "keeps them redacted, but keep them out of files you share or commit: export them "
            "in the environment and list their names under [secrets].required"
        )


def _start(
    run: Any, *, json_out: bool, detach: bool, resume: bool, workspace: Path,
    secrets: dict[str, Any], from_step: int = 0,
) -> None:
    from osmosis_ai.runs import ENVIRON_PREFIX, SECRETS_FLAG, encode_secrets, spawn_worker

    hidden = frozenset(k.removeprefix(ENVIRON_PREFIX) for k in secrets
                       if k.startswith(ENVIRON_PREFIX))

    env = {"OSMOSIS_DEBUG": "1"} if state.debug else {}
    # The real values of the redacted snapshot: on the worker's stdin, never its environment.
    proc = spawn_worker(
        run, _WORKER, *(["--resume"] if resume else []), "--workspace", str(workspace),
        *([SECRETS_FLAG] if secrets else []), env=env or None,
        stdin=encode_secrets(secrets) if secrets else None, hide_env=hidden,
    )
    if detach:
        if json_out:
            state.emit_json({"run": run.run_id, "path": str(run.path), "pid": proc.pid})
            return
        state.console.print(
            f"run [bold]{run.run_id}[/] started in the background (pid {proc.pid}), "
            f"log {run.log_file}\n"
            f"  follow: osmosis train logs {run.run_id} --follow\n"
            f"  status: osmosis train info {run.run_id}\n"
            f"  stop:   osmosis train stop {run.run_id}",
            highlight=False, soft_wrap=True,
        )
        return
    if not json_out:
        state.console.print(f"run [bold]{escape(run.run_id)}[/] ({escape(str(run.path))})",
                            highlight=False)
    _follow(run, proc, json_out=json_out, from_step=from_step)


def _quiet_view(total: int) -> Any:
    class _Quiet:
        def set_total(self, total_steps: int, start_step: int = 0) -> None: ...
        def on_phase(self, text: str) -> None: ...
        def on_report(self, report: Any) -> None: ...

    return _Quiet()


def _follow(
    run: Any, proc: subprocess.Popen[bytes], *, json_out: bool, from_step: int = 0
) -> None:
    """Draw the run's progress from the store until the worker exits; Ctrl-C asks it to stop
    after its current step, a second Ctrl-C terminates it, and so does a SIGTERM to this
    process (``timeout``, a job runner ending the command: the worker lives in a session of
    its own and would otherwise train on, unseen)."""
    with _terminate_worker_on_sigterm(proc):
        _draw(run, proc, json_out=json_out, from_step=from_step)


@contextlib.contextmanager
def _terminate_worker_on_sigterm(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """While in the block, a SIGTERM to the CLI terminates the worker (which then ends its run
    as ``killed`` and exits, so the CLI reports it); signals install only on the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.terminate())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _draw(
    run: Any, proc: subprocess.Popen[bytes], *, json_out: bool, from_step: int = 0
) -> None:
    from rich.live import Live

    from osmosis_ai.runs import load_run, read_metrics

    started = time.perf_counter()
    view: Any
    display: contextlib.AbstractContextManager[Any]
    if json_out:
        view, display = _quiet_view(0), contextlib.nullcontext()
    elif state.console.is_terminal:
        view = LiveView(0, from_step)
        display = Live(view, console=state.console, refresh_per_second=4, transient=False)
    else:
        # A log file or a pipe: a live display would only show up once, at the end.
        view, display = LineView(0), contextlib.nullcontext()
    shown: set[tuple[str, int]] = set()
    total = 0
    activity: str | None = None
    interrupts = 0
    with display:
        while True:
            try:
                exited = proc.poll() is not None
                record = load_run(run.path)
                if record is not None:
                    if record.total_steps and record.total_steps != total:
                        total = record.total_steps
                        view.set_total(total, record.step)
                    # Setup steps only: per-step activity (rollouts, update) would flood.
                    setup = record.phase in ("provision", "setup")
                    if setup and record.activity and record.activity != activity:
                        activity = record.activity
                        view.on_phase(activity)
                    warm = record.raw.get("warm_start")
                    warm_total = warm.get("total_steps") if isinstance(warm, dict) else None
                    if not isinstance(warm_total, int):
                        warm_total = total
                    for rec in read_metrics(run.path / "metrics.jsonl"):
                        # A warm-start step counts against the warm start's own steps.
                        is_warm = rec.get("kind") == "warm_start"
                        report = _Report(rec, warm_total if is_warm else total)
                        key = (str(report.kind), report.step)
                        if report.step > from_step and key not in shown:
                            shown.add(key)
                            view.on_report(report)
                if exited:
                    break
                time.sleep(_FOLLOW_POLL_S)
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts == 1:
                    run.request_stop()
                    state.warn(
                        "stopping after the current step (a checkpoint is saved); "
                        "Ctrl-C again to terminate now"
                    )
                else:
                    proc.terminate()
    _report(run, time.perf_counter() - started, json_out)


def _report(run: Any, elapsed: float, json_out: bool) -> None:
    from osmosis_ai.eval import read_heldout
    from osmosis_ai.learning import format_summary, held_out_of, heldout_lines, summarize_learning
    from osmosis_ai.runs import load_run, read_metrics

    record = load_run(run.path)
    status = record.status if record is not None else "unknown"
    raw = record.raw if record is not None else {}
    records = read_metrics(run.path / "metrics.jsonl")
    rewards = [
        float(r["reward_mean"]) if isinstance(r.get("reward_mean"), int | float) else math.nan
        for r in records if r.get("kind", "train") == "train"
    ]
    comparison = read_heldout(run.path)
    learning = summarize_learning(records, held_out=held_out_of(comparison))
    checkpoints = record.checkpoints() if record is not None else []
    last = checkpoints[-1].path if checkpoints else None
    payload = {
        "run": str(run.path),
        "run_id": run.run_id,
        "status": status,
        "steps": record.step if record is not None else 0,
        "last_checkpoint": str(last) if last else None,
        "wall_time_s": round(elapsed, 1),
        "reward_mean_per_step": rewards,
        # What changed: mean reward of the first vs the last steps (osmosis_ai.learning).
        "reward_first": learning.first if learning else None,
        "reward_last": learning.last if learning else None,
        "reward_window": learning.window if learning else None,
        "heldout": comparison.model_dump(mode="json") if comparison is not None else None,
        "heldout_error": raw.get("heldout_error"),
        "error": raw.get("error") if status not in ("finished", "stopped") else None,
        "log_file": str(run.log_file),
    }
    ok = status in ("finished", "stopped")
    if json_out:
        state.emit_json(payload)
        if not ok:
            raise typer.Exit(1)
        return
    con = state.console
    if rewards:
        con.print()
        con.print(ascii_chart(rewards), highlight=False)
        if learning is not None:
            for line in format_summary(learning):
                con.print(line, highlight=False)
    for line in heldout_lines(payload["heldout"]):
        con.print(line, highlight=False, markup=False)
    if payload["heldout_error"]:
        state.warn(f"held-out eval did not finish: {payload['heldout_error']}")
    colour = "green" if ok else "red"
    con.print(
        f"[bold {colour}]{escape(str(status))}[/] {payload['steps']} steps in "
        f"{elapsed / 60:.1f} min · metrics {escape(str(run.path / 'metrics.jsonl'))}",
        highlight=False,
    )
    if last:
        con.print(
            f"checkpoint {last}/adapter (PEFT: PeftModel.from_pretrained(base_model, path))",
            highlight=False, markup=False,
        )
    if not ok:
        state.error(f"run {run.run_id} {status}: {raw.get('error') or 'see the log'}")
        con.print(f"log: {run.log_file}", highlight=False, markup=False)
        if status in ("crashed", "stopped", "killed", "failed") and checkpoints:
            con.print(f"resume: osmosis train resume {run.run_id}", highlight=False, markup=False)
        raise typer.Exit(1)
    if status == "stopped":
        con.print(f"resume: osmosis train resume {run.run_id}", highlight=False, markup=False)


def resume(
    run_name: Annotated[str, typer.Argument(help="Run name or id (see 'osmosis train list').")],
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Continue in the background.")
    ] = False,
    queue: Annotated[
        bool, typer.Option("--queue", help="Wait for the machine instead of refusing.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    runs_dir: Annotated[
        Path | None, typer.Option("--runs-dir", help="The runs folder (default: ./runs).")
    ] = None,
) -> None:
    """Continue a stopped, crashed, killed or failed run from its last checkpoint.

    It starts at the checkpoint's step and data position. Every setting, path and secret comes
    from the config the run was submitted with (inside this workspace), read again; the run
    folder's copy must match it, or the resume is refused naming the field that differs.
    """
    from osmosis_ai.runs import (
        check_capacity,
        find_run,
        launch_lock,
        resume_secrets,
        workspace_root_here,
        workspace_runs_root,
    )

    _require_trainer()
    root = runs_dir or workspace_runs_root()
    record = find_run(root, run_name)
    if record.unreadable:
        raise ConfigError(f"run {record.run_id} is unreadable ({record.unreadable}); it cannot "
                          "be resumed. Fix status.json, or submit the config again")
    if record.live:
        raise ConfigError(
            f"run {record.run_id} is {record.status} (pid {record.raw.get('pid')}); "
            f"stop it first: osmosis train stop {record.run_id}"
        )
    total = record.total_steps
    if record.status == "finished" and total is not None and record.step >= total:
        raise ConfigError(
            f"run {record.run_id} already finished all {total} steps; nothing to resume "
            "(submit the config again for a new run)"
        )
    checkpoints = record.checkpoints()
    if not checkpoints:
        raise ConfigError(
            f"run {record.run_id} ({record.status} at step {record.step}) has no checkpoint "
            f"to resume from (none under {record.path / 'checkpoints'}); submit its config "
            "again, or save more often with [checkpoints] checkpoint_save_freq"
        )
    if not record.run_dir.config_file.is_file():
        raise ConfigError(f"run {record.run_id}: its config copy {record.run_dir.config_file} "
                          "is missing; submit the config again")
    workspace = workspace_root_here()
    secrets = resume_secrets(record.run_dir, record.raw, workspace)
    run = record.run_dir
    with launch_lock(record.path.parent):
        if not queue:
            check_capacity(record.path.parent, record.raw.get("device"))
        run.update_status(
            status="pending", phase="provision", activity=None, error=None, finished_at=None,
            resumed_from_step=checkpoints[-1].step,
            resumes=int(record.raw.get("resumes") or 0) + 1,
        )
    if not json_out:
        state.console.print(
            f"resuming {run.run_id} from step {checkpoints[-1].step} ({checkpoints[-1].path})",
            highlight=False,
        )
    _start(
        run, json_out=json_out, detach=detach, resume=True, workspace=workspace,
        secrets=secrets, from_step=checkpoints[-1].step,
    )


def register(app: typer.Typer) -> None:
    """Add the ``train`` command group to the root app."""
    from osmosis_ai.cli import _train_runs

    train_app = typer.Typer(
        name="train", help="Train a rollout with GRPO + LoRA and manage its runs.",
        no_args_is_help=True,
    )
    train_app.command("submit")(submit)
    _train_runs.register(train_app)
    train_app.command("resume")(resume)
    app.add_typer(train_app, name="train")
