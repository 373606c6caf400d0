"""``osmosis eval submit`` (detached), ``eval list`` and ``eval info`` on a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from osmosis_ai.runs._process import describe_process

from .conftest import RunCli


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from osmosis_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def workspace(run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert run_cli("template", "create", "calc", "--dir", tmp_path).code == 0
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _wait(pid: int) -> None:
    """Wait for a worker this process started (it is our child even in a new session)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # already reaped by subprocess' own clean-up of old Popens
        pass


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_submit_runs_detached_then_list_and_info_read_it(
    run_cli: RunCli, workspace: Path, tiny_model: Path
) -> None:
    res = run_cli(
        "eval",
        "submit",
        "configs/eval/calc.toml",
        "--model",
        tiny_model,
        "--limit",
        "2",
        "--name",
        "bg",
        "--json",
    )
    assert res.code == 0, res.err
    sub = res.json()
    assert sub["name"] == "bg" and sub["run_dir"].endswith(".osmosis/evals/bg")
    _wait(sub["pid"])
    log = (workspace / ".osmosis/evals/bg/eval.log").read_text()
    assert "eval calc: 2 samples" in log, log

    listed = run_cli("eval", "list", "--json").json()
    assert [(v["name"], v["status"], v["done"], v["work_items"]) for v in listed] == [
        ("bg", "completed", 2, 2)
    ]
    human = run_cli("eval", "list")
    assert "bg" in human.out and "completed" in human.out and "2/2" in human.out

    res = run_cli("eval", "info", "bg", "--output", "out/bg.json")
    assert res.code == 0, res.err
    assert "eval bg (completed)" in res.out and "results (first 20)" in res.out
    data = json.loads((workspace / "out/bg.json").read_text())
    assert data["status"] == "completed" and data["model"] == str(tiny_model)
    assert sorted(r["row_index"] for r in data["results"]) == [0, 1]
    assert data["summary"]["samples"] == 2


@pytest.mark.slow  # a second detached worker (loads torch and the model again)
def test_submit_without_a_name_gets_a_timestamped_folder(
    run_cli: RunCli, workspace: Path, tiny_model: Path
) -> None:
    res = run_cli(
        "eval",
        "submit",
        "configs/eval/calc.toml",
        "--model",
        tiny_model,
        "--rows",
        "3",
        "--json",
    )
    assert res.code == 0, res.err
    sub = res.json()
    assert sub["name"].startswith("calc-")
    _wait(sub["pid"])
    info = run_cli("eval", "info", sub["name"], "--json").json()
    assert info["status"] == "completed"
    assert [r["row_index"] for r in info["results"]] == [3]


def test_a_run_whose_process_died_is_crashed(run_cli: RunCli, workspace: Path) -> None:
    run = workspace / ".osmosis/evals/gone"
    run.mkdir(parents=True)
    info = {
        "config_path": "c.toml",
        "config_name": "calc",
        "rollout_dir": "r",
        "entrypoint": "e",
        "dataset": "d",
        "model": "embedded",
        "n": 1,
        "limit": None,
        "pass_threshold": 1.0,
        "rollout_hash": "x",
        "dataset_hash": "y",
        "started_at": "2026-11-24T01:00:00+00:00",
        "status": "running",
        "work_items": 4,
        "worker": describe_process(_dead_pid()),
    }
    (run / "run.json").write_text(json.dumps(info))
    (run / "eval.log").write_text("Killed\n")
    (run / "results.jsonl").write_text(
        json.dumps(
            {"row_index": 0, "run_index": 0, "rollout_id": "r0", "status": "success", "reward": 0.5}
        )
        + "\n"
    )
    waiting = workspace / ".osmosis/evals/waiting"
    waiting.mkdir()
    (waiting / "submit.json").write_text(
        json.dumps({"config": "calc", "worker": describe_process()})
    )
    views = {v["name"]: v for v in run_cli("eval", "list", "--json").json()}
    assert {k: v["status"] for k, v in views.items()} == {"gone": "crashed", "waiting": "pending"}
    # The results written before the crash are summarised.
    assert views["gone"]["done"] == 1 and views["gone"]["summary"]["reward"]["mean"] == 0.5
    res = run_cli("eval", "info", "gone")
    assert "(crashed)" in res.out and "Killed" in res.out


def test_info_of_an_unknown_run_lists_the_known_ones(run_cli: RunCli, workspace: Path) -> None:
    (workspace / ".osmosis/evals/calc-1").mkdir(parents=True)
    (workspace / ".osmosis/evals/calc-1/submit.json").write_text(
        json.dumps({"worker": describe_process()})
    )
    res = run_cli("eval", "info", "nope")
    assert res.code == 1 and "no eval run named 'nope'" in res.err and "calc-1" in res.err
    assert len(res.err.strip().splitlines()) == 1


def test_empty_list(run_cli: RunCli, workspace: Path) -> None:
    res = run_cli("eval", "list")
    assert res.code == 0 and "No eval runs under" in res.out
