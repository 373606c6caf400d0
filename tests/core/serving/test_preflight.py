"""A hosted model that cannot answer is refused before the first row, in one line."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from osmosis_ai.cli import main
from osmosis_ai.errors import ConfigError
from osmosis_ai.serving.preflight import check_model_reachable


def test_a_missing_provider_key_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY") as info:
        check_model_reachable("openai/gpt-4o-mini")
    assert "--model embedded" in str(info.value)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        check_model_reachable("anthropic/claude-3-5-haiku-20241022")


def test_a_set_key_and_local_models_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    check_model_reachable("openai/gpt-4o-mini")
    check_model_reachable("embedded")
    check_model_reachable(str(tmp_path))  # a local model folder: loaded later, not checked here


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_server_is_one_error() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(ConfigError, match="cannot reach the model server"):
        check_model_reachable(url, timeout=2.0)


def test_any_http_answer_counts_as_reachable(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake_get(url: str, **_: object) -> httpx.Response:
        seen.append(url)
        return httpx.Response(401)

    monkeypatch.setattr(httpx, "get", fake_get)
    check_model_reachable("http://127.0.0.1:9/v1/")
    assert seen == ["http://127.0.0.1:9/v1/models"]


def test_eval_run_without_a_key_stops_before_writing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["template", "create", "calc", "--template", "single-call", "--dir", str(tmp_path)]) == 0
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    out = tmp_path / "evals" / "hosted"
    code = main(["eval", "run", "configs/eval/calc.toml", "--model", "openai/gpt-4o-mini",
                 "--output", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "OPENAI_API_KEY" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_osmosis_test_without_a_key_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(Path(__file__).resolve().parents[3] / "templates" / "remote-server")
    code = main(["test", "-m", "server:agent_loop", "-d", "test_data.jsonl", "--limit", "1",
                 "--model", "openai/gpt-4o-mini"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "OPENAI_API_KEY" in err and "Traceback" not in err
