"""``osmosis model deploy`` never keeps the clients' key on a command line (``ps`` and
``/proc/<pid>/cmdline`` show it to every local user while the command serves): the key comes from
``$OSMOSIS_DEPLOY_API_KEY`` or ``--api-key-file``, and ``--api-key KEY`` is refused, naming both
(issue 41 §4)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.cli import model as model_cli
from osmosis_ai.cli._app import main
from tests.core.eval._helpers import make_run

RUN_ID = "calc-20261124-010000"
KEY = "deploy-key-planted-5b7c"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A run with a checkpoint; records the server command and environment deploy would use."""
    make_run(tmp_path, RUN_ID, steps=(2,), base_model=str(tmp_path / "base"))
    (tmp_path / "base").mkdir()
    adapter = tmp_path / "runs" / RUN_ID / "checkpoints" / "step_000002" / "adapter"
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "x"}')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OSMOSIS_RUNS_DIR", raising=False)
    monkeypatch.delenv("OSMOSIS_DEPLOY_API_KEY", raising=False)
    calls: list[dict[str, Any]] = []

    def serve(cmd: list[str], env: Any = None) -> int:
        calls.append({"cmd": cmd, "env": env})
        return 0

    monkeypatch.setattr(model_cli, "_serve_until_signalled", serve)
    return calls


def test_a_key_on_the_command_line_is_refused(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["model", "deploy", f"{RUN_ID}:2", "--api-key", KEY]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "OSMOSIS_DEPLOY_API_KEY" in err and "--api-key-file" in err and "Traceback" not in err
    assert KEY not in err and served == []


def test_the_key_from_the_environment_or_a_file_reaches_only_the_servers_environment(
    served: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OSMOSIS_DEPLOY_API_KEY", KEY)
    assert main(["model", "deploy", f"{RUN_ID}:2", "--engine", "hf"]) == 0
    key_file = tmp_path / "key.txt"
    key_file.write_text("from-file-key\n")
    monkeypatch.delenv("OSMOSIS_DEPLOY_API_KEY")
    assert main(["model", "deploy", f"{RUN_ID}:2", "--api-key-file", str(key_file)]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("from-stdin-key\n"))
    assert main(["model", "deploy", f"{RUN_ID}:2", "--api-key-file", "-"]) == 0
    keys = ["from-env", KEY], ["from-file", "from-file-key"], ["from-stdin", "from-stdin-key"]
    for call, (_, key) in zip(served, keys, strict=True):
        assert key not in " ".join(call["cmd"])
        assert call["env"]["OSMOSIS_DEPLOY_API_KEY"] == key


def test_an_empty_key_file_is_one_clear_error(
    served: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").write_text("\n")
    assert main(["model", "deploy", f"{RUN_ID}:2", "--api-key-file", "empty"]) == 1
    assert "holds no key" in capsys.readouterr().err and served == []


def test_help_says_where_the_key_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    main(["model", "deploy", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "OSMOSIS_DEPLOY_API_KEY" in out and "--api-key-file" in out
