"""A run folder is data: a corrupt ``status.json``, a worker record without a start time and
links out of the folder never crash a reader nor make it trust what it cannot check."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.runs import RunDir, create_run_dir, describe_run, find_run, list_runs
from osmosis_ai.runs._process import describe_process
from osmosis_ai.runs._published import (
    publish_status,
    record_deployment,
    record_deployment_end,
    record_upload,
)

CORRUPT = {"name": "bad", "status": "running", "created_at": "yesterday", "step": "abc", "pid": 1}


def _run(root: Path, name: str, day: int, **fields: object) -> RunDir:
    run = create_run_dir(
        root,
        name,
        now=datetime(2026, 1, day, 9, 0, 0),
        model="embedded",
        rollout="calc",
        dataset="calc.jsonl",
    )
    run.update_status(**{"status": "finished", "step": 2, "total_steps": 2, **fields})
    return run


def _checkpoint(run: RunDir, step: int) -> Path:
    ckpt = run.checkpoints / f"step_{step:06d}"
    (ckpt / "adapter").mkdir(parents=True)
    (ckpt / "trainer_state.pt").write_bytes(b"x")
    (ckpt / "checkpoint.json").write_text(json.dumps({"step": step}))
    return ckpt


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    _run(root, "good", 1)
    bad = root / "bad-20260102-090000"
    bad.mkdir()
    (bad / "status.json").write_text(json.dumps(CORRUPT))
    monkeypatch.chdir(tmp_path)
    return root


def test_a_corrupt_status_is_one_unreadable_run(runs: Path) -> None:
    listed = {r.run_id: r for r in list_runs(runs)}
    bad = listed["bad-20260102-090000"]
    assert listed["good-20260101-090000"].unreadable is None
    assert bad.status == "unknown" and not bad.live
    assert bad.unreadable is not None
    assert "step" in bad.unreadable and "created_at" in bad.unreadable
    assert "'yesterday'" in bad.unreadable
    details = describe_run(bad)
    assert details["unreadable"] == bad.unreadable and details["progress"]["current_step"] == 0


@pytest.mark.parametrize(
    "text",
    [
        '{"status": "running", "step": 1',
        "[1, 2]",
        '{"worker": {"pid": "x"}}',
        '{"total_steps": -3}',
    ],
)
def test_every_kind_of_broken_status_is_unreadable(runs: Path, text: str) -> None:
    (runs / "bad-20260102-090000" / "status.json").write_text(text)
    bad = find_run(runs, "bad-20260102-090000")
    assert bad.unreadable and bad.status == "unknown"


def test_train_list_stop_info_resume_with_a_corrupt_run(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "list", "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["good-20260101-090000"]["status"] == "finished"
    assert "step" in listed["bad-20260102-090000"]["unreadable"]
    assert main(["train", "list"]) == 0
    out = capsys.readouterr()
    assert "unreadable" in out.out and "is unreadable" in out.err
    assert main(["train", "stop", "bad"]) == 1
    err = capsys.readouterr().err
    assert "unreadable" in err and "Traceback" not in err
    assert not (runs / "bad-20260102-090000" / "STOP").exists()
    assert main(["train", "info", "bad"]) == 0
    assert "unreadable" in capsys.readouterr().out
    assert main(["train", "stop", "good"]) == 1  # still listed and handled as before
    assert "already finished" in capsys.readouterr().err


def test_a_live_pid_without_its_start_time_is_not_the_worker(tmp_path: Path) -> None:
    """This test process is alive; a record naming its pid without ``pid_start`` (a copied or
    crafted folder) must not make the run look live, and ``train stop`` must not accept it."""
    me = describe_process()
    assert me["pid_start"] is not None  # /proc is readable here
    run = _run(
        tmp_path / "runs",
        "copied",
        1,
        status="running",
        worker={**me, "pid_start": None},
        pid=os.getpid(),
    )
    record = find_run(tmp_path / "runs", "copied")
    assert record.status == "crashed" and not record.live
    genuine = _run(tmp_path / "runs", "genuine", 2, status="running", worker=me)
    assert find_run(tmp_path / "runs", genuine.run_id).live
    assert run.run_id != genuine.run_id


def test_links_out_of_the_store_are_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run = _run(root, "real", 1)
    _checkpoint(run, 1)
    elsewhere = tmp_path / "elsewhere"
    outside_run = _run(elsewhere, "outside", 2)
    (root / outside_run.run_id).symlink_to(outside_run.path, target_is_directory=True)
    assert [r.run_id for r in list_runs(root)] == [run.run_id]

    # Files and folders of a listed run that link out: the status, the config, the
    # checkpoints, one checkpoint.
    secret = tmp_path / "secret.toml"
    secret.write_text('[remote]\napi_key = "sk-planted"\n')
    run.config_file.unlink(missing_ok=True)
    run.config_file.symlink_to(secret)
    other = _checkpoint(outside_run, 7)
    (run.checkpoints / "step_000007").symlink_to(other, target_is_directory=True)
    record = find_run(root, run.run_id)
    details = describe_run(record)
    assert details["config"] is None and "sk-planted" not in json.dumps(details)
    assert [c["step"] for c in details["checkpoints"]] == [1]

    linked = _run(root, "linked", 3)
    (linked.path / "status.json").unlink()
    (linked.path / "status.json").symlink_to(outside_run.path / "status.json")
    record = find_run(root, linked.run_id)
    assert record.unreadable and "symbolic link" in record.unreadable


def test_improvement_samples_and_warm_start_in_the_overview(tmp_path: Path) -> None:
    run = _run(tmp_path / "runs", "calc", 1)
    lines = [
        {"step": s, "kind": "train", "reward_mean": r, "samples": 8.0}
        for s, r in ((1, 0.1), (2, 0.2), (3, 0.3), (4, 0.5), (5, 0.6), (6, 0.7))
    ]
    lines += [
        {"step": s, "kind": "warm_start", "warm_start/loss": loss, "warm_start/token_accuracy": acc}
        for s, loss, acc in ((1, 2.0, 0.4), (2, 1.0, 0.7), (3, 0.5, 0.9))
    ]
    lines.append({"step": "abc", "kind": "train", "reward_mean": 9.0})  # skipped, no crash
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    details = describe_run(find_run(tmp_path / "runs", "calc"))
    assert details["samples"] == 48
    imp = details["improvement"]
    assert imp["first"] == pytest.approx(0.2) and imp["last"] == pytest.approx(0.6)
    assert imp["change"] == pytest.approx(0.4)
    assert details["warm_start"] == {
        "steps": 3,
        "loss": {"first": 2.0, "last": 0.5},
        "token_accuracy": {"first": 0.4, "last": 0.9},
    }


def test_deployment_and_hub_upload_status_of_a_checkpoint(tmp_path: Path) -> None:
    run = _run(tmp_path / "runs", "calc", 1)
    ckpt = _checkpoint(run, 2)
    assert publish_status(ckpt) == {"deployment": None, "hub": None}
    entry = record_deployment(
        ckpt, url="http://127.0.0.1:8000/v1", name="calc-step2", engine="hf", pid=os.getpid()
    )
    assert publish_status(ckpt)["deployment"]["state"] == "serving"
    record_deployment_end(ckpt, entry, 0)
    dep = publish_status(ckpt)["deployment"]
    assert (dep["state"], dep["url"]) == ("stopped", "http://127.0.0.1:8000/v1")
    record_upload(ckpt, repo="me/calc", url=None, private=True, merged=False, error="offline")
    assert publish_status(ckpt)["hub"]["state"] == "failed"
    record_upload(
        ckpt, repo="me/calc", url="https://huggingface.co/me/calc", private=True, merged=False
    )
    hub = publish_status(ckpt)["hub"]
    assert (hub["state"], hub["repo"], hub["private"]) == ("uploaded", "me/calc", True)
    checkpoints = describe_run(find_run(tmp_path / "runs", "calc"))["checkpoints"]
    assert checkpoints[0]["hub"]["state"] == "uploaded"
    assert checkpoints[0]["deployment"]["state"] == "stopped"
    # The record never lands in the adapter folder an export copies.
    assert not any((ckpt / "adapter").iterdir())
