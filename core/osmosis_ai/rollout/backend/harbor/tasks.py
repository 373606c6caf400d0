"""Harbor task folders: what a trial's container is built from.

A task folder holds ``environment/Dockerfile`` (the container image), optionally
``instruction.md`` (the task's own prompt), ``task.toml`` (limits) and ``tests/``. In
:attr:`TaskMode.TEMPLATE` the backend's ``tasks_dir`` is one task used for every dataset row
(the row's prompt is the instruction); in :attr:`TaskMode.DATASET` it holds one task folder per
id and each row names its own with ``metadata["harbor_task_id"]`` (the task's ``instruction.md``
is the prompt).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

__all__ = ["HarborTask", "TaskLimits", "TaskMode"]
from osmosis_ai.safe_io import read_text, read_toml


class TaskMode(StrEnum):
    """How a :class:`~osmosis_ai.rollout.backend.harbor.HarborBackend` picks a row's task."""

    TEMPLATE = "template"
    """``tasks_dir`` is one task; every row runs in it with the row's own prompt."""
    DATASET = "dataset"
    """``tasks_dir`` holds one folder per task; ``metadata["harbor_task_id"]`` picks it."""


@dataclass(frozen=True)
class TaskLimits:
    """The limits a task's ``task.toml`` declares (``[environment]``, ``[agent]``,
    ``[verifier]``)."""

    cpus: float | None = None
    memory_mb: int | None = None
    agent_timeout_s: float | None = None
    verifier_timeout_s: float | None = None


def _number(table: Any, key: str, where: Path) -> float | None:
    if not isinstance(table, dict) or table.get(key) is None:
        return None
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


class HarborTask:
    """One task folder on disk (checked: it exists and has ``environment/Dockerfile``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise ValueError(f"Harbor task folder not found: {self.path}")
        dockerfile = self.dockerfile
        if not dockerfile.is_file():
            raise ValueError(
                f"{self.path}: a Harbor task needs environment/Dockerfile (the image each trial "
                f"runs in); {dockerfile} does not exist"
            )

    @classmethod
    def from_dataset(cls, root: str | Path, task_id: str) -> HarborTask:
        """The task ``task_id`` under ``root`` (ids cannot leave ``root``)."""
        base = Path(root).resolve()
        path = (base / task_id).resolve()
        if not path.is_relative_to(base) or path == base or not path.is_dir():
            raise ValueError(
                f"unknown Harbor task id {task_id!r}: no task folder {base / task_id} (dataset "
                "mode looks up metadata['harbor_task_id'] under tasks_dir)"
            )
        return cls(path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def environment(self) -> Path:
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path:
        return self.environment / "Dockerfile"

    @property
    def verifier(self) -> Path:
        """The task's own verifier script (``tests/test.sh``); it may not exist."""
        return self.path / "tests" / "test.sh"

    def instruction(self) -> str | None:
        """The text of ``instruction.md``, or ``None`` when the task has none."""
        file = self.path / "instruction.md"
        # Task folders come from datasets others wrote: regular files only, size-capped.
        return read_text(file, under=self.path) if file.exists() else None

    def limits(self) -> TaskLimits:
        """The limits in ``task.toml`` (none when the file is absent)."""
        file = self.path / "task.toml"
        if not file.exists():
            return TaskLimits()
        _, data = read_toml(file, under=self.path)
        env, agent, verifier = data.get("environment"), data.get("agent"), data.get("verifier")
        memory = _number(env, "memory_mb", file)
        return TaskLimits(
            cpus=_number(env, "cpus", file),
            memory_mb=int(memory) if memory is not None else None,
            agent_timeout_s=_number(agent, "timeout_sec", file),
            verifier_timeout_s=_number(verifier, "timeout_sec", file),
        )

    def base_images(self) -> list[str]:
        """The images the Dockerfile's ``FROM`` lines name (for error messages)."""
        found = []
        for line in read_text(self.dockerfile, under=self.path).splitlines():
            match = re.match(r"\s*FROM\s+(?:--\S+\s+)*(\S+)", line, re.IGNORECASE)
            if match:
                found.append(match.group(1))
        return found

    def image_tag(self) -> str:
        """A tag that changes whenever a file of ``environment/`` changes."""
        digest = hashlib.sha256()
        for file in sorted(p for p in self.environment.rglob("*") if p.is_file()):
            digest.update(file.relative_to(self.environment).as_posix().encode())
            digest.update(b"\0")
            digest.update(file.read_bytes())
            digest.update(b"\0")
        slug = re.sub(r"[^a-z0-9_.-]+", "-", self.name.lower()).strip("-.") or "task"
        return f"osmosis-harbor/{slug}:{digest.hexdigest()[:16]}"
