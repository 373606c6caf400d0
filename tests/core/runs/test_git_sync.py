"""Git Sync: a training run without ``commit_sha``/``branch`` runs the committed ``HEAD`` of the
rollout folder in a git workspace, and says what it left out; a rollout never committed (or no
git at all) runs the working tree, saying why (issue 39 §5)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from osmosis_ai.config import load_training_config
from osmosis_ai.runs import export_revision, pin_revision, pinned_path

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

CONFIG = (
    '[experiment]\nrollout = "calc"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
    'dataset = "d"\n'
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _workspace(root: Path) -> Path:
    """rollouts/calc/{main,tools}.py, data, a config; no git yet. Returns the config path."""
    rollout = root / "rollouts" / "calc"
    rollout.mkdir(parents=True)
    (rollout / "main.py").write_text("VERSION = 'committed'\n")
    (rollout / "tools.py").write_text("TOOLS = 1\n")
    (root / "data").mkdir()
    (root / "data" / "d.jsonl").write_text('{"user_prompt": "hi"}\n')
    config = root / "configs" / "training" / "calc.toml"
    config.parent.mkdir(parents=True)
    config.write_text(CONFIG)
    return config


def test_head_runs_and_uncommitted_files_are_named(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    config_file = _workspace(ws)
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", "rollout")
    head = _git(ws, "rev-parse", "HEAD")
    rollout = ws / "rollouts" / "calc"
    (rollout / "main.py").write_text("VERSION = 'edited'\n")
    (rollout / "new_tool.py").write_text("NEW = 1\n")
    (rollout / "tools.py").unlink()
    (ws / "notes.txt").write_text("outside the rollout folder: not listed\n")
    config = load_training_config(config_file)
    pin = pin_revision(config)
    assert (pin.revision, pin.pinned, pin.synced, pin.dirty) == (head, True, True, True)
    assert sorted(pin.left_out) == [
        "rollouts/calc/main.py (modified)",
        "rollouts/calc/new_tool.py (untracked)",
        "rollouts/calc/tools.py (deleted)",
    ]
    status = pin.as_status()
    assert status["synced"] is True and len(status["left_out"]) == 3
    said = pin.describe(config.rollout_dir())
    assert said[0].startswith(f"code: calc at commit {head[:12]} (HEAD of ")
    assert "rollouts/calc/new_tool.py (untracked)" in said[1] and "--working-tree" in said[1]
    # What the run gets is the commit, not the edited tree (which is left alone).
    code = export_revision(pin, tmp_path / "code")
    entry = pinned_path(status, code, config.entrypoint_path())
    assert entry.read_text() == "VERSION = 'committed'\n"
    assert (entry.parent / "tools.py").is_file() and not (entry.parent / "new_tool.py").exists()
    assert sorted(p.name for p in code.iterdir()) == ["rollouts"]  # only the rollout folder
    assert config.entrypoint_path().read_text() == "VERSION = 'edited'\n"


def test_a_clean_tree_leaves_nothing_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    config_file = _workspace(ws)
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", "all")
    pin = pin_revision(load_training_config(config_file))
    assert pin.synced and pin.left_out == () and pin.dirty is False
    assert len(pin.describe(ws / "rollouts" / "calc")) == 1


def test_a_scaffold_never_committed_inside_another_repo_runs_the_working_tree(
    tmp_path: Path,
) -> None:
    # e.g. 'osmosis template create' in a fresh folder that happens to be inside a git repo.
    outer = tmp_path / "outer"
    outer.mkdir()
    _git(outer, "init", "-q", "-b", "main")
    (outer / "README").write_text("x\n")
    _git(outer, "add", "README")
    _git(outer, "commit", "-q", "-m", "outer")
    config_file = _workspace(outer / "sub" / "ws")
    pin = pin_revision(load_training_config(config_file))
    assert (pin.pinned, pin.synced, pin.left_out) == (False, False, ())
    assert pin.note is not None and "sub/ws/rollouts/calc/ is not committed" in pin.note
    said = pin.describe(outer / "sub" / "ws" / "rollouts" / "calc")
    assert said[0].endswith("(working tree)") and said[1] == pin.note


def test_a_repository_without_commits_runs_the_working_tree(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    config_file = _workspace(ws)
    _git(ws, "init", "-q", "-b", "main")
    pin = pin_revision(load_training_config(config_file))
    assert (pin.revision, pin.pinned) == (None, False)
    assert pin.note is not None and "has no commit yet" in pin.note


def test_outside_git_the_working_tree_runs_as_before(tmp_path: Path) -> None:
    config_file = _workspace(tmp_path / "ws")
    pin = pin_revision(load_training_config(config_file))
    assert (pin.revision, pin.dirty, pin.pinned, pin.note) == (None, None, False, None)
    assert pin.describe(tmp_path / "ws" / "rollouts" / "calc") == [
        f"code: {tmp_path / 'ws' / 'rollouts' / 'calc'} (working tree)"
    ]


def test_train_submit_says_which_commit_and_what_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from osmosis_ai.cli.train import _say_code

    ws = tmp_path / "ws"
    config_file = _workspace(ws)
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", "rollout")
    (ws / "rollouts" / "calc" / "main.py").write_text("VERSION = 'edited'\n")
    pin = pin_revision(load_training_config(config_file))
    _say_code(pin, ws / "rollouts" / "calc", json_out=False, yes=False)  # not a terminal: no ask
    out, err = capsys.readouterr()
    assert out == ""  # stdout's first line stays the run's ("run NAME (PATH)")
    assert f"code: calc at commit {pin.revision[:12]}" in err  # type: ignore[index]
    assert "left out (not committed): rollouts/calc/main.py (modified)" in " ".join(err.split())
