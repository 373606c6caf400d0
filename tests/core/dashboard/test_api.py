"""The dashboard's JSON API over a run store and eval runs built on disk (no trainer)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from osmosis_ai.dashboard import create_app
from osmosis_ai.runs import RunDir, create_run_dir
from tests.core.dashboard._evals import write_eval_run


def _run(root: Path, name: str, day: int, status: str, **fields: Any) -> RunDir:
    run = create_run_dir(root, name, now=datetime(2026, 1, day, 9, 0, 0), model="tiny",
                         rollout="calc", dataset="calc.jsonl")
    run.config_file.write_text('[experiment]\nrollout = "calc"\n')
    run.update_status(status=status, total_steps=3, created_at=float(day), **fields)
    return run


def _metrics(run: RunDir, lines: list[str]) -> None:
    (run.path / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))


def _trace(run: RunDir, step: int, samples: list[dict[str, Any]]) -> None:
    folder = run.path / "traces"
    folder.mkdir(exist_ok=True)
    (folder / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


def _sample(group: int, rollout: str, reward: float, advantage: float) -> dict[str, Any]:
    return {
        "step": 1, "group_id": group, "rollout_id": rollout, "sample_id": "main",
        "reward": reward, "advantage": advantage, "truncated": False,
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        "sequences": [{"token_ids": [1, 2, 3], "tokens": ["2+2?", " ", "4"], "mask": [0, 0, 1],
                       "sampler_logprobs": [0.0, 0.0, -0.1], "trainer_logprobs": [0.0, 0.0, -0.12]}],
    }


@pytest.fixture
def ws(tmp_path: Path) -> tuple[Path, Path, dict[str, RunDir]]:
    runs, evals = tmp_path / "ws" / "runs", tmp_path / "ws" / ".osmosis" / "evals"
    done = _run(runs, "calc", 1, "finished", step=3, phase="complete",
                last_train={"reward_mean": 0.75})
    _metrics(done, [
        json.dumps({"step": 1, "kind": "train", "reward_mean": 0.25, "train_tokens": 40.0,
                    "train_sequences": 4.0, "failed/timeout": 1.0}),
        json.dumps({"step": 2, "kind": "train", "reward_mean": 0.5}),
        '{"step": 3, "kind": "tr',  # a torn / corrupt line
        json.dumps({"step": 2, "kind": "eval", "val_reward_mean": 0.4}),
    ])
    (done.path / "failures.jsonl").write_text(
        json.dumps({"step": 1, "failed": 1, "rollouts": 4, "reasons": {"timeout": 1}}) + "\n"
    )
    _trace(done, 1, [_sample(0, "r0", 1.0, 0.5), _sample(0, "r1", 0.0, -0.5),
                     _sample(1, "r2", 1.0, 0.0)])
    live = _run(runs, "live", 2, "running", step=1, phase="train")
    write_eval_run(evals, "base", "tiny", [0.0, 1.0, None])
    write_eval_run(evals, "trained", "calc:3", [1.0, 1.0, 0.0])
    return runs, evals, {"done": done, "live": live}


@pytest.fixture
def client(ws: tuple[Path, Path, dict[str, RunDir]]) -> TestClient:
    return TestClient(create_app(ws[0], ws[1]), base_url="http://127.0.0.1")


def test_run_list_newest_first_with_status_and_reward(client: TestClient, ws: Any) -> None:
    runs = client.get("/api/runs").json()["runs"]
    assert [r["run_id"] for r in runs] == [ws[2]["live"].run_id, ws[2]["done"].run_id]
    done = runs[1]
    assert (done["status"], done["phase"], done["step"], done["total_steps"]) == (
        "finished", "complete", 3, 3)
    assert done["last_reward"] == 0.75
    assert (done["rollout"], done["dataset"], done["model"]) == ("calc", "calc.jsonl", "tiny")
    assert runs[0]["status"] == "running"  # this test process is its worker: alive


def test_one_runs_metrics_split_by_kind_and_corrupt_line_reported(
    client: TestClient, ws: Any
) -> None:
    body = client.get(f"/api/runs/{ws[2]['done'].run_id}/metrics").json()
    assert [r["reward_mean"] for r in body["train"]] == [0.25, 0.5]
    assert [r["val_reward_mean"] for r in body["eval"]] == [0.4]
    assert body["corrupt_lines"] == [3]
    assert body["train"][0]["total_length"] == 10.0


def test_run_detail_failures_and_config(client: TestClient, ws: Any) -> None:
    run_id = ws[2]["done"].run_id
    detail = client.get(f"/api/runs/{run_id}").json()
    assert detail["config"] == {"experiment": {"rollout": "calc"}}
    assert detail["traces"] is True
    assert client.get(f"/api/runs/{run_id}/failures").json()["by_reason"] == {"timeout": 1}


def test_traces_grouped_by_group_with_tokens(client: TestClient, ws: Any) -> None:
    run_id = ws[2]["done"].run_id
    assert client.get(f"/api/runs/{run_id}/traces").json() == {"steps": [1]}
    body = client.get(f"/api/runs/{run_id}/traces/1").json()
    groups = {g["group_id"]: g["samples"] for g in body["groups"]}
    assert [s["advantage"] for s in groups["0"]] == [0.5, -0.5]
    assert groups["1"][0]["sequences"][0]["mask"] == [0, 0, 1]
    missing = client.get(f"/api/runs/{run_id}/traces/2")
    assert missing.status_code == 404 and "no traces for step 2" in missing.json()["detail"]


def test_eval_detail_and_comparison(client: TestClient) -> None:
    names = [e["name"] for e in client.get("/api/evals").json()["evals"]]
    assert sorted(names) == ["base", "trained"]
    base = client.get("/api/evals/base").json()
    assert base["failures_by_reason"] == {"timeout": 1}
    # The summary comes from the results (no summary.json yet): the failure counts as not passed.
    assert base["summary"]["pass_rate"] == pytest.approx(1 / 3)
    assert "pass_at_k" in base["summary"]
    assert len(base["results"]) == 3
    cmp = client.get("/api/compare", params={"a": "base", "b": "trained"}).json()
    # Rows 0 and 1 were scored by both (row 2 failed in base): +1.0 and 0.0.
    assert [(r["row_index"], r["diff"]) for r in cmp["rows"]] == [(0, 1.0), (1, 0.0)]
    assert (cmp["mean_diff"], cmp["b_better"], cmp["a_better"]) == (0.5, 1, 0)


def test_deleted_run_is_a_clear_404(client: TestClient, ws: Any) -> None:
    import shutil

    run = ws[2]["done"]
    shutil.rmtree(run.path)
    reply = client.get(f"/api/runs/{run.run_id}")
    assert reply.status_code == 404
    assert "deleted?" in reply.json()["detail"]
    assert client.get("/api/runs").status_code == 200


@pytest.mark.parametrize("name", ["..", "...", ".hidden", "a..b", "a b", "a\\b", "-x", "é"])
def test_bad_run_and_eval_names_are_400(client: TestClient, name: str) -> None:
    for url in (f"/api/runs/{name}", f"/api/runs/{name}/metrics", f"/api/evals/{name}"):
        reply = client.get(url)
        assert reply.status_code in (400, 404), url
        assert "detail" in reply.json()
    assert client.get(f"/api/runs/{name}").status_code == 400 or name == ".."


def test_path_traversal_never_reads_outside(
    client: TestClient, ws: Any, tmp_path: Path
) -> None:
    secret = tmp_path / "ws" / "secret"
    secret.mkdir()
    (secret / "status.json").write_text(json.dumps({"status": "finished", "name": "secret"}))
    (secret / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 42}) + "\n")
    attempts = [
        "/api/runs/..%2Fsecret", "/api/runs/%2E%2E/metrics", "/api/runs/..%2F..%2Fetc",
        "/api/runs/" + str(secret).replace("/", "%2F") + "/metrics",
        "/api/evals/..%2F..%2Fruns", "/api/compare?a=..%2Fx&b=base",
        "/static/../../runs", "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2F_app.py",
        f"/api/runs/{ws[2]['done'].run_id}/traces/..%2F..%2Fstatus",
        f"/api/runs/{ws[2]['done'].run_id}/traces/-1",
    ]
    for url in attempts:
        reply = client.get(url)
        assert reply.status_code in (400, 404, 422), (url, reply.status_code)
        assert "42" not in reply.text and "root:" not in reply.text


def test_trace_file_that_is_a_symlink_out_is_named_not_followed(
    client: TestClient, ws: Any, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"group_id": 0, "secret": "leak"}) + "\n")
    link = ws[2]["done"].path / "traces" / "step_000009.jsonl"
    link.symlink_to(outside)
    run_id = ws[2]["done"].run_id
    assert client.get(f"/api/runs/{run_id}/traces").json() == {"steps": [1, 9]}
    reply = client.get(f"/api/runs/{run_id}/traces/9")
    assert reply.status_code == 200 and "leak" not in reply.text
    assert reply.json()["groups"] == []
    assert reply.json()["problems"] == [
        f"this file is unreadable: {link}: a symbolic link: links are not followed here; keep "
        "plain files and folders in this folder"
    ]


def test_stop_is_what_train_stop_does_and_needs_the_header(client: TestClient, ws: Any) -> None:
    live, done = ws[2]["live"], ws[2]["done"]
    assert client.post(f"/api/runs/{live.run_id}/stop").status_code == 403
    assert not live.stop_requested()
    headers = {"X-Osmosis-Dashboard": "1"}
    assert client.post(f"/api/runs/{live.run_id}/stop", headers=headers).status_code == 200
    assert live.stop_requested()
    reply = client.post(f"/api/runs/{done.run_id}/stop", headers=headers)
    assert reply.status_code == 409 and "already finished" in reply.json()["detail"]


def test_foreign_host_header_is_refused(ws: Any) -> None:
    client = TestClient(create_app(ws[0], ws[1]), base_url="http://evil.example")
    assert client.get("/api/runs").status_code == 400


def test_empty_workspace_and_page_assets(tmp_path: Path) -> None:
    client = TestClient(create_app(tmp_path / "runs", tmp_path / "evals"),
                        base_url="http://localhost")
    assert client.get("/api/runs").json()["runs"] == []
    assert client.get("/api/evals").json()["evals"] == []
    page = client.get("/")
    assert page.status_code == 200 and "/static/vendor/uPlot.iife.min.js" in page.text
    assert client.get("/static/vendor/uPlot.iife.min.js").status_code == 200
    assert client.get("/static/app.js").status_code == 200
