"""``[experiment] commit_sha``/``branch`` resolved in the workspace's git repository, and
``model_path`` as a Hugging Face model id found in the local cache (no network)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from osmosis_ai.config import load_training_config
from osmosis_ai.errors import ConfigError
from osmosis_ai.runs import export_revision, pin_revision, pinned_path, resolve_model_path

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


def _workspace(root: Path, pin: str = "") -> tuple[Path, str, str]:
    """A repo with two commits of rollouts/r/main.py ('one', then 'two'); returns the config
    path and both commit hashes."""
    (root / "rollouts" / "r").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "data" / "d.jsonl").write_text('{"user_prompt": "hi"}\n')
    (root / "configs" / "training").mkdir(parents=True)
    config = root / "configs" / "training" / "t.toml"
    _git(root, "init", "-q", "-b", "main")
    (root / "rollouts" / "r" / "main.py").write_text("VERSION = 'one'\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "one")
    first = _git(root, "rev-parse", "HEAD")
    _git(root, "branch", "stable")
    (root / "rollouts" / "r" / "main.py").write_text("VERSION = 'two'\n")
    _git(root, "commit", "-q", "-am", "two")
    second = _git(root, "rev-parse", "HEAD")
    config.write_text(
        '[experiment]\nrollout = "r"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
        f'dataset = "d"\n{pin}\n'
    )
    return config, first, second


def test_commit_sha_exports_that_revision(tmp_path: Path) -> None:
    config_file, first, second = _workspace(tmp_path / "ws")
    config_file.write_text(config_file.read_text() + f'commit_sha = "{first[:10]}"\n')
    config = load_training_config(config_file)
    pin = pin_revision(config)
    # The config file itself is not committed: the tree is dirty.
    assert (pin.revision, pin.pinned, pin.dirty) == (first, True, True)
    code = export_revision(pin, tmp_path / "code")
    entry = pinned_path(pin.as_status(), code, config.entrypoint_path())
    assert entry == code / "rollouts" / "r" / "main.py"
    assert entry.read_text() == "VERSION = 'one'\n"
    # The working tree is untouched.
    assert config.entrypoint_path().read_text() == "VERSION = 'two'\n"


def test_branch_and_unpinned_runs_record_the_revision(tmp_path: Path) -> None:
    config_file, first, second = _workspace(tmp_path / "ws", pin='branch = "stable"')
    pin = pin_revision(load_training_config(config_file))
    assert (pin.revision, pin.pinned, pin.branch) == (first, True, "stable")
    config_file.write_text(config_file.read_text().replace('branch = "stable"', ""))
    _git(tmp_path / "ws", "add", "-A")
    _git(tmp_path / "ws", "commit", "-q", "-m", "config")
    pin = pin_revision(load_training_config(config_file))
    # No revision in the config: Git Sync runs the committed HEAD (tests/core/runs/test_git_sync).
    assert (pin.pinned, pin.synced, pin.dirty) == (True, True, False)
    assert pin.revision not in (None, first)
    pin = pin_revision(load_training_config(config_file), sync=False)  # --working-tree
    assert pin.pinned is False and pin.dirty is False and pin.revision not in (None, first)
    assert pinned_path(pin.as_status(), tmp_path / "code", Path("x.py")) == Path("x.py")


def test_unknown_revision_or_no_repository_refuses(tmp_path: Path) -> None:
    config_file, _, _ = _workspace(tmp_path / "ws", pin='commit_sha = "deadbeef00"')
    with pytest.raises(ConfigError, match=r"commit_sha = 'deadbeef00' is not a commit of the"):
        pin_revision(load_training_config(config_file))
    config_file.write_text(config_file.read_text().replace('commit_sha = "deadbeef00"',
                                                           'branch = "nope"'))
    with pytest.raises(ConfigError, match=r"branch = 'nope' is not a branch"):
        pin_revision(load_training_config(config_file))
    shutil.rmtree(tmp_path / "ws" / ".git")
    with pytest.raises(ConfigError, match=r"is not a git repository; run 'git init'"):
        pin_revision(load_training_config(config_file))
    config_file.write_text(config_file.read_text().replace('branch = "nope"', ""))
    pin = pin_revision(load_training_config(config_file))
    assert (pin.revision, pin.dirty, pin.pinned) == (None, None, False)


def _cache_model(cache: Path, model_id: str) -> Path:
    repo = cache / f"models--{model_id.replace('/', '--')}"
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return snap


def test_hub_id_found_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snap = _cache_model(tmp_path / "hub", "Qwen/Qwen2.5-0.5B-Instruct")
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == str(snap)
    # Not Hub ids: returned as they are.
    assert resolve_model_path("embedded") == "embedded"
    local = tmp_path / "org" / "model"
    local.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("org/model") == "org/model"  # an existing local folder


def test_hub_id_offline_and_not_cached_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as info:
        resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct")
    message = str(info.value)
    assert "'Qwen/Qwen2.5-0.5B-Instruct'" in message and "offline" in message
    assert "huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct" in message
    assert str(tmp_path / "hub") in message and "\n" not in message


def test_pinned_code_is_checked_against_the_workspace_commit(tmp_path: Path) -> None:
    from osmosis_ai.runs import verify_pinned_code

    ws = tmp_path / "ws"
    config_file, first, _ = _workspace(ws)
    config_file.write_text(config_file.read_text() + f'commit_sha = "{first}"\n')
    code = export_revision(pin_revision(load_training_config(config_file)), tmp_path / "code")
    assert verify_pinned_code(first, ws, code) == ws.resolve()
    entry = code / "rollouts" / "r" / "main.py"
    entry.write_text("open('marker', 'w')\n")  # changed after export
    with pytest.raises(ConfigError, match=r"changed: rollouts/r/main.py.*not run"):
        verify_pinned_code(first, ws, code)
    entry.write_text("VERSION = 'one'\n")
    (code / "rollouts" / "r" / "helper.py").write_text("x = 1\n")  # added after export
    with pytest.raises(ConfigError, match=r"not in the commit: rollouts/r/helper.py"):
        verify_pinned_code(first, ws, code)
    (code / "rollouts" / "r" / "helper.py").unlink()
    assert verify_pinned_code(first, ws, code) == ws.resolve()
    with pytest.raises(ConfigError, match="not in the workspace repository"):
        verify_pinned_code("0" * 40, ws, code)
    with pytest.raises(ConfigError, match="records no commit hash"):
        verify_pinned_code("HEAD", ws, code)  # a ref, not a recorded commit
    with pytest.raises(ConfigError, match="is not a git repository"):
        verify_pinned_code(first, tmp_path / "elsewhere", code)
