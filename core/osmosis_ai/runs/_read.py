"""Reading runs back: the list, one run, its metrics and checkpoints, waiting on a status.

This is what ``osmosis train list/info/logs/stop/resume``, the dashboard and ``osmosis model``
use; it never imports torch. A run whose worker died without recording an outcome (kill -9,
the OOM killer, a reboot) is detected here and recorded as ``crashed``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osmosis_ai.errors import OsmosisError, UnreadableFileError
from osmosis_ai.runs._process import process_alive
from osmosis_ai.runs._schema import inside, load_status, run_file_root
from osmosis_ai.runs._store import STATUSES, TERMINAL_STATUSES, RunDir
from osmosis_ai.safe_io import read_json_object, read_jsonl

__all__ = [
    "CheckpointInfo",
    "RunNotFoundError",
    "RunRecord",
    "find_run",
    "list_checkpoints",
    "list_runs",
    "load_run",
    "read_metrics",
    "wait_for_status",
]

HEARTBEAT_STALE_S = 300.0
"""A worker on another host silent this long is shown as ``unknown``."""


class RunNotFoundError(OsmosisError, LookupError):
    """No run, or more than one, matches the name given on the command line."""


@dataclass(frozen=True)
class CheckpointInfo:
    """One saved checkpoint: its step, the reward of that step and the adapter folder."""

    step: int
    path: Path
    reward: float | None
    saved_at: float | None
    unreadable: str | None = None
    """Why ``checkpoint.json`` could not be used (the checkpoint is still listed)."""

    @property
    def adapter(self) -> Path:
        """The PEFT adapter folder (``PeftModel.from_pretrained(base, adapter)``)."""
        return self.path / "adapter"

    @property
    def name(self) -> str:
        """``step_NNNNNN``, or ``warm`` for the warm start's checkpoint (step 0)."""
        return self.path.name

    @property
    def label(self) -> str:
        """What follows ``RUN:`` to name it: the step, or ``warm``."""
        return "warm" if self.name == "warm" else str(self.step)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "reward": self.reward, "path": str(self.path),
            "adapter": str(self.adapter), "saved_at": self.saved_at, "name": self.label,
            "unreadable": self.unreadable,
        }


@dataclass(frozen=True)
class RunRecord:
    """One run as a reader sees it: the stored status with its liveness checked."""

    path: Path
    status: str
    """One of :data:`~osmosis_ai.runs.STATUSES` (``crashed`` when the worker died silently)."""
    raw: dict[str, Any] = field(repr=False)
    """``status.json`` as written (checked against its schema; ``{}`` when unreadable)."""
    heartbeat_age_s: float | None = None
    unreadable: str | None = None
    """Why ``status.json`` cannot be used (a link, not JSON, a field of the wrong type): the
    run is listed with status ``unknown`` and this reason, and nothing trusts its contents."""

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or self.path.name)

    @property
    def phase(self) -> str:
        return str(self.raw.get("phase") or "init")

    @property
    def activity(self) -> str | None:
        """What the worker is doing within the phase (``rollouts``, ``update``, ...)."""
        value = self.raw.get("activity")
        return str(value) if value else None

    @property
    def step(self) -> int:
        return int(self.raw.get("step") or 0)

    @property
    def total_steps(self) -> int | None:
        value = self.raw.get("total_steps")
        return int(value) if value is not None else None

    @property
    def model(self) -> str | None:
        return self.raw.get("model")

    @property
    def rollout(self) -> str | None:
        return self.raw.get("rollout")

    @property
    def dataset(self) -> str | None:
        return self.raw.get("dataset")

    @property
    def error(self) -> str | None:
        return self.raw.get("error")

    @property
    def created_at(self) -> float | None:
        return self.raw.get("created_at")

    @property
    def last_reward(self) -> float | None:
        return _number((self.raw.get("last_train") or {}).get("reward_mean"))

    @property
    def log_file(self) -> Path:
        return RunDir(self.path, self.name).log_file

    @property
    def run_dir(self) -> RunDir:
        """The writer's view of the same folder (stop requests, status updates)."""
        return RunDir(self.path, self.name)

    @property
    def live(self) -> bool:
        return self.status in ("pending", "running")

    def metrics(self) -> list[dict[str, Any]]:
        return self.metrics_checked()[0]

    def metrics_checked(self) -> tuple[list[dict[str, Any]], list[str]]:
        """``metrics.jsonl``'s records and, located, what could not be read: the whole file
        (a link, a FIFO, too big) or single lines (too deep, huge numbers, cut short)."""
        try:
            found = read_jsonl(self.path / "metrics.jsonl", under=run_file_root(self.path))
        except UnreadableFileError as exc:
            return [], ([] if exc.missing else [str(exc)])
        return found.objects(), found.problems

    def checkpoints(self) -> list[CheckpointInfo]:
        folder = inside(self.path, "checkpoints")
        return list_checkpoints(folder) if folder is not None else []

    def summary(self) -> dict[str, Any]:
        """The fields ``train list`` shows (JSON-ready)."""
        return {
            "name": self.name, "run_id": self.run_id, "status": self.status,
            "phase": self.phase, "rollout": self.rollout, "model": self.model,
            "dataset": self.dataset, "step": self.step, "total_steps": self.total_steps,
            "last_reward": self.last_reward, "created_at": self.created_at,
            "path": str(self.path), "unreadable": self.unreadable,
        }


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _heartbeat_age(path: Path) -> float | None:
    try:
        return max(0.0, time.time() - (path / "heartbeat").lstat().st_mtime)
    except OSError:
        return None


def load_run(path: Path, *, record_crash: bool = True) -> RunRecord | None:
    """The run at ``path`` with its liveness checked, or ``None`` when it is not a run folder.

    A ``status.json`` that fails its schema gives a record with ``unreadable`` set (status
    ``unknown``, no field of it used). A ``pending``/``running`` run whose worker is gone is ``crashed``; with ``record_crash``
    that is written back to ``status.json`` (so it stays so after a reboot).
    """
    path = Path(path)
    raw, problem = load_status(path)
    if problem is not None:
        return RunRecord(path=path, status="unknown", raw={}, unreadable=problem)
    if raw is None:
        return None
    beat = _heartbeat_age(path)
    status = _stored_status(raw)
    if status in ("pending", "running"):
        alive = process_alive(raw.get("worker") or {"pid": raw.get("pid")})
        if alive is False:
            # Read again: the worker may have recorded its outcome just before exiting.
            raw = load_status(path)[0] or raw
            status = _stored_status(raw)
            if status in ("pending", "running"):
                status = "crashed"
                if record_crash:
                    raw = _record_crash(path, raw, beat)
        elif alive is None and (beat is None or beat > HEARTBEAT_STALE_S):
            status = "unknown"
    return RunRecord(path=path, status=status, raw=raw, heartbeat_age_s=beat)


def _stored_status(raw: dict[str, Any]) -> str:
    value = raw.get("status")
    if value == "completed":  # the name before the seeds' statuses
        return "finished"
    return value if value in STATUSES else "unknown"


def _record_crash(path: Path, raw: dict[str, Any], beat: float | None) -> dict[str, Any]:
    worker = raw.get("worker") or {}
    pid = worker.get("pid", raw.get("pid"))
    last_seen = time.time() - beat if beat is not None else raw.get("updated_at")
    try:
        return RunDir(path, str(raw.get("name") or path.name)).update_status(
            status="crashed", phase="error", finished_at=last_seen,
            error=(
                f"the worker (pid {pid}) ended without recording an outcome: killed by a "
                "signal (kill -9, the OOM killer) or the machine went down. Checkpoints saved "
                "before are usable: osmosis train resume " + path.name
            ),
        )
    except (OSError, UnreadableFileError):  # a read-only store, a crafted lock: report only
        return {**raw, "status": "crashed", "phase": "error"}


def list_runs(runs_root: Path, *, status: Iterable[str] | None = None) -> list[RunRecord]:
    """Every run under ``runs_root``, oldest first, optionally only those with a status."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    wanted = set(status) if status is not None else None
    out = []
    for child in root.iterdir():
        # A link is never followed: a run folder linked in from elsewhere is not listed.
        if child.is_symlink() or not child.is_dir() or child.name.startswith("."):
            continue
        record = load_run(child)
        if record is None or (wanted is not None and record.status not in wanted):
            continue
        out.append(record)
    out.sort(key=lambda r: (r.created_at or 0.0, r.run_id))
    return out


def find_run(runs_root: Path, query: str) -> RunRecord:
    """The one run named ``query``: a run id (``name-YYYYmmdd-HHMMSS``), a unique prefix of
    one, a run name given to exactly one run, or a path to a run folder.

    Raises:
        RunNotFoundError: none or several match; the message lists the candidates.
    """
    direct = Path(query)
    if (direct / "status.json").is_file():
        # A path the user typed: its links are theirs, resolved once here; below it, the
        # readers follow none.
        found = load_run(direct.resolve())
        if found is not None:
            return found
    runs = list_runs(runs_root)
    matchers: tuple[Callable[[RunRecord], bool], ...] = (
        lambda r: r.run_id == query,
        lambda r: r.name == query,
        lambda r: r.run_id.startswith(query),
    )
    for matcher in matchers:
        hits = [r for r in runs if matcher(r)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            listed = ", ".join(f"{r.run_id} ({r.status})" for r in hits)
            raise RunNotFoundError(
                f"run name {query!r} matches {len(hits)} runs: {listed}; give the full run id"
            )
    known = ", ".join(r.run_id for r in runs[-10:]) or "none"
    raise RunNotFoundError(
        f"no run named {query!r} under {runs_root} (runs there: {known}); "
        "see 'osmosis train list'"
    )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All records of a ``metrics.jsonl`` file (a torn or bad line is skipped; no file: none).

    Raises:
        UnreadableFileError: the file is a link, not a regular file, too big or not UTF-8.
    """
    p = Path(path)
    try:
        return read_jsonl(p, under=p.parent).objects()
    except UnreadableFileError as exc:
        if exc.missing:
            return []
        raise


def _checkpoint_meta(root: Path, folder: Path) -> tuple[dict[str, Any], str | None]:
    """``checkpoint.json`` of a checkpoint folder (``{}`` and why, when it cannot be read)."""
    try:
        return read_json_object(folder / "checkpoint.json", under=root), None
    except UnreadableFileError as exc:
        return {}, (None if exc.missing else str(exc))


def list_checkpoints(checkpoints_dir: Path) -> list[CheckpointInfo]:
    """Complete checkpoints (those with their trainer state), oldest first."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.iterdir()):
        digits = p.name.removeprefix("step_")
        if not (p.name.startswith("step_") and digits.isdigit() and inside(root, p.name)
                and p.is_dir() and inside(p, "trainer_state.pt")):
            continue
        meta, problem = _checkpoint_meta(root, p)
        metrics = meta.get("metrics")
        metrics = metrics if isinstance(metrics, dict) else {}
        step = meta.get("step")
        out.append(
            CheckpointInfo(
                step=step if isinstance(step, int) and not isinstance(step, bool)
                else int(digits),
                path=p,
                reward=_number(metrics.get("reward_mean")),
                saved_at=_number(meta.get("saved_at")),
                unreadable=problem,
            )
        )
    return [*_warm_checkpoint(root), *out]


def _warm_checkpoint(root: Path) -> list[CheckpointInfo]:
    """``checkpoints/warm`` (the ``[warm_start]`` adapter RL starts from), as step 0."""
    p = root / "warm"
    if p.is_symlink() or not (p / "trainer_state.pt").is_file():
        return []
    meta, problem = _checkpoint_meta(root, p)
    return [CheckpointInfo(step=0, path=p, reward=None, saved_at=_number(meta.get("saved_at")),
                           unreadable=problem)]


def wait_for_status(
    path: Path,
    until: Callable[[RunRecord], bool],
    *,
    poll_s: float = 0.2,
    on_poll: Callable[[RunRecord], None] | None = None,
) -> RunRecord:
    """Block until the run at ``path`` satisfies ``until`` (re-reading the store every
    ``poll_s``). It returns once the run is terminal even if ``until`` never held, so a
    waiter never hangs on a dead run."""
    while True:
        record = load_run(path)
        if record is not None:
            if on_poll is not None:
                on_poll(record)
            if until(record) or record.status in TERMINAL_STATUSES:
                return record
        time.sleep(poll_s)
