"""A URL's credentials never reach a message, a status, a log or the dashboard: its user-info
password and its secret-named query/fragment parameters are redacted by one function, and every
message that names a URL is built from that form (issue 41 §4)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from osmosis_ai.config import REDACTED, redact_config, redact_url, redact_urls
from osmosis_ai.errors import ConfigError
from osmosis_ai.runs import create_run_dir, describe_run, find_run, snapshot_secrets
from osmosis_ai.serving import EngineError

PASSWORD = "pw-planted-9c1e"
TOKEN = "tok-planted-77ab"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"http://alice:{PASSWORD}@h:9/v1", f"http://alice:{REDACTED}@h:9/v1"),
        (f"http://h:9/?access_token={TOKEN}&x=1", f"http://h:9/?access_token={REDACTED}&x=1"),
        (f"https://h/p?token={TOKEN}", f"https://h/p?token={REDACTED}"),
        (
            f"https://h/p?key={TOKEN}&api_key={TOKEN}",
            f"https://h/p?key={REDACTED}&api_key={REDACTED}",
        ),
        (
            f"https://h/p?sig={TOKEN}&X-Amz-Signature={TOKEN}&page=2",
            f"https://h/p?sig={REDACTED}&X-Amz-Signature={REDACTED}&page=2",
        ),
        (
            f"https://h/cb#access_token={TOKEN}&state=s",
            f"https://h/cb#access_token={REDACTED}&state=s",
        ),
        ("http://h:9/v1?max_tokens=64&model=m", "http://h:9/v1?max_tokens=64&model=m"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_urls_in_free_text() -> None:
    text = f"ConnectError('http://a:{PASSWORD}@h:1/v1/x?token={TOKEN} refused') at http://ok/"
    out = redact_urls(text)
    assert PASSWORD not in out and TOKEN not in out
    assert out.endswith("refused') at http://ok/") and "http://a:<redacted>@h:1/v1/x" in out


def test_query_tokens_are_redacted_in_the_run_snapshot_and_its_views(tmp_path: Path) -> None:
    url = f"http://bob:{PASSWORD}@127.0.0.1:9000/?access_token={TOKEN}"
    text = (
        '[experiment]\nrollout = "r"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
        f'dataset = "d"\n\n[remote]\nserver_url = "{url}"\n'
    )
    config = tmp_path / "configs" / "training" / "t.toml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    run = create_run_dir(tmp_path / "runs", "t", config_file=config)
    snapshot = run.config_file.read_text()
    assert TOKEN not in snapshot and PASSWORD not in snapshot
    assert snapshot_secrets(config) == {"remote.server_url": url}  # handed to the worker
    described = json.dumps(describe_run(find_run(tmp_path / "runs", run.run_id)), default=str)
    assert TOKEN not in described and PASSWORD not in described
    assert redact_config({"remote": {"server_url": url}})["remote"]["server_url"] == (
        f"http://bob:{REDACTED}@127.0.0.1:9000/?access_token={REDACTED}"
    )


async def test_an_openai_compatible_server_is_named_without_its_credentials() -> None:
    from osmosis_ai.serving import OpenAIServerEngine

    engine = OpenAIServerEngine(
        f"http://alice:{PASSWORD}@127.0.0.1:1", model="m", request_timeout_s=5
    )
    with pytest.raises(EngineError) as exc:
        await engine._request("GET", "/v1/models")
    assert "127.0.0.1:1" in str(exc.value) and PASSWORD not in str(exc.value)


def test_preflight_names_the_server_without_its_credentials() -> None:
    from osmosis_ai.serving.preflight import check_model_reachable

    with pytest.raises(ConfigError) as exc:
        check_model_reachable(f"http://alice:{PASSWORD}@127.0.0.1:1/v1?api_key={TOKEN}", timeout=5)
    message = str(exc.value)
    assert "cannot reach the model server" in message
    assert PASSWORD not in message and TOKEN not in message


def test_httpx_errors_quote_urls_redacted() -> None:
    request = httpx.Request("GET", f"http://u:{PASSWORD}@h/?token={TOKEN}")
    exc = httpx.ConnectError(f"cannot connect to {request.url}", request=request)
    assert PASSWORD not in redact_urls(repr(exc)) and TOKEN not in redact_urls(repr(exc))
