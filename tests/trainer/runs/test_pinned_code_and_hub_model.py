"""A run pinned to a commit runs that commit's rollout code, and a Hugging Face model id is
found in a (temporary) local cache: one worker run, offline."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.runs import find_run
from tests.trainer.runs.workspace import hub_cache, make_workspace, rollout_source

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


def test_commit_sha_runs_the_pinned_code_with_a_hub_model(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from osmosis_trainer.models import load_model

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_cache(tmp_path / "hub", "tiny-org/tiny-chat", tiny_model_dir)
    ws = tmp_path / "ws"
    eos = int(load_model(str(tiny_model_dir)).tokenizer.eos_token_id)
    config = make_workspace(ws, "tiny-org/tiny-chat", eos_id=eos, rows=4)
    main_py = ws / "rollouts" / "even" / "main.py"
    main_py.write_text(rollout_source("commit-one"))
    _git(ws, "init", "-q", "-b", "main")
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", "working rollout")
    first = _git(ws, "rev-parse", "HEAD")
    # The newer commit (and the working tree) break the rollout: only the pin can pass.
    main_py.write_text(rollout_source("commit-two", broken=True))
    _git(ws, "commit", "-q", "-am", "broken rollout")
    shutil.rmtree(ws / "rollouts")  # not even in the working tree any more
    config.write_text(config.read_text().replace(
        'dataset = "data/even.jsonl"\n', f'dataset = "data/even.jsonl"\ncommit_sha = "{first}"\n'
    ))
    monkeypatch.chdir(ws)
    assert main(["train", "submit", str(config), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "finished" and out["steps"] == 1

    run = find_run(ws / "runs", "even")
    assert run.model == "tiny-org/tiny-chat"
    assert run.raw["code"]["revision"] == first and run.raw["code"]["pinned"] is True
    assert run.raw["code"]["dirty"] is True  # the config edit is not committed
    assert (run.path / "code" / "rollouts" / "even" / "main.py").read_text() == rollout_source(
        "commit-one"
    )
    markers = {p.read_text() for p in (run.path / "artifacts").glob("*/artifacts/marker.txt")}
    assert markers == {"commit-one"}
    assert main(["train", "info", "even"]) == 0
    assert f"code       {first[:12]} (pinned) · dirty tree at submit" in capsys.readouterr().out


def test_load_model_takes_a_hub_id_from_the_cache(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from osmosis_ai.errors import ConfigError
    from osmosis_trainer.models import load_model

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_cache(tmp_path / "hub", "tiny-org/tiny-chat", tiny_model_dir)
    loaded = load_model("tiny-org/tiny-chat")
    assert loaded.name == "tiny-org/tiny-chat" and loaded.tokenizer.eos_token_id is not None
    with pytest.raises(ConfigError, match=r"'tiny-org/other': not in the Hugging Face cache"):
        load_model("tiny-org/other")
