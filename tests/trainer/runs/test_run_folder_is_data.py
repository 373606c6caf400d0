"""A run folder is data: ``osmosis train resume`` never imports code because a folder says so.

The crafted folders below carry rollout code that writes a marker file when imported, and a
``status.json`` that points the worker at it (``workspace_root`` and ``code.pinned``, which
moved the import root into ``<run>/code/``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main


def _crafted_run(runs: Path, marker: Path, recorded_root: Path) -> Path:
    """``runs/evil-<time>/``: a stopped run with a checkpoint, pinned "code" that writes
    ``marker`` on import, and ``recorded_root`` as both its workspace and repository."""
    run = runs / "evil-20260101-000000"
    entry = run / "code" / "rollouts" / "r" / "main.py"
    entry.parent.mkdir(parents=True)
    entry.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    (run / "data.jsonl").write_text('{"user_prompt": "hi", "ground_truth": "x"}\n')
    (run / "config.toml").write_text(
        '[experiment]\nrollout = "r"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
        f'dataset = "{run / "data.jsonl"}"\n'
    )
    step = run / "checkpoints" / "step_000001"
    step.mkdir(parents=True)
    (step / "trainer_state.pt").write_bytes(b"")
    (step / "checkpoint.json").write_text('{"step": 1}')
    (run / "status.json").write_text(json.dumps({
        "name": "evil", "run_id": run.name, "status": "stopped", "phase": "cleanup",
        "step": 1, "total_steps": 4, "created_at": time.time() - 60, "pid": 1,
        "workspace_root": str(recorded_root),
        "code": {"pinned": True, "revision": "0" * 40, "repo_root": str(recorded_root),
                 "dirty": False, "branch": None},
    }))
    return run


def test_resume_refuses_a_folder_from_another_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    _crafted_run(ws / "runs", marker, recorded_root=Path("/x"))
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json"]) == 1
    err = capsys.readouterr().err
    assert "submitted from the workspace /x" in err and f"runs in {ws.resolve()}" in err
    assert not marker.exists()


def test_resume_never_imports_pinned_code_that_is_not_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder names this very workspace, so the worker starts; the pinned code is then
    checked against the workspace's repository (there is none) and nothing is imported."""
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    run = _crafted_run(ws / "runs", marker, recorded_root=ws.resolve())
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json"]) == 1
    capsys.readouterr()
    assert not marker.exists()
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed"
    assert "pinned code" in status["error"] and "cannot be checked" in status["error"]
