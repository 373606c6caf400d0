"""The run store: statuses, crash detection from pid liveness, name lookup, checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from osmosis_ai.runs import (
    STATUSES,
    RunDir,
    RunNotFoundError,
    create_run_dir,
    find_run,
    list_checkpoints,
    list_runs,
    load_run,
    read_status,
)


def test_statuses_and_phases_are_the_seeds() -> None:
    from osmosis_ai.runs import PHASES

    assert STATUSES == (
        "pending", "running", "finished", "failed", "stopped", "killed", "crashed", "unknown",
    )
    assert PHASES == (
        "init", "provision", "setup", "train", "finalize", "complete", "error", "cleanup",
    )


def test_status_updates_merge_across_writers(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "demo", model="m")
    assert read_status(run.path)["phase"] == "init"  # type: ignore[index]
    run.update_status(status="running", step=1)
    RunDir(run.path, run.name).update_status(total_steps=9)  # e.g. the CLI and the worker
    status = run.update_status(step=2)
    assert (status["status"], status["step"], status["total_steps"], status["model"]) == (
        "running", 2, 9, "m",
    )


def _claimed_child(run: RunDir) -> subprocess.Popen[str]:
    """A process that claims the run as its worker, says so, then waits to be killed."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from osmosis_ai.runs import RunDir
        run = RunDir(Path({str(run.path)!r}), {run.name!r})
        run.claim(status="running", phase="train")
        print("claimed", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "claimed"
    return proc


def test_a_worker_killed_with_sigkill_reads_as_crashed(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "demo")
    proc = _claimed_child(run)
    record = load_run(run.path)
    assert record is not None and record.status == "running" and record.live
    proc.kill()
    if hasattr(os, "waitid"):
        # Dead but not reaped yet (WNOWAIT): a zombie still has its pid, but is not alive.
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        record = load_run(run.path, record_crash=False)
        assert record is not None and record.status == "crashed"
        assert read_status(run.path)["status"] == "running"  # type: ignore[index]
    assert proc.wait() == -signal.SIGKILL
    record = load_run(run.path)
    assert record is not None and record.status == "crashed" and record.phase == "error"
    assert f"pid {proc.pid}" in (record.error or "")
    # Recorded: it stays crashed for every later reader (another terminal, after a reboot).
    assert read_status(run.path)["status"] == "crashed"  # type: ignore[index]


def test_a_finished_worker_is_not_mistaken_for_a_crash(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "demo")
    proc = _claimed_child(run)
    run.update_status(status="finished", phase="complete")
    proc.communicate("")
    record = load_run(run.path)
    assert record is not None and record.status == "finished"


def test_pid_reuse_and_reboot_are_not_alive(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "demo")
    run.claim(status="running", phase="train")  # this process: alive
    assert load_run(run.path, record_crash=False).status == "running"  # type: ignore[union-attr]
    worker = read_status(run.path)["worker"]  # type: ignore[index]
    if worker["pid_start"] is not None:
        run.update_status(worker={**worker, "pid_start": worker["pid_start"] + 1})
        assert load_run(run.path, record_crash=False).status == "crashed"  # type: ignore[union-attr]
    if worker["boot_id"] is not None:
        run.update_status(worker={**worker, "boot_id": "another-boot"})
        assert load_run(run.path, record_crash=False).status == "crashed"  # type: ignore[union-attr]
    # On another host only the heartbeat can tell: none yet -> unknown.
    run.update_status(worker={**worker, "host": "elsewhere"})
    assert load_run(run.path, record_crash=False).status == "unknown"  # type: ignore[union-attr]
    run.beat()
    assert load_run(run.path, record_crash=False).status == "running"  # type: ignore[union-attr]


def test_legacy_completed_reads_as_finished(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "old")
    run.update_status(status="completed", phase="done")
    assert load_run(run.path).status == "finished"  # type: ignore[union-attr]
    run.update_status(status="bogus")
    assert load_run(run.path).status == "unknown"  # type: ignore[union-attr]


def test_find_run_by_id_name_prefix_and_clear_errors(tmp_path: Path) -> None:
    from datetime import datetime

    root = tmp_path / "runs"
    a = create_run_dir(root, "even", now=datetime(2026, 1, 1, 10, 0, 0))
    b = create_run_dir(root, "even", now=datetime(2026, 1, 2, 10, 0, 0))
    c = create_run_dir(root, "odd", now=datetime(2026, 1, 3, 10, 0, 0))
    for run in (a, b, c):
        run.update_status(status="finished")
    assert find_run(root, "odd").path == c.path
    assert find_run(root, b.run_id).path == b.path
    assert find_run(root, "even-20260101").path == a.path
    assert find_run(root, str(c.path)).path == c.path
    with pytest.raises(RunNotFoundError, match=r"matches 2 runs: even-20260101-100000.*even-2026"):
        find_run(root, "even")
    with pytest.raises(RunNotFoundError, match=r"no run named 'nope'.*odd-20260103-100000"):
        find_run(root, "nope")
    assert [r.run_id for r in list_runs(root, status=["finished"])] == [
        a.run_id, b.run_id, c.run_id,
    ]
    assert list_runs(root, status=["running"]) == []


def test_checkpoints_with_step_reward_and_path(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "demo")
    for step, reward in ((2, 0.25), (4, 0.5)):
        folder = run.checkpoints / f"step_{step:06d}"
        (folder / "adapter").mkdir(parents=True)
        (folder / "trainer_state.pt").write_bytes(b"x")
        (folder / "checkpoint.json").write_text(
            json.dumps({"step": step, "saved_at": 1.0, "metrics": {"reward_mean": reward}})
        )
    (run.checkpoints / ".step_000006.123.tmp").mkdir()  # half-written: ignored
    found = list_checkpoints(run.checkpoints)
    assert [(c.step, c.reward, c.path.name) for c in found] == [
        (2, 0.25, "step_000002"), (4, 0.5, "step_000004"),
    ]
    assert found[-1].adapter == run.checkpoints / "step_000004" / "adapter"


def test_heartbeat_thread_touches_the_file(tmp_path: Path) -> None:
    run = create_run_dir(tmp_path / "runs", "demo")
    with run.heartbeat(every_s=3600):
        pass  # the first beat is written at once
    assert run.heartbeat_file.exists()
    assert os.path.getmtime(run.heartbeat_file) > 0


def test_describe_a_live_run(tmp_path: Path) -> None:
    from osmosis_ai.runs import describe_run

    run = create_run_dir(tmp_path / "runs", "demo", model="m")
    run.claim(status="running", phase="train")
    run.beat()
    info = describe_run(load_run(run.path))  # type: ignore[arg-type]
    assert (info["status"], info["phase"], info["pid"]) == ("running", "train", os.getpid())
    assert info["heartbeat_age_s"] is not None and info["checkpoints"] == []
    assert info["latest_reward"] is None and info["config"] is None and info["error"] is None
