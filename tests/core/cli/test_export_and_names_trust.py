"""What leaves the machine through ``model export`` is only what training wrote; a Hub repo is
private unless asked otherwise; ``eval submit --name`` is checked before anything is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.core.eval._helpers import make_run

from .conftest import RunCli

RUN_ID = "calc-20261124-010000"
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- planted"


@pytest.fixture
def workspace(run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert run_cli("template", "create", "calc", "--dir", tmp_path).code == 0
    make_run(tmp_path, RUN_ID, steps=(1,), rewards=(0.5,))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OSMOSIS_RUNS_DIR", raising=False)
    return tmp_path


def _adapter(workspace: Path) -> Path:
    return workspace / "runs" / RUN_ID / "checkpoints" / "step_000001" / "adapter"


def _secret_file(tmp_path: Path) -> Path:
    key = tmp_path / "home" / ".ssh" / "id_rsa"
    key.parent.mkdir(parents=True)
    key.write_text(SECRET)
    return key


def _exported_text(out: Path) -> str:
    if not out.exists():
        return ""
    return "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize("merge", [False, True])
def test_export_refuses_a_linked_file(
    run_cli: RunCli, workspace: Path, tmp_path: Path, merge: bool
) -> None:
    (_adapter(workspace) / "notes.txt").symlink_to(_secret_file(tmp_path))
    res = run_cli("model", "export", RUN_ID, "out", *(["--merge"] if merge else []))
    assert res.code == 1
    assert "notes.txt is a link or a special file" in res.err and "Traceback" not in res.err
    assert SECRET not in _exported_text(workspace / "out")


def test_export_refuses_a_linked_checkpoint_folder(
    run_cli: RunCli, workspace: Path, tmp_path: Path
) -> None:
    outside = _secret_file(tmp_path).parent
    (outside / "adapter_config.json").write_text("{}")
    step = workspace / "runs" / RUN_ID / "checkpoints" / "step_000002"
    step.mkdir()
    (step / "trainer_state.pt").write_bytes(b"")
    (step / "adapter").symlink_to(outside, target_is_directory=True)
    res = run_cli("model", "export", f"{RUN_ID}:2", "out")
    assert res.code == 1 and "a link leads out" in res.err
    assert SECRET not in _exported_text(workspace / "out")


def test_export_copies_regular_files(run_cli: RunCli, workspace: Path) -> None:
    (_adapter(workspace) / "sub").mkdir()
    (_adapter(workspace) / "sub" / "notes.txt").write_text("kept")
    res = run_cli("model", "export", RUN_ID, "out")
    assert res.code == 0, res.err
    assert (workspace / "out" / "sub" / "notes.txt").read_text() == "kept"
    assert not any(p.is_symlink() for p in (workspace / "out").rglob("*"))


class _FakeHub:
    created: list[dict[str, Any]] = []

    def create_repo(self, repo: str, **kwargs: Any) -> None:
        self.created.append({"repo": repo, **kwargs})

    def upload_folder(self, *, folder_path: str, repo_id: str) -> Any:
        return type("Info", (), {"commit_url": f"https://hub.test/{repo_id}"})()


@pytest.mark.parametrize(("flags", "private"), [((), True), (("--public",), False)])
def test_push_to_hub_creates_a_private_repo_unless_public(
    run_cli: RunCli, workspace: Path, monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...], private: bool,
) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeHub)
    _FakeHub.created = []
    res = run_cli("model", "export", RUN_ID, "out", "--push-to-hub", "me/calc", *flags)
    assert res.code == 0, res.err
    assert _FakeHub.created == [{"repo": "me/calc", "private": private, "exist_ok": True}]


@pytest.mark.parametrize("name", ["../x", "a/b", "x\n"])
def test_eval_submit_checks_the_name_before_writing(
    run_cli: RunCli, workspace: Path, name: str
) -> None:
    before = sorted(str(p) for p in workspace.rglob("*"))
    [config] = sorted((workspace / "configs" / "eval").glob("*.toml"))
    res = run_cli("eval", "submit", config, "--name", name)
    assert res.code == 1 and "--name" in res.err and "Traceback" not in res.err
    assert sorted(str(p) for p in workspace.rglob("*")) == before
    assert not os.path.exists(workspace / ".osmosis" / "x")
