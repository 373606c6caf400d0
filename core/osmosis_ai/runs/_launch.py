"""Starting a worker process for a run, and keeping two runs from sharing one machine.

Core never imports the trainer: a run is trained by ``python -m osmosis_trainer.worker
<run dir>``, in a session of its own (a terminal's Ctrl-C or hang-up does not reach it), its
output appended to ``<run>/train.log``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from osmosis_ai.errors import OsmosisError
from osmosis_ai.runs._process import describe_process
from osmosis_ai.runs._read import RunRecord, list_runs
from osmosis_ai.runs._store import RunDir
from osmosis_ai.safe_io import locked, open_append

__all__ = ["RunBusyError", "busy_runs", "check_capacity", "launch_lock", "spawn_worker"]


class RunBusyError(OsmosisError):
    """Another run already holds the device this run needs."""


def devices_conflict(a: str | None, b: str | None) -> bool:
    """Two runs fit at once only on two different, explicitly named GPUs (``cuda:0``/``cuda:1``):
    training plus its engine take a whole device, and on CPU they take every core."""
    if a and b and a.startswith("cuda:") and b.startswith("cuda:"):
        return a == b
    return True


def busy_runs(runs_root: Path, device: str | None, *, before: RunRecord | None = None) -> list[
    RunRecord
]:
    """Live (pending or running) runs that need ``device`` too; with ``before``, only those
    submitted earlier than that run (the queue order)."""
    out = []
    for record in list_runs(runs_root, status=("pending", "running")):
        if before is not None:
            if record.path == before.path:
                continue
            if (record.created_at or 0.0, record.run_id) > (before.created_at or 0.0, before.run_id):
                continue
        if devices_conflict(device, record.raw.get("device")):
            out.append(record)
    return out


def check_capacity(runs_root: Path, device: str | None) -> None:
    """Raise :class:`RunBusyError` when a live run already holds ``device``."""
    busy = busy_runs(runs_root, device)
    if not busy:
        return
    other = busy[0]
    raise RunBusyError(
        f"run {other.run_id} is {other.status} on this machine (device "
        f"{other.raw.get('device') or 'auto'}, pid {other.raw.get('pid')}); two training runs "
        "do not fit at once. Wait for it ('osmosis train list'), stop it ('osmosis train stop "
        f"{other.run_id}'), or submit with --queue to start when it ends"
    )


@contextlib.contextmanager
def launch_lock(runs_root: Path) -> Iterator[None]:
    """Serialise "check capacity, create the run" between concurrent submits."""
    runs_root.mkdir(parents=True, exist_ok=True)
    with locked(runs_root / ".launch.lock"):
        yield


def spawn_worker(
    run: RunDir,
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    hide_env: frozenset[str] = frozenset(),
) -> subprocess.Popen[bytes]:
    """Start ``python -m <module> <run dir> <args>`` detached from this terminal; it survives
    this process. Its pid is recorded as the run's worker at once.

    ``stdin`` (the run's secrets, :func:`encode_secrets`) is written to the worker's stdin, a
    pipe closed right after: unlike the environment, it is not readable by other processes in
    ``/proc/<pid>/environ`` while the worker lives. Without it, stdin is ``/dev/null``.
    ``hide_env``: names of this process's environment the worker does not inherit (secrets it
    gets on stdin instead).
    """
    inherited = {k: v for k, v in os.environ.items() if k not in hide_env}
    run.path.mkdir(parents=True, exist_ok=True)
    # A resumed folder may be crafted: its train.log is never a link written through.
    with os.fdopen(open_append(run.log_file), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(run.path), *args],
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**inherited, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    if proc.stdin is not None:
        # A pipe holds 64 KiB; larger input blocks until the worker reads it at start. A worker
        # that died first leaves a broken pipe: its own error is in the run's log and status.
        with contextlib.suppress(BrokenPipeError), proc.stdin:
            proc.stdin.write(stdin or b"")
    run.update_status(worker=describe_process(proc.pid), pid=proc.pid)
    return proc
