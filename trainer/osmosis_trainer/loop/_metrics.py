"""Per-step metrics: one JSON line per record in ``metrics.jsonl`` plus TensorBoard scalars."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from osmosis_ai.runs import read_metrics
from osmosis_ai.safe_io import open_append
from osmosis_trainer.trackers import Tracker

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["MetricsWriter", "read_metrics"]

logger = logging.getLogger("osmosis")


def _clean(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; a missing value reads better than a parse error
    return value


class MetricsWriter:
    """Appends metric records to ``<run>/metrics.jsonl`` and mirrors scalars to TensorBoard.

    Each record is ``{"step": int, "kind": "train" | "eval" | "warm_start", "time": float,
    ...metrics}``.
    TensorBoard is optional: without the package the JSONL file is still written.
    """

    def __init__(
        self, run_dir: Path, *, tensorboard: bool = True, trackers: Sequence[Tracker] = ()
    ) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self._trackers = list(trackers)  # W&B / MLflow ([logging] report_to), same names
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb: SummaryWriter | None = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                # Its writer thread flushes every few seconds; a flush per step would cost
                # the event loop a file write each time.
                self._tb = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"), flush_secs=5)
            except ImportError:
                logger.info("tensorboard is not installed; metrics go to metrics.jsonl only")

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` (used on resume, so replayed steps are not duplicated).
        Warm-start records count their own steps and are kept (a finished phase is not redone)."""
        if not self.path.exists():
            return
        kept = [
            r for r in read_metrics(self.path)
            if r.get("kind") == "warm_start" or int(r.get("step", 0)) <= step
        ]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def drop_kind(self, kind: str) -> None:
        """Drop every record of ``kind`` (a warm start redone after a crash starts afresh)."""
        if not self.path.exists():
            return
        kept = [r for r in read_metrics(self.path) if r.get("kind") != kind]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def write(self, step: int, metrics: Mapping[str, object], *, kind: str = "train") -> None:
        """Append one record; ``metrics`` are JSON values (numbers go to TensorBoard too)."""
        record: dict[str, object] = {"step": step, "kind": kind, "time": time.time()}
        record.update({k: _clean(v) for k, v in metrics.items()})
        with os.fdopen(open_append(self.path), "a", encoding="utf-8") as fh:  # never via a link
            fh.write(json.dumps(record, default=str) + "\n")
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    if math.isfinite(float(value)):
                        # Keys already under their kind's name ("warm_start/loss") are not
                        # prefixed twice.
                        tag = key if key.startswith(f"{kind}/") else f"{kind}/{key}"
                        self._tb.add_scalar(tag, float(value), step)
        for tracker in self._trackers:
            tracker.log(step, kind, metrics)

    def close(self) -> None:
        for tracker in self._trackers:
            tracker.close()
        self._trackers = []
        if self._tb is not None:
            self._tb.close()
            self._tb = None
