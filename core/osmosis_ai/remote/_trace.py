"""Per-rollout JSONL traces written by ``osmosis serve --log DIR``.

Layout: ``DIR/<YYYYmmdd-HHMMSS>/rollout-<id>.jsonl``, one JSON object per line with ``ts``,
``event`` and the event's fields.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["TraceWriter"]

logger = logging.getLogger("osmosis")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class TraceWriter:
    """Appends events to one JSONL file per rollout under a timestamped folder."""

    def __init__(self, root: str | Path) -> None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path(root) / stamp
        folder, n = base, 1
        while folder.exists():  # two servers started within one second
            n += 1
            folder = base.with_name(f"{stamp}-{n}")
        folder.mkdir(parents=True)
        self.folder = folder
        self._lock = threading.Lock()

    def path_for(self, rollout_id: str) -> Path:
        safe = _UNSAFE.sub("_", rollout_id).strip("._")[:80] or "rollout"
        if safe != rollout_id:  # keep distinct ids distinct after cleaning
            safe += "-" + hashlib.sha256(rollout_id.encode()).hexdigest()[:8]
        return self.folder / f"rollout-{safe}.jsonl"

    def write(self, rollout_id: str, event_type: str, data: dict[str, Any]) -> None:
        line = json.dumps({"ts": time.time(), "event": event_type, **data}, default=str)
        try:
            with self._lock, self.path_for(rollout_id).open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError as exc:  # a full disk must not fail the rollout
            logger.warning("could not write trace for rollout %s: %s", rollout_id, exc)

    def sink(self, rollout_id: str) -> Any:
        """An event sink bound to one rollout (for ``RolloutContext``)."""

        def _sink(event_type: str, data: dict[str, Any]) -> None:
            try:
                self.write(rollout_id, event_type, data)
            except Exception as exc:  # a trace must never fail the agent loop
                logger.warning("could not trace rollout %s: %s", rollout_id, exc)

        return _sink
