"""The run folder's status file: merged updates, also across two writers of one run."""

from __future__ import annotations

import json
from pathlib import Path

from osmosis_trainer.loop._run import RunDir, create_run_dir, read_status


def test_status_updates_merge_and_see_other_writers(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "demo")
    run.update_status(status="running", step=1)
    run.update_status(phase="update")
    other = RunDir(run.path, run.name)  # e.g. the CLI and the loop holding one run each
    other.update_status(total_steps=9)
    run.update_status(step=2)
    status = read_status(run.path)
    assert status is not None
    assert (status["status"], status["phase"], status["step"], status["total_steps"]) == (
        "running", "update", 2, 9,
    )
    # An edit from outside the process is picked up as well.
    edited = {**status, "note": "kept"}
    run.status_file.write_text(json.dumps(edited))
    assert run.update_status(step=3)["note"] == "kept"
