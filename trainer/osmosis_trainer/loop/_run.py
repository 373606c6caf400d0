"""The on-disk record of one training run, for ``osmosis train`` commands to read.

``<workspace>/runs/<name>-<YYYYmmdd-HHMMSS>/`` holds::

    config.toml          a copy of the training config as submitted
    status.json          {name, run_id, status, phase, step, total_steps, pid, times, error, ...}
    metrics.jsonl        one record per step (and per validation)
    failures.jsonl       per step with failed rollouts: counts by category and a few messages
    tensorboard/         the same scalars for TensorBoard
    checkpoints/         step_NNNNNN/ (PEFT adapter + trainer state) and ``latest``
    adapters/            the adapter of the most recent steps, served to the engine
    STOP                 (optional) created by a stop request; the loop stops at the next step
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

__all__ = ["RunDir", "RunStatus", "create_run_dir", "read_status"]

RunStatus = Literal["pending", "running", "completed", "failed", "stopped"]


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
    def status_file(self) -> Path:
        return self.path / "status.json"

    @property
    def stop_file(self) -> Path:
        return self.path / "STOP"

    def stop_requested(self) -> bool:
        return self.stop_file.exists()

    def update_status(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into ``status.json`` (written atomically) and return it."""
        current = read_status(self.path) or {"name": self.name, "run_id": self.run_id}
        current.update(fields)
        current["updated_at"] = time.time()
        tmp = self.status_file.with_name(f".status.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(current, indent=2, default=str))
        os.replace(tmp, self.status_file)
        return current


def read_status(run_path: Path) -> dict[str, Any] | None:
    """The run's ``status.json``, or ``None`` when missing or unreadable."""
    try:
        data = json.loads((Path(run_path) / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def create_run_dir(
    runs_root: Path, name: str, *, config_file: Path | None = None, now: datetime | None = None
) -> RunDir:
    """Create ``runs_root/<name>-<timestamp>/`` with a config copy and a pending status."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    base = Path(runs_root) / f"{name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    run = RunDir(path=path, name=name)
    if config_file is not None:
        shutil.copyfile(config_file, path / "config.toml")
    run.update_status(
        status="pending",
        phase="created",
        created_at=time.time(),
        pid=os.getpid(),
        config_path=str(config_file) if config_file else None,
    )
    return run
