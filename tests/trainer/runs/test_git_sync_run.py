"""Git Sync end to end: a training run without ``commit_sha`` in a git workspace trains on the
committed HEAD of the rollout folder, not on the edited working tree (issue 39 §5)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.runs import find_run
from tests.trainer.runs.workspace import make_workspace, rollout_source

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_an_unpinned_run_trains_on_head_and_names_what_it_left_out(
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from osmosis_trainer.models import load_model

    ws = tmp_path / "ws"
    eos = int(load_model(str(tiny_model_dir)).tokenizer.eos_token_id)
    config = make_workspace(ws, str(tiny_model_dir), eos_id=eos, rows=4)
    main_py = ws / "rollouts" / "even" / "main.py"
    main_py.write_text(rollout_source("committed"))
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", "working rollout")
    head = _git(ws, "rev-parse", "HEAD")
    # Uncommitted: the working tree's rollout is broken; the run must not see it.
    main_py.write_text(rollout_source("edited", broken=True))
    monkeypatch.chdir(ws)
    assert main(["train", "submit", str(config), "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["status"] == "finished" and out["steps"] == 1
    assert "left out (not committed): rollouts/even/main.py (modified)" in " ".join(
        captured.err.split()
    )
    run = find_run(ws / "runs", "even")
    code = run.raw["code"]
    assert (code["revision"], code["pinned"], code["synced"]) == (head, True, True)
    assert code["left_out"] == ["rollouts/even/main.py (modified)"]
    markers = {p.read_text() for p in (run.path / "artifacts").glob("*/artifacts/marker.txt")}
    assert markers == {"committed"}
    assert main(["train", "info", run.run_id]) == 0
    info = capsys.readouterr().out
    assert f"code       {head[:12]} (HEAD, git sync) · dirty tree at submit" in info
    assert "left out   1 uncommitted file(s): rollouts/even/main.py (modified)" in info
