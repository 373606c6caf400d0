"""A run folder is data: ``osmosis train resume`` never imports code because a folder says so,
and never sends the user's secrets where a folder says.

The crafted folders below carry rollout code that writes a marker file when imported (pinned
"code" inside the run, or a whole other workspace tree named by ``[heldout] eval_config``), and a
``status.json`` that points the worker at it. Resume takes every setting from the user's own
config (inside the workspace), compares the folder's snapshot with it, refuses any difference
naming the field, and refuses paths that leave the workspace; the worker checks the paths again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import osmosis_ai.runs
from osmosis_ai.cli._app import main
from osmosis_ai.runs import spawn_worker, take_secrets, wait_for_status

BASE = (
    '[experiment]\nrollout = "r"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
    'dataset = "data/d.jsonl"\n'
)


def _planted(tree: Path, marker: Path) -> Path:
    """Another workspace (``tree``) whose rollout writes ``marker`` on import; returns its eval
    config, the file a crafted ``[heldout] eval_config`` would name."""
    entry = tree / "rollouts" / "r" / "main.py"
    entry.parent.mkdir(parents=True)
    entry.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    (tree / "data").mkdir()
    (tree / "data" / "d.jsonl").write_text('{"user_prompt": "hi", "ground_truth": "x"}\n')
    config = tree / "configs" / "eval" / "x.toml"
    config.parent.mkdir(parents=True)
    config.write_text(BASE)
    return config


def _crafted_run(
    runs: Path,
    marker: Path,
    recorded_root: Path | None,
    *,
    snapshot: str = BASE,
    config_path: Path | None = None,
    pinned: bool = True,
) -> Path:
    """``runs/evil-<time>/``: a stopped run with a checkpoint, pinned "code" that writes
    ``marker`` on import, ``recorded_root`` as both its workspace and repository (``None``:
    no ``workspace_root`` at all), ``snapshot`` as its config copy."""
    run = runs / "evil-20260101-000000"
    entry = run / "code" / "rollouts" / "r" / "main.py"
    entry.parent.mkdir(parents=True)
    entry.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    (run / "config.toml").write_text(snapshot)
    step = run / "checkpoints" / "step_000001"
    step.mkdir(parents=True)
    (step / "trainer_state.pt").write_bytes(b"")
    (step / "checkpoint.json").write_text('{"step": 1}')
    status: dict[str, Any] = {
        "name": "evil",
        "run_id": run.name,
        "status": "stopped",
        "phase": "cleanup",
        "step": 1,
        "total_steps": 4,
        "created_at": time.time() - 60,
        "pid": 1,
        "config_path": str(config_path) if config_path else None,
    }
    if recorded_root is not None:
        status["workspace_root"] = str(recorded_root)
    if pinned:
        status["code"] = {
            "pinned": True,
            "revision": "0" * 40,
            "repo_root": str(recorded_root),
            "dirty": False,
            "branch": None,
        }
    (run / "status.json").write_text(json.dumps(status))
    return run


def _workspace(ws: Path, text: str = BASE) -> Path:
    """``ws`` with its own config (``configs/training/evil.toml``) and dataset."""
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "d.jsonl").write_text('{"user_prompt": "hi", "ground_truth": "x"}\n')
    config = ws / "configs" / "training" / "evil.toml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    return config


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Records each worker 'train resume' would start (none is started)."""
    calls: list[dict[str, Any]] = []

    class _Proc:
        pid = 4242

    def fake(run: Any, module: str, *args: str, **kwargs: Any) -> _Proc:
        calls.append({"args": args, **kwargs})
        return _Proc()

    monkeypatch.setattr(osmosis_ai.runs, "spawn_worker", fake)
    return calls


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


def test_resume_refuses_a_folder_that_records_no_workspace(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spawned: list[dict[str, Any]],
) -> None:
    """The attack of issue 41: no ``workspace_root`` (the check used to be skipped) and a
    held-out eval config in another tree, whose ``main.py`` the held-out phase imported."""
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    other = _planted(tmp_path / "other", marker)
    snapshot = BASE + f'\n[heldout]\neval_config = "{other}"\n'
    config = _workspace(ws, snapshot)
    run = _crafted_run(
        ws / "runs", marker, None, snapshot=snapshot, config_path=config, pinned=False
    )
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json"]) == 1
    err = capsys.readouterr().err
    assert "records no workspace_root" in err and "Traceback" not in err
    assert spawned == [] and not marker.exists() and not (run / "train.log").exists()


@pytest.mark.parametrize(
    ("planted", "field"),
    [
        ('\n[heldout]\neval_config = "{other}"\n', "[heldout].eval_config"),
        ('\n[cluster]\naddress = "ray://attacker.example:10001"\n', "[cluster].address"),
        ('\n[remote]\nserver_url = "http://attacker.example:9000"\n', "[remote].server_url"),
        ('\n[env]\nOPENAI_API_KEY = "<redacted>"\n', "[env].OPENAI_API_KEY"),
        ('\n[checkpoints]\noutput_dir = "/tmp/elsewhere"\n', "[checkpoints].output_dir"),
    ],
)
def test_resume_refuses_a_snapshot_that_differs_from_the_users_config(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spawned: list[dict[str, Any]],
    planted: str,
    field: str,
) -> None:
    """The folder names this workspace and the user's own config, but its snapshot adds a
    setting: another tree's code, a Ray cluster or rollout server to send the run (and its
    secrets) to, an ``[env]`` name to fill from the user's environment. Refused, naming it."""
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    other = _planted(tmp_path / "other", marker)
    config = _workspace(ws)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-users-own-key")
    _crafted_run(
        ws / "runs",
        marker,
        ws.resolve(),
        config_path=config,
        pinned=False,
        snapshot=BASE + planted.replace("{other}", str(other)),
    )
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"{field}" in err and "in the run's config snapshot but" in err, err
    assert str(config) in err and "sk-users-own-key" not in err
    assert spawned == [] and not marker.exists()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('\n[heldout]\neval_config = "{other}"\n', "[heldout].eval_config"),
        ('\n[heldout]\neval_config = "../other/configs/eval/x.toml"\n', "[heldout].eval_config"),
        ('\n[heldout]\neval_config = "configs/eval/linked.toml"\n', "[heldout].eval_config"),
        ('\n[warm_start]\ndataset = "~/demos.jsonl"\n', "[warm_start].dataset"),
    ],
)
def test_resume_refuses_paths_that_leave_the_workspace(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spawned: list[dict[str, Any]],
    extra: str,
    field: str,
) -> None:
    """Even in the user's own config (snapshot and file agree), a resumed run's paths are
    relative and stay inside the workspace, links resolved."""
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    other = _planted(tmp_path / "other", marker)
    text = BASE + extra.replace("{other}", str(other))
    config = _workspace(ws, text)
    (ws / "configs" / "eval").mkdir()
    (ws / "configs" / "eval" / "linked.toml").symlink_to(other)
    _crafted_run(ws / "runs", marker, ws.resolve(), snapshot=text, config_path=config, pinned=False)
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "only uses paths inside its workspace" in err and field in err, err
    assert spawned == [] and not marker.exists()


def test_resume_refuses_a_config_outside_the_workspace_or_gone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spawned: list[dict[str, Any]],
) -> None:
    """The config the folder names must be this workspace's; when it is gone, nothing the
    snapshot lists is looked up in the environment (it used to fill ``[env]`` from there)."""
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    foreign = _planted(tmp_path / "other", marker)
    _workspace(ws)
    run = _crafted_run(ws / "runs", marker, ws.resolve(), config_path=foreign, pinned=False)
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json"]) == 1
    assert "outside this workspace" in capsys.readouterr().err
    monkeypatch.setenv("OPENAI_API_KEY", "sk-users-own-key")
    (run / "config.toml").write_text(BASE + '\n[env]\nOPENAI_API_KEY = "<redacted>"\n')
    status = json.loads((run / "status.json").read_text())
    status["config_path"] = str(ws / "configs" / "training" / "gone.toml")
    (run / "status.json").write_text(json.dumps(status))
    assert main(["train", "resume", "evil", "--json"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "which is gone" in err and "sk-users-own-key" not in err
    assert spawned == [] and not marker.exists()


def test_resume_hands_the_users_secrets_on_stdin_only(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spawned: list[dict[str, Any]],
) -> None:
    """A folder that matches: the worker gets the values of the user's file, for the names
    the file holds, on stdin; its environment carries none."""
    ws = tmp_path / "ws"
    text = BASE + '\n[env]\nOPENAI_API_KEY = "sk-from-the-file"\n'
    config = _workspace(ws, text)
    snapshot = BASE + '\n[env]\nOPENAI_API_KEY = "<redacted>"\n'
    _crafted_run(
        ws / "runs",
        tmp_path / "m",
        ws.resolve(),
        snapshot=snapshot,
        config_path=config,
        pinned=False,
    )
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json", "--detach"]) == 0
    capsys.readouterr()
    [call] = spawned
    assert "--secrets-stdin" in call["args"]
    assert json.loads(call["stdin"]) == {"env.OPENAI_API_KEY": "sk-from-the-file"}
    assert "sk-from-the-file" not in json.dumps(call.get("env"))


def test_resume_never_imports_pinned_code_that_is_not_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder names this very workspace and matches its config, so the worker starts; the
    pinned code is then checked against the workspace's repository (there is none) and
    nothing is imported."""
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    config = _workspace(ws)
    run = _crafted_run(ws / "runs", marker, recorded_root=ws.resolve(), config_path=config)
    monkeypatch.chdir(ws)
    assert main(["train", "resume", "evil", "--json"]) == 1
    capsys.readouterr()
    assert not marker.exists()
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed"
    assert "pinned code" in status["error"] and "cannot be checked" in status["error"]


def test_the_worker_checks_a_resumed_runs_paths_itself(tmp_path: Path) -> None:
    """A worker started on a crafted folder directly (not through 'train resume') refuses a
    held-out eval config in another tree before the held-out phase could import its code."""
    ws = tmp_path / "ws"
    marker = tmp_path / "imported"
    other = _planted(tmp_path / "other", marker)
    snapshot = BASE + f'\n[heldout]\neval_config = "{other}"\n'
    _workspace(ws, snapshot)
    run = _crafted_run(ws / "runs", marker, ws.resolve(), snapshot=snapshot, pinned=False)
    record = osmosis_ai.runs.RunDir(run, "evil")
    proc = spawn_worker(record, "osmosis_trainer.worker", "--resume", "--workspace", str(ws))
    assert proc.wait(timeout=120) == 1
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed", status
    assert "[heldout].eval_config" in status["error"] and "absolute" in status["error"]
    assert not marker.exists()


def test_the_workers_secrets_are_not_in_its_environ(tmp_path: Path) -> None:
    """Secrets reach the worker on a pipe: ``/proc/<worker>/environ`` (readable by every
    process of the user, the rollouts' tool subprocesses included) never holds them, and the
    worker's stdin is ``/dev/null`` once it has read them."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc")
    root = tmp_path / "runs"
    holder = osmosis_ai.runs.create_run_dir(root, "first")
    holder.claim(status="running", phase="train")  # this test process holds the machine
    queued = osmosis_ai.runs.create_run_dir(root, "second", workspace_root=str(root))
    queued.config_file.write_text(BASE + '\n[env]\nOPENAI_API_KEY = "<redacted>"\n')
    key = "sk-pipe-only-31337"
    proc = spawn_worker(
        queued,
        "osmosis_trainer.worker",
        "--secrets-stdin",
        stdin=osmosis_ai.runs.encode_secrets({"env.OPENAI_API_KEY": key}),
    )
    try:
        wait_for_status(queued.path, lambda r: (r.activity or "").startswith("queued"))
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert key.encode() not in environ and b"_OSMOSIS_RUN_SECRETS" not in environ
        assert os.readlink(f"/proc/{proc.pid}/fd/0") == os.devnull
    finally:
        queued.request_stop()
        proc.wait(timeout=60)


def test_take_secrets_reads_one_json_object() -> None:
    import io

    from osmosis_ai.errors import ConfigError

    assert take_secrets(io.BytesIO(b'{"env.A": "x"}')) == {"env.A": "x"}
    assert take_secrets(io.BytesIO(b"")) == {}
    with pytest.raises(ConfigError, match="one JSON object"):
        take_secrets(io.BytesIO(b"[1]"))


def test_secrets_file_values_reach_the_worker_on_stdin_only(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spawned: list[dict[str, Any]],
) -> None:
    """``train submit --secrets-file``: the pairs go to the worker on its stdin (it sets them
    in its own ``os.environ`` for the rollouts), and its starting environment leaves them out."""
    ws = tmp_path / "ws"
    config = _workspace(ws)
    entry = ws / "rollouts" / "r" / "main.py"
    entry.parent.mkdir(parents=True)
    entry.write_text("")
    secrets = tmp_path / "secrets.env"
    secrets.write_text("H41_TOOL_TOKEN=tool-secret-0f0f\n")
    monkeypatch.setenv("H41_TOOL_TOKEN", "")  # restored (unset) after the test
    monkeypatch.delenv("H41_TOOL_TOKEN")
    monkeypatch.chdir(ws)
    args = ["train", "submit", str(config), "--detach", "--json", "--secrets-file", str(secrets)]
    assert main(args) == 0, capsys.readouterr().err
    [call] = spawned
    assert json.loads(call["stdin"]) == {"environ.H41_TOOL_TOKEN": "tool-secret-0f0f"}
    assert "H41_TOOL_TOKEN" in call["hide_env"]
    assert "tool-secret-0f0f" not in json.dumps(call.get("env"))


def test_take_environ_sets_only_environ_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    from osmosis_ai.runs import take_environ

    monkeypatch.setenv("H41_X", "")  # restored (unset) after the test
    values: dict[str, Any] = {"environ.H41_X": "v", "env.OPENAI_API_KEY": "k"}
    assert take_environ(values) == ["H41_X"]
    assert os.environ["H41_X"] == "v" and values == {"env.OPENAI_API_KEY": "k"}
