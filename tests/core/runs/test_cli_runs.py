"""``osmosis train list/info/logs/stop/resume`` on run folders, without starting a worker:
finished, failed and crashed runs, bad names and bad configs as one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.runs import RunDir, create_run_dir


def _run(root: Path, name: str, day: int, status: str, **fields: object) -> RunDir:
    run = create_run_dir(root, name, now=datetime(2026, 1, day, 9, 0, 0), model="embedded",
                         rollout="even", dataset="data/even.jsonl")
    run.config_file.write_text('[experiment]\nrollout = "even"\n')
    run.update_status(status=status, total_steps=4, **fields)
    run.log_file.write_text(f"log of {run.run_id}\n")
    with open(run.path / "metrics.jsonl", "w") as fh:
        for step, reward in ((1, 0.2), (2, 0.6), (3, 0.4)):
            fh.write(json.dumps({"step": step, "kind": "train", "reward_mean": reward}) + "\n")
    ckpt = run.checkpoints / "step_000002"
    (ckpt / "adapter").mkdir(parents=True)
    (ckpt / "trainer_state.pt").write_bytes(b"x")
    (ckpt / "checkpoint.json").write_text(json.dumps({"step": 2, "metrics": {"reward_mean": 0.6}}))
    return run


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    _run(root, "good", 1, "finished", step=4, phase="complete",
         last_train={"reward_mean": 0.4})
    _run(root, "bad", 2, "failed", step=3, phase="error", error="TrainingError: boom")
    # A worker that died without a word: a pid that is not running.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    _run(root, "gone", 3, "running", step=3, phase="train",
         worker={"pid": int(dead.stdout), "host": None, "boot_id": None, "pid_start": None})
    monkeypatch.chdir(tmp_path)
    return root


def test_list_shows_every_run_and_filters(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["status"], r["phase"], r["step"], r["total_steps"]) for r in listed] == [
        ("good", "finished", "complete", 4, 4),
        ("bad", "failed", "error", 3, 4),
        ("gone", "crashed", "error", 3, 4),
    ]
    assert listed[0]["last_reward"] == 0.4 and listed[0]["model"] == "embedded"
    assert main(["train", "list", "--status", "crashed", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["gone"]
    assert main(["train", "list"]) == 0
    table = capsys.readouterr().out
    assert "good-20260101-090000" in table and "crashed" in table and "4/4" in table
    assert main(["train", "list", "--status", "done"]) == 1
    assert "not a run status; use one of pending, running, finished" in capsys.readouterr().err


def test_info_on_finished_failed_and_crashed(
    runs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["train", "info", "good", "--output", str(tmp_path / "out" / "good.json")]) == 0
    shown = capsys.readouterr().out
    assert "finished" in shown and "step 4/4" in shown and "best 0.600 at step 2" in shown
    info = json.loads((tmp_path / "out" / "good.json").read_text())
    assert info["progress"] == {"current_step": 4, "total_steps": 4}
    assert info["latest_reward"] == 0.4 and info["best_reward"] == {"step": 2, "reward": 0.6}
    assert info["metrics_summary"]["reward_mean"]["max"] == 0.6
    assert [(c["step"], c["reward"]) for c in info["checkpoints"]] == [(2, 0.6)]
    assert info["config"] == {"experiment": {"rollout": "even"}} and info["error"] is None
    assert main(["train", "info", "bad", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["error"] == "TrainingError: boom"
    assert main(["train", "info", "gone", "--json"]) == 0
    crashed = json.loads(capsys.readouterr().out)
    assert crashed["status"] == "crashed" and "ended without recording an outcome" in crashed["error"]


def test_logs(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("good", "bad", "gone"):
        assert main(["train", "logs", name]) == 0
        assert capsys.readouterr().out.startswith(f"log of {name}-2026")
    # --follow on an ended run prints what there is and returns.
    assert main(["train", "logs", "gone", "--follow"]) == 0
    assert "log of gone" in capsys.readouterr().out


def test_bad_names_and_states_are_one_line_errors(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(runs, "good", 5, "finished")  # a second run named "good"
    cases = [
        (["train", "info", "nope"], "no run named 'nope'"),
        (["train", "info", "good"], "run name 'good' matches 2 runs: good-20260101-090000"),
        (["train", "logs", "nope"], "no run named 'nope'"),
        (["train", "stop", "bad"], "is already failed; nothing to stop"),
        (["train", "resume", "good-20260101"], "already finished all 4 steps"),
    ]
    for argv, message in cases:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    bad = RunDir(runs / "bad-20260102-090000", "bad")
    for folder in bad.checkpoints.iterdir():
        if folder.is_dir():
            for f in folder.rglob("*"):
                if f.is_file():
                    f.unlink()
    assert main(["train", "resume", "bad"]) == 1
    assert "has no checkpoint to resume from" in capsys.readouterr().err


def test_submit_refuses_bad_pins_and_uncached_hub_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    (ws / "rollouts" / "r").mkdir(parents=True)
    (ws / "rollouts" / "r" / "main.py").write_text("")
    (ws / "data").mkdir()
    (ws / "data" / "d.jsonl").write_text('{"user_prompt": "hi"}\n')
    (ws / "configs" / "training").mkdir(parents=True)
    config = ws / "configs" / "training" / "t.toml"
    base = '[experiment]\nrollout = "r"\nentrypoint = "main.py"\ndataset = "d"\n'
    config.write_text(base + 'model_path = "embedded"\ncommit_sha = "abcdef1"\n')
    assert main(["train", "submit", str(config)]) == 1
    assert "is not a git repository" in capsys.readouterr().err
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config.write_text(base + 'model_path = "Qwen/Qwen2.5-0.5B-Instruct"\n')
    assert main(["train", "submit", str(config)]) == 1
    err = capsys.readouterr().err
    assert "'Qwen/Qwen2.5-0.5B-Instruct': not in the Hugging Face cache" in err
    config.write_text(base + 'model_path = "embedded"\nbogus = 1\n')
    assert main(["train", "submit", str(config)]) == 1
    assert "bogus" in capsys.readouterr().err
    assert not (ws / "runs").exists()  # nothing was started


def test_list_and_info_do_not_import_torch(runs: Path) -> None:
    code = (
        "import sys; from osmosis_ai.cli._app import main; "
        "assert main(['train', 'list', '--json']) == 0; "
        "assert main(['train', 'info', 'good', '--json']) == 0; "
        "heavy = [m for m in ('torch', 'transformers', 'osmosis_trainer') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], cwd=runs.parent, check=True,
                   capture_output=True)
