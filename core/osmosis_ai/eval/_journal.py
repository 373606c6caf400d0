"""The append-only, fsynced results journal of an eval run, and the fingerprints resume checks."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from osmosis_ai.errors import OsmosisError, UnreadableFileError
from osmosis_ai.eval._records import EvalRecord
from osmosis_ai.safe_io import JSONL_MAX_BYTES, loads_json, read_bytes

__all__ = ["Journal", "hash_file", "hash_rollout_dir", "read_journal"]

_SKIP_DIRS = frozenset(
    {
        "__pycache__",
        ".git",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "node_modules",
        ".osmosis",
    }
)
_SKIP_SUFFIXES = (".pyc", ".pyo")


class Journal:
    """Appends records to ``results.jsonl``; each line is flushed and fsynced before returning.

    A crash or Ctrl-C can therefore lose at most the line being written, which
    :func:`read_journal` drops when the run is resumed.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[str] | None = None

    def __enter__(self) -> Journal:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, record: EvalRecord) -> None:
        if self._fh is None:
            raise RuntimeError("Journal is not open; use it as a context manager")
        self._fh.write(record.model_dump_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_journal(path: Path, *, repair: bool = False) -> list[EvalRecord]:
    """Read every complete record of a journal.

    A last line without its newline (a write cut short) is ignored, and removed from the file
    when ``repair`` is set. Any other bad line is an error naming the line. The file is read
    through :mod:`osmosis_ai.safe_io` (a regular file, no link, at most
    :data:`~osmosis_ai.safe_io.JSONL_MAX_BYTES`, JSON depth and integers bounded).

    Raises:
        UnreadableFileError: the file itself cannot be read safely.
        OsmosisError: a line that is not a result record.
    """
    try:
        data = read_bytes(path, under=path.parent, max_bytes=JSONL_MAX_BYTES)
    except UnreadableFileError as exc:
        if exc.missing:
            return []
        raise
    complete_end = data.rfind(b"\n") + 1
    if repair and complete_end < len(data):
        with path.open("r+b") as fh:
            fh.truncate(complete_end)
            fh.flush()
            os.fsync(fh.fileno())
    records: list[EvalRecord] = []
    for lineno, raw in enumerate(data[:complete_end].split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            records.append(EvalRecord.model_validate(loads_json(raw.decode("utf-8"))))
        except (ValueError, ValidationError) as exc:  # UnicodeDecodeError is a ValueError
            first = str(exc).splitlines()[0]
            raise OsmosisError(
                f"{path}:{lineno}: not a valid result record ({first}). The results file is "
                "damaged; start a fresh run instead of --resume"
            ) from None
    return records


def hash_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file, read in chunks (datasets may be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def hash_rollout_dir(folder: Path) -> str:
    """SHA-256 over the rollout folder's files (names and contents), caches and venvs skipped."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            if name.endswith(_SKIP_SUFFIXES):
                continue
            full = Path(root) / name
            digest.update(full.relative_to(folder).as_posix().encode() + b"\0")
            digest.update(hash_file(full).encode() + b"\0")
    return digest.hexdigest()
