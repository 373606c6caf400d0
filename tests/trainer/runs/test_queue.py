"""A run queued behind another (``--queue``) waits as ``pending`` in ``provision``; it can be
stopped there, and SIGTERM ends a worker as ``killed``. No model is loaded: the worker never
gets past the queue."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from osmosis_ai.runs import RunDir, create_run_dir, load_run, spawn_worker, wait_for_status


def _queued_behind_this_process(root: Path) -> tuple[RunDir, subprocess.Popen[bytes]]:
    holder = create_run_dir(root, "first")
    holder.claim(status="running", phase="train")  # this test process holds the machine
    queued = create_run_dir(root, "second", workspace_root=str(root))
    queued.config_file.write_text(
        '[experiment]\nrollout = "r"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
        'dataset = "d"\n'
    )
    proc = spawn_worker(queued, "osmosis_trainer.worker")
    waiting = wait_for_status(queued.path, lambda r: (r.activity or "").startswith("queued"))
    assert waiting.status == "pending" and waiting.phase == "provision"
    assert waiting.activity == f"queued behind {holder.run_id}"
    return queued, proc


def test_a_queued_run_can_be_stopped(tmp_path: Path) -> None:
    queued, proc = _queued_behind_this_process(tmp_path / "runs")
    queued.request_stop()
    assert proc.wait() == 0
    record = load_run(queued.path)
    assert record is not None and (record.status, record.phase) == ("stopped", "cleanup")
    assert "queued: waiting for first-" in queued.log_file.read_text()


def test_sigterm_ends_the_worker_as_killed(tmp_path: Path) -> None:
    queued, proc = _queued_behind_this_process(tmp_path / "runs")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait() == 143
    record = load_run(queued.path)
    assert record is not None and (record.status, record.phase) == ("killed", "cleanup")
    assert record.error == "terminated (SIGTERM)"


def test_sigterm_ends_a_worker_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A background shell (nohup, ``cmd &``, some CI runners) starts children with SIGINT
    ignored; the worker's SIGTERM path must not depend on the SIGINT handler it inherits."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the worker
    try:
        queued, proc = _queued_behind_this_process(tmp_path / "runs")
    finally:
        signal.signal(signal.SIGINT, previous)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    record = load_run(queued.path)
    assert record is not None and record.status == "killed"
