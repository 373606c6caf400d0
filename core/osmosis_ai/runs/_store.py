"""The on-disk record of one training run: written by the trainer's worker, read by everyone.

``<workspace>/runs/<name>-<YYYYmmdd-HHMMSS>/`` holds::

    config.toml          the training config as submitted, secrets redacted (resume reads it)
    status.json          {name, run_id, status, phase, activity, step, total_steps, pid, ...}
    heartbeat            touched every few seconds by the live worker
    train.log            the worker's output (plain progress lines, warnings, tracebacks)
    metrics.jsonl        one record per step (and per validation)
    failures.jsonl       per step with failed rollouts: counts by category and a few messages
    tensorboard/         the same scalars for TensorBoard
    checkpoints/         step_NNNNNN/ (PEFT adapter + trainer state + checkpoint.json), latest
    adapters/            the adapter of the most recent steps, served to the engine
    artifacts/           one folder per rollout (``ctx.artifacts_dir``)
    code/                the rollout code at the pinned revision ([experiment] commit_sha/branch)
    STOP                 (optional) a stop request; the loop stops after its current step

Every file is replaced atomically (written aside, then renamed), so a reader in another
terminal, after a crash or after a reboot never sees half a status.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, get_args

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.runs._process import describe_process
from osmosis_ai.runs._schema import run_file_root
from osmosis_ai.runs._secrets import write_config_snapshot
from osmosis_ai.safe_io import locked, read_json

_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")

__all__ = [
    "PHASES",
    "STATUSES",
    "TERMINAL_STATUSES",
    "Phase",
    "RunDir",
    "RunStatus",
    "create_run_dir",
    "read_status",
]

RunStatus = Literal[
    "pending", "running", "finished", "failed", "stopped", "killed", "crashed", "unknown"
]
"""The seeds' statuses. ``finished`` was called ``completed`` before (still read as such)."""
Phase = Literal["init", "provision", "setup", "train", "finalize", "complete", "error", "cleanup"]
"""The seeds' lifecycle phases: init → provision → setup → train → finalize → complete, or
error (failed, crashed) / cleanup (stopped, killed)."""

STATUSES: tuple[str, ...] = get_args(RunStatus)
PHASES: tuple[str, ...] = get_args(Phase)
TERMINAL_STATUSES = frozenset({"finished", "failed", "stopped", "killed", "crashed"})

HEARTBEAT_EVERY_S = 5.0


@dataclass
class RunDir:
    """Paths and status updates of one run folder."""

    path: Path
    name: str

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def adapters(self) -> Path:
        return self.path / "adapters"

    @property
    def artifacts(self) -> Path:
        """Per-rollout folders handed to the rollout as ``ctx.artifacts_dir``."""
        return self.path / "artifacts"

    @property
    def code(self) -> Path:
        """The rollout code exported at the pinned git revision (when the config pins one)."""
        return self.path / "code"

    @property
    def config_file(self) -> Path:
        return self.path / "config.toml"

    @property
    def status_file(self) -> Path:
        return self.path / "status.json"

    @property
    def log_file(self) -> Path:
        return self.path / "train.log"

    @property
    def heartbeat_file(self) -> Path:
        return self.path / "heartbeat"

    @property
    def stop_file(self) -> Path:
        return self.path / "STOP"

    def stop_requested(self) -> bool:
        return self.stop_file.exists()

    def request_stop(self) -> None:
        """Ask the worker to stop after its current step (it checkpoints, then ``stopped``)."""
        _write_atomic(self.stop_file, f"{time.time()}\n")

    def update_status(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into ``status.json`` (locked, written atomically) and return it."""
        with locked(self.path / ".status.lock"):
            current = read_status(self.path) or {"name": self.name, "run_id": self.run_id}
            current.update(fields)
            current["updated_at"] = time.time()
            _write_atomic(self.status_file, json.dumps(current, indent=2, default=str))
        return current

    def claim(self, *, status: str = "pending", phase: str = "provision") -> dict[str, Any]:
        """Record this process as the run's worker (pid, start time, host, boot id)."""
        self.stop_file.unlink(missing_ok=True)
        return self.update_status(
            status=status, phase=phase, worker=describe_process(), pid=os.getpid(),
            error=None, finished_at=None,
        )

    def beat(self) -> None:
        _write_atomic(self.heartbeat_file, f"{time.time()}\n")

    @contextlib.contextmanager
    def heartbeat(self, every_s: float = HEARTBEAT_EVERY_S) -> Iterator[None]:
        """Touch ``heartbeat`` from a daemon thread while the block runs: a reader tells a
        live worker from a silent death even where it cannot see the pid (another host)."""
        done = threading.Event()
        self.beat()

        def loop() -> None:
            while not done.wait(every_s):
                with contextlib.suppress(OSError):
                    self.beat()

        thread = threading.Thread(target=loop, name="osmosis-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=every_s)


def read_status(run_path: Path) -> dict[str, Any] | None:
    """The run's ``status.json`` as written, or ``None`` when missing or unreadable."""
    try:
        data = read_json(Path(run_path) / "status.json", under=run_file_root(run_path))
    except UnreadableFileError:
        return None
    return data if isinstance(data, dict) else None


def create_run_dir(
    runs_root: Path,
    name: str,
    *,
    config_file: Path | None = None,
    now: datetime | None = None,
    **fields: Any,
) -> RunDir:
    """Create ``runs_root/<name>-<timestamp>/`` with a config snapshot (its secrets redacted)
    and a ``pending`` status.

    Raises:
        ConfigError: ``name`` is not a plain folder name (``../x``, ``/abs``, ``a/b``, ...).
    """
    if not _RUN_NAME.fullmatch(name):
        from osmosis_ai.errors import ConfigError

        raise ConfigError(
            f"run name {name!r} is not allowed: use letters, digits, '-', '_' and '.' (starting "
            "with a letter or digit, at most 100 characters); runs always live under "
            f"{runs_root}"
        )
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = Path(runs_root) / f"{name}-{stamp}"
    base.parent.mkdir(parents=True, exist_ok=True)
    path, n = base, 1
    while True:
        try:
            path.mkdir()
            break
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")
    run = RunDir(path=path, name=name)
    if config_file is not None:
        write_config_snapshot(Path(config_file), run.config_file)
    run.update_status(
        status="pending",
        phase="init",
        created_at=time.time(),
        pid=os.getpid(),
        worker=describe_process(),
        config_path=str(Path(config_file).resolve()) if config_file else None,
        **fields,
    )
    return run


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # a leftover, or a link planted there: never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
