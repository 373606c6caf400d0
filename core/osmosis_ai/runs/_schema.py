"""What a reader accepts in a run folder: ``status.json``'s schema and paths confined to the run.

A run folder is data that may have been copied, edited or crafted. Readers (``train list``,
``train stop``, the dashboard) check ``status.json`` against :class:`StatusFile` before using a
field, so one corrupt run shows as unreadable (with what is wrong) instead of crashing every
listing; and every file they open must be a plain file or folder inside the run folder, never a
symbolic link to somewhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.safe_io import read_json

__all__ = [
    "StatusFile",
    "WorkerInfo",
    "check_status",
    "inside",
    "load_status",
    "run_file_root",
]

STATUS_FILE = "status.json"


class WorkerInfo(BaseModel):
    """``status.json``'s ``worker``: the process that owns the run (see ``describe_process``)."""

    model_config = ConfigDict(extra="allow", strict=True)

    pid: int | None = None
    """The worker's process id."""
    host: str | None = None
    """The host name it runs on (another host: only the heartbeat tells liveness)."""
    boot_id: str | None = None
    """The kernel's boot id when it started (a reboot since means it is gone)."""
    pid_start: int | None = None
    """Its start time in clock ticks since boot (``/proc/<pid>/stat`` field 22): a reused pid
    has another one."""


class StatusFile(BaseModel):
    """The fields of ``status.json`` that readers use, with their types. Other keys (written by
    newer workers) are kept as they are."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: str | None = None
    """The run's name as submitted."""
    run_id: str | None = None
    """The run folder's name (``<name>-<YYYYmmdd-HHMMSS>``)."""
    status: str | None = None
    """One of the seeds' statuses; anything else reads as ``unknown``."""
    phase: str | None = None
    """The lifecycle phase (``init`` ... ``complete``)."""
    activity: str | None = None
    """What the worker is doing within the phase."""
    step: int = Field(default=0, ge=0)
    """The last finished training step."""
    total_steps: int | None = Field(default=None, ge=0)
    """The steps the run will take."""
    created_at: float | None = None
    """Submission time (Unix seconds)."""
    updated_at: float | None = None
    """Last status write (Unix seconds)."""
    finished_at: float | None = None
    """When the run ended (Unix seconds)."""
    pid: int | None = None
    """The worker's pid (older runs; ``worker`` says more)."""
    worker: WorkerInfo | None = None
    """The process that owns the run."""
    model: str | None = None
    """The base model."""
    rollout: str | None = None
    """The rollout trained."""
    dataset: str | None = None
    """The training dataset."""
    device: str | None = None
    """The training device asked for."""
    error: str | None = None
    """Why the run failed, crashed or was killed."""
    heldout_error: str | None = None
    """Why the held-out eval at the end did not finish."""
    last_train: dict[str, Any] | None = None
    """A summary of the last training step's metrics."""
    last_eval: dict[str, Any] | None = None
    """A summary of the last validation's metrics."""
    last_checkpoint: str | None = None
    """The latest checkpoint folder."""
    code: dict[str, Any] | None = None
    """The pinned rollout code (``[experiment] commit_sha``/``branch``)."""
    cluster: dict[str, Any] | None = None
    """Ray workers and engines, for a run on a cluster."""


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg'].lower()} (found {err.get('input')!r:.40})")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def check_status(data: Any) -> str | None:
    """What is wrong with a parsed ``status.json`` (``None``: nothing)."""
    if not isinstance(data, dict):
        return f"not a JSON object but {type(data).__name__}"
    try:
        StatusFile.model_validate(data)
    except ValidationError as exc:
        return _describe(exc)
    return None


def load_status(run_path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(status, None)`` for a valid ``status.json``, ``(None, problem)`` for one that cannot
    be used (a link, a FIFO, too big or deep, not JSON, wrong field types) and ``(None, None)``
    when there is none. Read through :mod:`osmosis_ai.safe_io`: never hangs, never recurses."""
    path = Path(run_path) / STATUS_FILE
    try:
        data = read_json(path, under=run_file_root(run_path))
    except UnreadableFileError as exc:
        return None, (None if exc.missing else str(exc))
    problem = check_status(data)
    if problem is not None:
        return None, f"this file is unreadable: {path}: {problem}"
    return data, None


def run_file_root(run_path: Path) -> Path:
    """The folder a run folder's files are opened under: its parent, so the run folder itself
    is a component that is never followed when it is a link."""
    path = Path(run_path)
    return path.parent if path.name not in ("", ".", "..") else path


def inside(root: Path, *parts: str) -> Path | None:
    """``root/parts...`` when it exists, is no symbolic link (nor is any folder between) and
    resolves inside ``root``; else ``None``. What readers of a run folder open."""
    path = Path(root)
    for part in parts:
        path = path / part
        if path.is_symlink():
            return None
    if not path.exists():
        return None
    try:
        path.resolve().relative_to(Path(root).resolve())
    except (OSError, ValueError):
        return None
    return path
