"""The training worker: ``python -m osmosis_trainer.worker <run dir> [--resume]``.

``osmosis train submit`` creates the run folder (config copy, pinned code, status) and starts
this module in a session of its own, its output going to ``<run>/train.log``. It claims the
run (pid, start time, boot id, heartbeat), waits while an earlier run holds the device
(``--queue``: status ``pending``, phase ``provision``), trains, and records how it ended:
``finished``, ``stopped`` (a stop request: after the current step, with a checkpoint),
``killed`` (SIGTERM), ``failed`` (the error is in ``status.json`` and the log). A kill -9 or
the OOM killer leaves no record: readers see the dead pid and show ``crashed``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from osmosis_ai.config import redact_urls
from osmosis_ai.errors import OsmosisError
from osmosis_ai.eval import HeldOutPlan, HeldOutSet, plan_heldout, run_heldout
from osmosis_ai.runs import (
    SECRETS_FLAG,
    RunDir,
    apply_secrets,
    busy_runs,
    confined_path_errors,
    load_run,
    pinned_path,
    read_status,
    resolve_model_path,
    take_environ,
    take_secrets,
    verify_pinned_code,
)

__all__ = ["main"]

_QUEUE_POLL_S = 2.0


class _Killed(Exception):
    """SIGTERM arrived: the run ends as ``killed``."""


def _wait_for_device(run: RunDir, device: str | None) -> bool:
    """Block while an earlier live run holds the device; False when stopped meanwhile."""
    me = load_run(run.path)
    root = run.path.parent
    announced = False
    while me is not None:
        busy = busy_runs(root, device, before=me)
        if not busy:
            return True
        if run.stop_requested():
            return False
        if not announced:
            run.update_status(activity=f"queued behind {busy[0].run_id}")
            print(f"queued: waiting for {busy[0].run_id} to end", flush=True)
            announced = True
        time.sleep(_QUEUE_POLL_S)
    return True


def _load_config(
    run: RunDir, workspace: Path, secrets: dict[str, Any], *, resume: bool
) -> Any:
    from osmosis_ai.config import load_training_config
    from osmosis_ai.errors import ConfigError

    config = load_training_config(run.config_file)
    # The snapshot's secrets are redacted; the command that started us passed the real values.
    config = apply_secrets(run.config_file, config, secrets)
    # The copy lives in the run folder; paths resolve against the workspace the command ran in
    # (given by the CLI), never against a root recorded in the folder: a run folder is data.
    config._workspace_root = workspace
    # 'train resume' compared the snapshot with the user's own config; check its paths here
    # again, so that no path of a folder, however this worker was started, reaches outside.
    errors = confined_path_errors(config, workspace) if resume else []
    if errors:
        raise ConfigError(
            f"{run.config_file}: a resumed run only uses paths inside its workspace: "
            + "; ".join(errors)
        )
    return config


def _train(run: RunDir, resume: bool, workspace: Path, secrets: dict[str, Any]) -> int:
    status = read_status(run.path) or {}
    config = _load_config(run, workspace, secrets, resume=resume)
    code = status.get("code")
    # A pinned run's code was exported into the run; before anything loads it, its files are
    # checked against that commit of the workspace's own repository.
    pinned_repo = (
        verify_pinned_code(code.get("revision"), workspace, run.code)
        if isinstance(code, dict) and code.get("pinned") else None
    )
    if not _wait_for_device(run, status.get("device")):
        run.update_status(status="stopped", phase="cleanup", activity=None,
                          finished_at=time.time())
        return 0
    # Heavy imports (torch) only once the machine is ours.
    from osmosis_ai.console import line_view, state
    from osmosis_trainer.job import plan_job, run_training

    run.update_status(status="running", phase="setup", activity="checking the config")
    config.experiment.model_path = resolve_model_path(config.experiment.model_path)
    # Resolved against the submitting workspace (before a pinned revision moves the root):
    # the eval finds the run's checkpoints under that workspace's runs/.
    heldout = plan_heldout(config)
    if pinned_repo is not None:
        # The rollout code comes from the pinned revision (exported into the run), the
        # dataset from the workspace as it is now.
        config.experiment.dataset = str(config.dataset_path())
        if config.warm_start is not None:
            config.warm_start.dataset = str(config.warm_start_dataset_path())
        config._workspace_root = pinned_path(
            {"pinned": True, "repo_root": str(pinned_repo)}, run.code, config.workspace_root
        )
    plan = plan_job(config)
    run.update_status(total_steps=plan.total_steps)
    view = line_view(plan.total_steps)
    state.console.print(
        f"run {run.run_id}: {plan.total_steps} steps, rollout {config.experiment.rollout} "
        f"({plan.entrypoint}), model {status.get('model')}, engine {plan.engine} on "
        f"{plan.device}" + (" (resuming)" if resume else ""),
        highlight=False, soft_wrap=True, markup=False,
    )
    result = asyncio.run(
        run_training(
            config, run, plan=plan, resume=resume,
            on_report=view.on_report, on_phase=view.on_phase,
        )
    )
    state.console.print(f"{result.status}: {result.steps_done} steps", markup=False)
    if heldout is not None and result.status == "finished":
        _heldout_eval(run, heldout)
    return 0


def _heldout_eval(run: RunDir, plan: HeldOutPlan) -> None:
    """``[heldout]``: the final checkpoint against its base model. The run has finished and its
    checkpoint is saved, so a failure here is recorded (``heldout_error``), not fatal."""
    from osmosis_ai.console import state
    from osmosis_ai.eval import EvalEvents, warm_checkpoint
    from osmosis_ai.learning import held_out_of, heldout_lines

    def phase(model: str) -> EvalEvents:
        def on_phase(name: str) -> None:
            run.update_status(activity=f"held-out eval, {model}: {name}")

        return EvalEvents(on_phase=on_phase)

    def on_set(held: HeldOutSet) -> None:
        dataset = held.dataset or plan.eval_config
        state.console.print(
            f"held-out eval{f' {held.name}' if held.name else ''}: trained vs base"
            f"{' vs warm start' if warm_checkpoint(run.path) else ''} on {dataset.name} "
            f"({plan.n} sample(s) per row)",
            markup=False,
        )

    try:
        comparison = asyncio.run(
            run_heldout(plan, run.path, run.run_id, events=phase("trained"),
                        baseline_events=phase("base"), warm_events=phase("warm start"),
                        on_set=on_set)
        )
    except Exception as exc:  # the training result stands; say why the comparison is missing
        message = str(exc) if isinstance(exc, OsmosisError) else f"{type(exc).__name__}: {exc}"
        message = redact_urls(message)
        run.update_status(activity=None, heldout_error=message)
        state.console.print(f"held-out eval failed: {message}", markup=False)
        return
    run.update_status(activity=None)
    held = held_out_of(comparison)
    state.console.print(
        f"held-out ({held.rows} rows) {held.reward_text()}"
        if held is not None else f"held-out: {comparison.verdict}",
        markup=False,
    )
    for line in heldout_lines(comparison.model_dump(mode="json")):
        state.console.print(line, markup=False, highlight=False)


@contextlib.contextmanager
def _prune_empty_artifacts(run: RunDir) -> Iterator[None]:
    """Drop the per-rollout artifact folders the rollouts left empty, when the run ends."""
    try:
        yield
    finally:
        if run.artifacts.is_dir():
            for folder in sorted(run.artifacts.glob("*/*"), reverse=True):
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only succeeds when empty
                    folder.parent.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m osmosis_trainer.worker")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--workspace", type=Path, default=None,
        help="the workspace the rollout code and data come from (default: the current folder)",
    )
    parser.add_argument(
        SECRETS_FLAG, dest="secrets_stdin", action="store_true",
        help="read the run's secrets (one JSON object) from stdin, a pipe from the command",
    )
    args = parser.parse_args(argv)
    # Read before anything else runs, then stdin is /dev/null: no child inherits the pipe.
    try:
        secrets = take_secrets(sys.stdin.buffer) if args.secrets_stdin else {}
        take_environ(secrets)  # --secrets-file pairs: the rollouts' environment
    except OsmosisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.secrets_stdin:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    workspace = (args.workspace or Path.cwd()).resolve()
    status = read_status(args.run_dir)
    if status is None:
        print(f"{args.run_dir}: not a run folder (no status.json)", file=sys.stderr)
        return 2
    run = RunDir(args.run_dir, str(status.get("name") or args.run_dir.name))
    from osmosis_ai.console import quiet_libraries
    from osmosis_trainer._openmp import apply_openmp_defaults

    apply_openmp_defaults()  # before torch loads: libgomp reads it once
    if os.environ.get("OSMOSIS_DEBUG") != "1":
        quiet_libraries()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    killed = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal killed
        killed = True
        # asyncio.run turns SIGINT into a cancellation of the training task: the loop
        # unwinds (engine closed, status written) instead of dying mid-write.
        signal.raise_signal(signal.SIGINT)

    # A worker started from a background shell inherits SIGINT ignored, and Python then installs
    # no KeyboardInterrupt handler: on_term's SIGINT would do nothing and the run never end.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_term)
    run.claim(status="pending", phase="provision")
    with run.heartbeat(), _prune_empty_artifacts(run):
        try:
            return _train(run, args.resume, workspace, secrets)
        except (KeyboardInterrupt, asyncio.CancelledError) as exc:
            outcome = "killed" if killed else "stopped"
            run.update_status(
                status=outcome, phase="cleanup", activity=None, finished_at=time.time(),
                error="terminated (SIGTERM)" if killed else f"interrupted ({type(exc).__name__})",
            )
            print(outcome, flush=True)
            return 143 if killed else 130
        except BaseException as exc:
            if isinstance(exc, OsmosisError):
                print(f"error: {redact_urls(str(exc))}", file=sys.stderr, flush=True)
            else:
                # train.log is shown by 'train logs' and the dashboard: no URL credential.
                print(redact_urls(traceback.format_exc()), file=sys.stderr, end="", flush=True)
            current = read_status(run.path) or {}
            if current.get("status") in ("pending", "running"):
                message = (
                    f"{type(exc).__name__}: {exc}" if not isinstance(exc, OsmosisError)
                    else str(exc)
                )
                run.update_status(
                    status="failed", phase="error", activity=None, finished_at=time.time(),
                    error=redact_urls(message),  # shown by train info and the dashboard
                )
            return 1


if __name__ == "__main__":
    sys.exit(main())
