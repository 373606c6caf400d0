"""metrics.jsonl and failures.jsonl: appended in place, never through a planted link."""

from __future__ import annotations

from pathlib import Path

import pytest

from osmosis_ai.errors import UnreadableFileError
from osmosis_ai.runs import read_metrics
from osmosis_trainer.loop._metrics import MetricsWriter


def test_records_append_and_a_planted_link_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    writer = MetricsWriter(run, tensorboard=False)
    writer.write(1, {"loss": 0.5})
    writer.write(2, {"loss": 0.25})
    assert [r["loss"] for r in read_metrics(run / "metrics.jsonl")] == [0.5, 0.25]
    outside = tmp_path / "outside.txt"
    outside.write_text("kept")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(UnreadableFileError, match="symbolic link"):
        writer.write(3, {"loss": 0.1})
    writer.close()
    assert outside.read_text() == "kept"
