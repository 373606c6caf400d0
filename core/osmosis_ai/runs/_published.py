"""Where a checkpoint went: its deployments (``osmosis model deploy``) and Hugging Face uploads
(``osmosis model export --push-to-hub``), recorded in ``<checkpoint>/published.json``.

The commands that publish write it; ``train info`` and the dashboard read it back as each
checkpoint's deployment and upload status (the seeds' checkpoint list shows both). It sits
beside ``adapter/``, so an export never copies it. Recording is best-effort: a read-only run
folder never stops a deploy or an upload.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.runs._process import describe_process, process_alive
from osmosis_ai.runs._store import _write_atomic
from osmosis_ai.safe_io import locked, read_json_object

__all__ = [
    "PUBLISHED_FILE",
    "publish_status",
    "record_deployment",
    "record_deployment_end",
    "record_upload",
]

PUBLISHED_FILE = "published.json"
_KEEP = 20
"""Entries kept per kind (the newest)."""


def _read_checked(checkpoint: Path) -> tuple[dict[str, Any], str | None]:
    """``published.json`` (``{}`` when missing) and why it could not be read."""
    path = Path(checkpoint)
    try:
        return read_json_object(path / PUBLISHED_FILE, under=path.parent), None
    except UnreadableFileError as exc:
        return {}, (None if exc.missing else str(exc))


def _read(checkpoint: Path) -> dict[str, Any]:
    return _read_checked(checkpoint)[0]


def _entries(data: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    value = data.get(kind)
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def _append(
    checkpoint: Path, kind: str, entry: dict[str, Any], *, replace: str | None = None
) -> None:
    """Add ``entry`` to ``kind`` (or update the one whose ``id`` is ``replace``)."""
    if not Path(checkpoint).is_dir() or Path(checkpoint).is_symlink():
        return
    lock = Path(checkpoint) / ".published.lock"
    with contextlib.suppress(OSError, UnreadableFileError), locked(lock):
        data = _read(checkpoint)
        entries = _entries(data, kind)
        if replace is not None:
            entries = [{**e, **entry} if e.get("id") == replace else e for e in entries]
        else:
            entries.append(entry)
        data[kind] = entries[-_KEEP:]
        _write_atomic(Path(checkpoint) / PUBLISHED_FILE, json.dumps(data, indent=2))


def record_deployment(checkpoint: Path, *, url: str, name: str, engine: str, pid: int) -> str:
    """Record that ``pid`` serves the checkpoint at ``url``; returns the entry's id, for
    :func:`record_deployment_end`."""
    entry_id = f"{pid}-{time.time():.6f}"
    _append(
        checkpoint,
        "deployments",
        {
            "id": entry_id,
            "url": url,
            "name": name,
            "engine": engine,
            "started_at": time.time(),
            "ended_at": None,
            "worker": describe_process(pid),
        },
    )
    return entry_id


def record_deployment_end(checkpoint: Path, entry_id: str, exit_code: int | None) -> None:
    """The deployment ``entry_id`` stopped (its server exited with ``exit_code``)."""
    _append(
        checkpoint,
        "deployments",
        {"ended_at": time.time(), "exit_code": exit_code},
        replace=entry_id,
    )


def record_upload(
    checkpoint: Path,
    *,
    repo: str,
    url: str | None,
    private: bool,
    merged: bool,
    error: str | None = None,
) -> None:
    """Record an upload of the checkpoint to the Hub repo ``repo`` (``error``: it failed)."""
    _append(
        checkpoint,
        "hub_uploads",
        {
            "repo": repo,
            "url": url,
            "private": private,
            "merged": merged,
            "at": time.time(),
            "ok": error is None,
            "error": error,
        },
    )


def publish_status(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's deployment and Hub upload status, JSON-ready::

        {"deployment": {"state": "serving"|"stopped"|"ended", "url", "name", "since", "until"}
                       | None,
         "hub": {"state": "uploaded"|"failed", "repo", "url", "private", "at", "error"} | None}

    ``serving`` only while the recorded server process is alive; a server that died without
    recording its end reads ``ended``. ``published_unreadable`` says why ``published.json`` could not
    be read (a link, a FIFO, too big or deep: see :mod:`osmosis_ai.safe_io`), else ``None``.
    """
    data, problem = _read_checked(checkpoint)
    deployment: dict[str, Any] | None = None
    deployments = _entries(data, "deployments")
    live = [
        e
        for e in deployments
        if e.get("ended_at") is None
        and isinstance(e.get("worker"), dict)
        and process_alive(e["worker"]) is True
    ]
    latest = live[-1] if live else (deployments[-1] if deployments else None)
    if latest is not None:
        state = "serving" if live else ("stopped" if latest.get("ended_at") else "ended")
        deployment = {
            "state": state,
            "url": latest.get("url"),
            "name": latest.get("name"),
            "engine": latest.get("engine"),
            "since": latest.get("started_at"),
            "until": latest.get("ended_at"),
            "count": len(deployments),
        }
    hub: dict[str, Any] | None = None
    uploads = _entries(data, "hub_uploads")
    done = [e for e in uploads if e.get("ok")]
    pick = done[-1] if done else (uploads[-1] if uploads else None)
    if pick is not None:
        hub = {
            "state": "uploaded" if pick.get("ok") else "failed",
            "repo": pick.get("repo"),
            "url": pick.get("url"),
            "private": pick.get("private"),
            "at": pick.get("at"),
            "error": pick.get("error"),
        }
    out: dict[str, Any] = {"deployment": deployment, "hub": hub}
    if problem is not None:
        out["published_unreadable"] = problem
    return out
