"""Secrets planted in a training config never reach the run folder, ``train info --output``,
the dashboard's API or a tracker; the worker's command still gets the real values."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from osmosis_ai.cli import main
from osmosis_ai.config import (
    REDACTED,
    is_secret_key,
    literal_secrets,
    load_training_config,
    redact_config,
)
from osmosis_ai.errors import ConfigError
from osmosis_ai.runs import (
    create_run_dir,
    describe_run,
    find_run,
    resume_secrets,
    snapshot_secrets,
)

KEY = "sk-planted-0123456789abcdef"
REMOTE_KEY = "rk-planted-fedcba9876543210"
URL_PASSWORD = "pw-planted-55aa"
CONFIG = f"""# my training config
[experiment]
rollout = "r"
entrypoint = "main.py"
model_path = "embedded"
dataset = "d"

[sampling]
max_tokens = 64

[env]
OPENAI_API_KEY = "{KEY}"
LOG_LEVEL = "debug"

[secrets]
required = ["HF_TOKEN"]

[remote]
server_url = "http://user:{URL_PASSWORD}@127.0.0.1:9000"
api_key = "{REMOTE_KEY}"
"""
PLANTED = (KEY, REMOTE_KEY, URL_PASSWORD)


def _leaks(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [p for p in PLANTED if p.encode() in data]


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "ws" / "configs" / "training" / "t.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_secret_shaped_keys() -> None:
    for key in ("api_key", "OPENAI_API_KEY", "hf_token", "client_secret", "password", "apikey"):
        assert is_secret_key(key), key
    for key in ("max_tokens", "trace_max_tokens", "micro_batch_tokens", "tokenizer", "secrets"):
        assert not is_secret_key(key), key


def test_the_run_snapshot_is_redacted_and_loads(tmp_path: Path) -> None:
    source = _config(tmp_path)
    run = create_run_dir(tmp_path / "runs", "t", config_file=source)
    files = [p for p in run.path.rglob("*") if p.is_file()]
    assert files and all(_leaks(p.read_bytes()) == [] for p in files)
    snapshot = tomllib.loads(run.config_file.read_text())
    assert snapshot["env"] == {"OPENAI_API_KEY": REDACTED, "LOG_LEVEL": REDACTED}
    assert snapshot["remote"]["api_key"] == REDACTED
    assert snapshot["remote"]["server_url"] == f"http://user:{REDACTED}@127.0.0.1:9000"
    assert snapshot["secrets"] == {"required": ["HF_TOKEN"]}  # names, not values: kept
    assert snapshot["sampling"] == {"max_tokens": 64}
    assert load_training_config(run.config_file).remote is not None  # still a valid config
    # What the worker is handed instead, from the user's own file:
    assert snapshot_secrets(source) == {
        "remote.server_url": f"http://user:{URL_PASSWORD}@127.0.0.1:9000",
        "env.OPENAI_API_KEY": KEY, "env.LOG_LEVEL": "debug", "remote.api_key": REMOTE_KEY,
    }


def test_a_config_without_secrets_is_copied_byte_for_byte(tmp_path: Path) -> None:
    text = CONFIG.split("[env]")[0]
    run = create_run_dir(tmp_path / "runs", "t", config_file=_config(tmp_path, text))
    assert run.config_file.read_text() == text


def test_info_output_and_the_dashboard_show_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    run = create_run_dir(runs, "t", config_file=_config(tmp_path))
    # A folder written before snapshots were redacted holds the config in clear.
    old = create_run_dir(runs, "old")
    old.config_file.write_text(CONFIG)
    for record in (find_run(runs, run.run_id), find_run(runs, old.run_id)):
        described = describe_run(record)
        assert _leaks(json.dumps(described, default=str)) == []
        assert described["config"]["env"]["OPENAI_API_KEY"] == REDACTED
    out = tmp_path / "info.json"
    assert main(["train", "info", old.run_id, "--runs-dir", str(runs), "--output", str(out)]) == 0
    assert _leaks(out.read_text()) == [] and _leaks(capsys.readouterr().out) == []

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from osmosis_ai.dashboard import create_app

    client = TestClient(create_app(runs, tmp_path / "evals"), base_url="http://127.0.0.1")
    paths = ["/", "/api/runs", "/api/evals"]
    for run_id in (run.run_id, old.run_id):
        paths += [f"/api/runs/{run_id}", f"/api/runs/{run_id}/metrics",
                  f"/api/runs/{run_id}/failures", f"/api/runs/{run_id}/traces"]
    for path in paths:
        response = client.get(path)
        assert response.status_code < 500, path
        assert _leaks(response.content) == [], path


def test_literal_secrets_are_named_for_the_warning() -> None:
    data = tomllib.loads(CONFIG)
    assert literal_secrets(data) == ["[env].OPENAI_API_KEY", "[remote].api_key"]
    assert literal_secrets(redact_config(data)) == []


def test_resume_takes_the_secrets_from_the_users_config_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _config(tmp_path)
    ws = source.parents[2]
    (ws / "data").mkdir()
    (ws / "data" / "d.jsonl").write_text("{}\n")
    monkeypatch.setenv("HF_TOKEN", "hf-set")
    run = create_run_dir(ws / "runs", "t", config_file=source, workspace_root=str(ws))
    status = find_run(ws / "runs", run.run_id).raw
    assert resume_secrets(run, status, ws) == snapshot_secrets(source)
    # The original now points the run elsewhere: refused, naming the field, no value shown.
    source.write_text(CONFIG.replace("127.0.0.1:9000", "attacker.example:9000"))
    with pytest.raises(ConfigError, match=r"\[remote\]\.server_url") as exc:
        resume_secrets(run, status, ws)
    assert _leaks(str(exc.value)) == []
    # Gone: the environment is not asked for what the snapshot names.
    source.unlink()
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    with pytest.raises(ConfigError, match="which is gone"):
        resume_secrets(run, status, ws)


def test_trackers_get_the_config_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    pytest.importorskip("torch")
    from osmosis_trainer.trackers import open_trackers

    sent: list[dict[str, object]] = []

    class _Run:
        def log(self, *a: object, **k: object) -> None: ...
        def finish(self, *a: object, **k: object) -> None: ...

    def init(**kwargs: object) -> _Run:
        sent.append(dict(kwargs["config"]))  # type: ignore[call-overload]
        return _Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    config = load_training_config(_config(tmp_path))
    open_trackers(["wandb"], tmp_path, "t-1", project="p", config=config.model_dump(mode="json"))
    assert sent and _leaks(json.dumps(sent)) == []
    assert sent[0]["env"] == {"OPENAI_API_KEY": REDACTED, "LOG_LEVEL": REDACTED}
