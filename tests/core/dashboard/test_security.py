"""Who may use the dashboard, and what it will read: a token off loopback, a Host allow-list
with the bound address, no framing; corrupt and linked run folders never give a 500 nor serve
a file from outside ``runs/``."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from osmosis_ai.cli._app import main
from osmosis_ai.cli.dashboard import allowed_hosts_for
from osmosis_ai.dashboard import create_app
from osmosis_ai.runs import RunDir, create_run_dir


def _run(root: Path, name: str, day: int = 1) -> RunDir:
    run = create_run_dir(root, name, now=datetime(2026, 1, day, 9, 0, 0), model="tiny")
    run.update_status(status="finished", step=1, total_steps=1)
    return run


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "ws" / "runs"
    _run(root, "calc")
    return root


# -- token, Host, framing -----------------------------------------------------------------------


def test_a_token_app_refuses_requests_without_it(store: Path) -> None:
    app = create_app(store, store.parent / "evals", token="s3cret-token")
    client = TestClient(app, base_url="http://127.0.0.1")
    for url in ("/", "/api/runs", "/static/app.js"):
        reply = client.get(url)
        assert reply.status_code == 401, url
        assert "token" in reply.json()["detail"]
    assert client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/?token=wrong", follow_redirects=False).status_code == 401
    ok = client.get("/api/runs", headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200 and ok.json()["runs"]
    # The printed URL: it sets the cookie and drops the token from the address bar.
    landing = client.get("/?token=s3cret-token", follow_redirects=False)
    assert landing.status_code == 303 and landing.headers["location"] == "/"
    cookie = landing.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert client.get("/api/runs").status_code == 200  # the client keeps the cookie
    assert client.get("/").status_code == 200


def test_off_loopback_host_allow_list_names_the_bound_address(store: Path) -> None:
    hosts = allowed_hosts_for("127.0.0.2", [])
    assert "*" not in hosts and "127.0.0.2" in hosts
    app = create_app(store, store.parent / "evals", allowed_hosts=hosts)
    assert TestClient(app, base_url="http://127.0.0.2:8765").get("/api/runs").status_code == 200
    rebound = TestClient(app, base_url="http://attacker.example:8765").get("/api/runs")
    assert rebound.status_code == 400
    assert allowed_hosts_for("10.0.0.5", ["box.lan"])[-2:] == ["10.0.0.5", "box.lan"]
    assert "[fd00::1]" in allowed_hosts_for("fd00::1", [])
    with pytest.raises(ValueError, match="wildcard"):
        create_app(store, store.parent / "evals", allowed_hosts=["*"])


def test_every_answer_forbids_framing(store: Path) -> None:
    client = TestClient(create_app(store, store.parent / "evals"), base_url="http://127.0.0.1")
    foreign = TestClient(create_app(store, store.parent / "evals"), base_url="http://evil.test")
    for reply in (
        client.get("/"),
        client.get("/api/runs"),
        client.get("/api/runs/nope"),
        client.get("/static/app.js"),
        foreign.get("/"),
    ):
        assert reply.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]
        assert reply.headers["x-content-type-options"] == "nosniff"


class _Served:
    app: Any = None


def test_cli_off_loopback_requires_a_token_printed_once(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    monkeypatch.delenv("OSMOSIS_DASHBOARD_TOKEN", raising=False)
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda self: setattr(_Served, "app", self.config.app)
    )
    assert (
        main(["dashboard", "--host", "10.0.0.5", "--port", "8765", "--runs-dir", str(store)]) == 0
    )
    out = capsys.readouterr()
    assert "http://10.0.0.5:8765/?token=" in out.out and "other machines" in out.err
    token = out.out.split("?token=")[1].split()[0]
    assert len(token) >= 24
    client = TestClient(_Served.app, base_url="http://10.0.0.5:8765")
    assert client.get("/api/runs").status_code == 401
    assert client.get("/api/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    rebound = TestClient(_Served.app, base_url="http://attacker.example:8765")
    assert rebound.get("/api/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 400

    # On loopback no token is needed, and a given one is never echoed.
    assert main(["dashboard", "--port", "8765", "--runs-dir", str(store)]) == 0
    assert "token" not in capsys.readouterr().out
    assert TestClient(_Served.app, base_url="http://127.0.0.1").get("/api/runs").status_code == 200
    assert (
        main(
            [
                "dashboard",
                "--host",
                "0.0.0.0",
                "--port",
                "8765",
                "--token",
                "mine-xyz",
                "--runs-dir",
                str(store),
            ]
        )
        == 0
    )
    assert "mine-xyz" not in capsys.readouterr().out
    assert (
        main(
            ["dashboard", "--host", "0.0.0.0", "--allowed-host", "*.evil", "--runs-dir", str(store)]
        )
        == 1
    )


# -- run folders that are corrupt or link out ----------------------------------------------------


def test_a_corrupt_status_is_one_unreadable_run_on_every_route(store: Path) -> None:
    bad = store / "bad-20260102-090000"
    bad.mkdir()
    (bad / "status.json").write_text(
        json.dumps({"name": "bad", "status": "running", "created_at": "yesterday", "step": "abc"})
    )
    client = TestClient(create_app(store, store.parent / "evals"), base_url="http://127.0.0.1")
    runs = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert runs["calc-20260101-090000"]["status"] == "finished"
    assert "step" in runs[bad.name]["unreadable"]
    for url in ("", "/metrics", "/failures", "/traces", "/outputs"):
        reply = client.get(f"/api/runs/{bad.name}{url}")
        assert reply.status_code == 200, (url, reply.text)
    assert client.get(f"/api/runs/{bad.name}").json()["unreadable"]
    stop = client.post(f"/api/runs/{bad.name}/stop", headers={"X-Osmosis-Dashboard": "1"})
    assert stop.status_code == 409 and "unreadable" in stop.json()["detail"]


def test_linked_run_folders_traces_and_files_are_not_served(store: Path, tmp_path: Path) -> None:
    outside = _run(tmp_path / "elsewhere" / "runs", "secret", 2)
    (outside.path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 42}) + "\n")
    traces = outside.path / "traces"
    traces.mkdir()
    (traces / "step_000001.jsonl").write_text(json.dumps({"group_id": 0, "leak": "LEAK"}) + "\n")
    (store / outside.run_id).symlink_to(outside.path, target_is_directory=True)
    run = store / "calc-20260101-090000"
    (run / "traces").symlink_to(traces, target_is_directory=True)
    (run / "metrics.jsonl").symlink_to(outside.path / "metrics.jsonl")
    client = TestClient(create_app(store, store.parent / "evals"), base_url="http://127.0.0.1")
    assert [r["run_id"] for r in client.get("/api/runs").json()["runs"]] == [run.name]
    assert client.get(f"/api/runs/{outside.run_id}").status_code == 404
    assert client.get(f"/api/runs/{run.name}/traces").json() == {"steps": []}
    assert client.get(f"/api/runs/{run.name}/traces/1").status_code == 404
    assert client.get(f"/api/runs/{run.name}/metrics").json()["train"] == []


def test_outputs_list_and_show_only_plain_files_of_artifacts(store: Path, tmp_path: Path) -> None:
    run = store / "calc-20260101-090000"
    folder = run / "artifacts" / "r0" / "artifacts"
    folder.mkdir(parents=True)
    (folder / "answer.txt").write_text("42\n")
    (folder / "blob.bin").write_bytes(b"\x00\x01\xff")
    (folder / "page.html").write_text("<script>alert(1)</script>")
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY")
    (folder / "key").symlink_to(secret)
    (folder / "linked").symlink_to(tmp_path, target_is_directory=True)
    (run / "status-copy.json").write_text("{}")
    client = TestClient(create_app(store, store.parent / "evals"), base_url="http://127.0.0.1")
    listed = client.get(f"/api/runs/{run.name}/outputs").json()
    assert sorted(f["path"] for f in listed["files"]) == [
        "r0/artifacts/answer.txt",
        "r0/artifacts/blob.bin",
        "r0/artifacts/page.html",
    ]
    shown = client.get(
        f"/api/runs/{run.name}/output", params={"path": "r0/artifacts/answer.txt"}
    ).json()
    assert (shown["text"], shown["size"], shown["binary"]) == ("42\n", 3, False)
    html = client.get(f"/api/runs/{run.name}/output", params={"path": "r0/artifacts/page.html"})
    assert html.headers["content-type"] == "application/json"  # shown as text, never as a page
    binary = client.get(f"/api/runs/{run.name}/output", params={"path": "r0/artifacts/blob.bin"})
    assert binary.json()["binary"] is True and binary.json()["text"] is None
    for path in (
        "r0/artifacts/key",
        "r0/artifacts/linked/id_rsa",
        "../status-copy.json",
        "../status.json",
        str(secret),
        "r0/../../status.json",
    ):
        reply = client.get(f"/api/runs/{run.name}/output", params={"path": path})
        assert reply.status_code == 404, path
        assert "PRIVATE" not in reply.text
    # A listed file swapped for a FIFO before it is opened: refused at once, never waited on.
    import os

    from osmosis_ai.dashboard import _data

    fifo = folder / "answer.txt"
    fifo.unlink()
    os.mkfifo(fifo)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_data, "_output_files", lambda _run: [("r0/artifacts/answer.txt", fifo)])
        reply = client.get(f"/api/runs/{run.name}/output", params={"path": "r0/artifacts/answer.txt"})
    assert reply.status_code == 404 and "FIFO" in reply.text
    (run / "artifacts").rename(run / "artifacts-real")
    (run / "artifacts").symlink_to(run / "artifacts-real", target_is_directory=True)
    assert client.get(f"/api/runs/{run.name}/outputs").json()["files"] == []
