"""What osmosis writes into a run folder that may be crafted: a link there is never written
through and a FIFO never blocks (the lock, the worker's log, a resumed run's files), and
``train logs`` reads the log as untrusted data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from osmosis_ai.cli import main
from osmosis_ai.errors import ConfigError, UnreadableFileError
from osmosis_ai.runs import RunDir, create_run_dir, find_run, list_runs, resume_secrets
from osmosis_ai.runs._resume import _NOT_WALKED
from osmosis_ai.runs._store import _write_atomic
from osmosis_ai.safe_io import planted_entries

CONFIG = """[experiment]
rollout = "r"
entrypoint = "main.py"
model_path = "embedded"
dataset = "data/d.jsonl"

[sampling]
max_tokens = 64
"""
OUTSIDE = "# the user's own file, outside the run\n"


def _outside(tmp_path: Path) -> Path:
    path = tmp_path / "dotfile"
    path.write_text(OUTSIDE)
    return path


def _dead_running(root: Path, name: str) -> RunDir:
    """A run that says it runs, with a worker that is gone (a reader records it crashed)."""
    run = create_run_dir(root, name)
    run.update_status(status="running", worker={"pid": 2**22 + 7, "pid_start": 1}, pid=2**22 + 7)
    return run


def test_a_fifo_status_lock_neither_blocks_the_list_nor_loses_the_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = _dead_running(root, "planted")
    (run.path / ".status.lock").unlink()
    os.mkfifo(run.path / ".status.lock")
    other = _dead_running(root, "plain")
    # Before, opening the lock to append waited for a reader forever.
    listed = {r.run_id: r.status for r in list_runs(root)}
    assert listed == {run.run_id: "crashed", other.run_id: "crashed"}
    with pytest.raises(UnreadableFileError, match=r"\.status\.lock: a FIFO"):
        run.update_status(step=1)
    assert json.loads((other.path / "status.json").read_text())["status"] == "crashed"


def test_a_linked_lock_is_not_written_through(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    run = create_run_dir(tmp_path / "runs", "linked")
    (run.path / ".status.lock").unlink()
    (run.path / ".status.lock").symlink_to(outside)
    with pytest.raises(UnreadableFileError, match="symbolic link"):
        run.update_status(step=1)
    assert outside.read_text() == OUTSIDE


def test_a_link_planted_at_the_status_files_temporary_name_is_replaced(tmp_path: Path) -> None:
    import threading

    outside = _outside(tmp_path)
    target = tmp_path / "status.json"
    planted = tmp_path / f".status.json.{os.getpid()}.{threading.get_ident()}.tmp"
    planted.symlink_to(outside)
    _write_atomic(target, '{"status": "finished"}')
    assert outside.read_text() == OUTSIDE
    assert json.loads(target.read_text()) == {"status": "finished"} and not planted.exists()


def test_train_logs_refuses_a_fifo_and_a_link_and_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "runs"
    fifo = create_run_dir(root, "fifo")
    os.mkfifo(fifo.log_file)  # before: the read blocked forever
    linked = create_run_dir(root, "linked")
    linked.log_file.symlink_to(_outside(tmp_path))  # to /dev/zero it would fill memory
    monkeypatch.chdir(tmp_path)
    assert main(["train", "logs", "fifo"]) == 1
    err = capsys.readouterr().err
    assert "train.log: a FIFO" in err and "Traceback" not in err
    assert main(["train", "logs", "linked"]) == 1
    out = capsys.readouterr()
    assert "train.log: a symbolic link" in out.err and OUTSIDE not in out.out


def test_train_logs_streams_in_chunks_without_splitting_a_character(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from osmosis_ai.cli import _train_runs

    run = create_run_dir(tmp_path / "runs", "plain")
    text = "step 1 héllo — ünïcode ✓\n" * 50
    run.log_file.write_text(text, encoding="utf-8")
    monkeypatch.setattr(_train_runs, "_LOG_CHUNK_BYTES", 7)  # cuts inside characters
    monkeypatch.chdir(tmp_path)
    assert main(["train", "logs", "plain"]) == 0
    assert capsys.readouterr().out == text


def test_planted_entries_names_links_and_fifos_but_not_the_rollouts_own_files(
    tmp_path: Path,
) -> None:
    run = create_run_dir(tmp_path / "runs", "r")
    assert planted_entries(run.path, skip=_NOT_WALKED) == []
    (run.artifacts / "rollout-1").mkdir(parents=True)
    (run.artifacts / "rollout-1" / "latest").symlink_to(tmp_path)  # the rollout's own
    (run.path / "code").mkdir()
    (run.path / "code" / "link.py").symlink_to("main.py")  # checked against its commit
    assert planted_entries(run.path, skip=_NOT_WALKED) == []
    (run.path / "metrics.jsonl").symlink_to(_outside(tmp_path))
    (run.checkpoints / "step_000001").mkdir(parents=True)
    os.mkfifo(run.checkpoints / "step_000001" / "checkpoint.json")
    assert planted_entries(run.path, skip=_NOT_WALKED) == [
        "metrics.jsonl", "checkpoints/step_000001/checkpoint.json"
    ]


def test_resume_refuses_a_folder_with_a_linked_log_before_anything_runs(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    source = ws / "configs" / "training" / "t.toml"
    source.parent.mkdir(parents=True)
    source.write_text(CONFIG)
    (ws / "data").mkdir()
    (ws / "data" / "d.jsonl").write_text("{}\n")
    run = create_run_dir(ws / "runs", "t", config_file=source, workspace_root=str(ws))
    status = find_run(ws / "runs", run.run_id).raw
    assert resume_secrets(run, status, ws) == {}
    outside = _outside(tmp_path)
    run.log_file.symlink_to(outside)
    with pytest.raises(ConfigError, match=r"holds train\.log, a link or special file"):
        resume_secrets(run, status, ws)
    assert outside.read_text() == OUTSIDE
