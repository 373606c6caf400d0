"""``osmosis model deploy`` and ``model export --push-to-hub`` record where a checkpoint went,
so ``train info`` and the dashboard show its deployment and Hugging Face upload status."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.cli import model as model_cli
from osmosis_ai.cli._app import main
from osmosis_ai.runs._published import publish_status
from tests.core.eval._helpers import make_run

RUN_ID = "calc-20261124-010000"


@pytest.fixture
def ckpt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    make_run(tmp_path, RUN_ID, steps=(2,), base_model=str(tmp_path / "base"))
    (tmp_path / "base").mkdir()
    (
        tmp_path
        / "runs"
        / RUN_ID
        / "checkpoints"
        / "step_000002"
        / "adapter"
        / "adapter_config.json"
    ).write_text('{"base_model_name_or_path": "x"}')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OSMOSIS_RUNS_DIR", raising=False)
    return tmp_path / "runs" / RUN_ID / "checkpoints" / "step_000002"


def test_deploy_records_serving_then_stopped(ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def serve(cmd: list[str], env: Any = None) -> int:  # the server, as it runs
        seen.append(publish_status(ckpt)["deployment"])
        return 0

    monkeypatch.setattr(model_cli, "_serve_until_signalled", serve)
    assert publish_status(ckpt)["deployment"] is None
    assert main(["model", "deploy", f"{RUN_ID}:2", "--port", "8123", "--engine", "hf"]) == 0
    assert seen[0]["state"] == "serving" and seen[0]["url"] == "http://127.0.0.1:8123/v1"
    after = publish_status(ckpt)["deployment"]
    assert after["state"] == "stopped" and after["until"] is not None


def test_push_to_hub_records_the_upload_and_a_failure(
    ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["model", "export", f"{RUN_ID}:2", "out1", "--push-to-hub", "me/calc"]) == 1
    hub = publish_status(ckpt)["hub"]
    assert hub["state"] == "failed" and "offline" in hub["error"]

    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls: list[tuple[str, Any]] = []

    class FakeApi:  # the Hub is never reached in tests
        def create_repo(self, repo: str, private: bool, exist_ok: bool) -> None:
            calls.append(("create", private))

        def upload_folder(self, folder_path: str, repo_id: str) -> Any:
            calls.append(("upload", repo_id))
            return types.SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/1")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(HfApi=FakeApi))
    assert main(["model", "export", f"{RUN_ID}:2", "out2", "--push-to-hub", "me/calc"]) == 0
    assert calls == [("create", True), ("upload", "me/calc")]
    hub = publish_status(ckpt)["hub"]
    assert (hub["state"], hub["repo"], hub["private"]) == ("uploaded", "me/calc", True)
    assert hub["url"] == "https://huggingface.co/me/calc/commit/1"
    assert not (tmp_path / "out2" / "published.json").exists()
