"""JudgeCache: judgements keyed by (judge model, rubric, sample content), so re-grading is free.

Keys are SHA-256 digests of everything that shapes the judgement (model, prompt version,
rubric, scale, mode, repeats, task, reference, response). Only successful judgements are
stored: a failure is retried next time. With ``path`` the cache is also a JSON-lines file,
appended as it grows and read back on start, so it survives across runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.safe_io import read_jsonl

__all__ = ["JudgeCache", "cache_key"]

logger = logging.getLogger("osmosis")


def cache_key(*parts: Any) -> str:
    """A stable digest of JSON-serialisable parts."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class JudgeCache:
    """A bounded in-memory map from cache keys to judgements, optionally backed by a file.

    Args:
        path: a JSON-lines file to load from and append to (``None``: memory only).
        max_entries: least recently used entries beyond this are forgotten (memory only).
    """

    def __init__(self, path: str | Path | None = None, *, max_entries: int = 100_000) -> None:
        self.path = Path(path) if path is not None else None
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        try:  # safe_io: a regular file, size, depth and integer caps
            found = read_jsonl(path, follow=True)  # the path is the user's
        except UnreadableFileError as exc:
            logger.warning("judge cache not used: %s", exc)
            return
        for n, why in found.bad:
            # A torn last line (a run killed mid-write) costs one entry, not the cache.
            logger.warning("judge cache %s:%d: unreadable entry skipped (%s)", path, n, why)
        for n, entry in found.records:
            try:
                self._data[str(entry["key"])] = entry["value"]
            except (KeyError, TypeError):
                logger.warning("judge cache %s:%d: unreadable entry skipped", path, n)

    def __len__(self) -> int:
        return len(self._data)

    @property
    def hit_rate(self) -> float | None:
        looked = self.hits + self.misses
        return self.hits / looked if looked else None

    def get(self, key: str) -> Any | None:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as fh:
                    fh.write(json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n")
