"""The run lifecycle through the CLI, with real worker processes on a tiny model.

submit -> running -> finished; --detach then stop -> stopped with a checkpoint; kill -9 ->
crashed, then resume -> finished like an uninterrupted run; list/info/logs on finished,
failed and crashed runs; a failing rollout -> failed. Every wait is on the store's status
transitions (or the worker's exit), never a sleep that decides the outcome.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.cli._app import main
from osmosis_ai.runs import RunRecord, find_run, load_run, read_metrics, wait_for_status
from tests.trainer.runs.workspace import make_workspace, rollout_source


def _eos(model_dir: Path) -> int:
    from osmosis_trainer.models import load_model

    return int(load_model(str(model_dir)).tokenizer.eos_token_id)


def _json(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


def _data_position(run_dir: Path, step: int) -> dict[str, int]:
    meta = json.loads((run_dir / "checkpoints" / f"step_{step:06d}" / "checkpoint.json").read_text())
    return dict(meta["data"])


@pytest.fixture(scope="module")
def workspace(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A gated workspace and one uninterrupted 3-step run of it (gate open)."""
    root = tmp_path_factory.mktemp("lifecycle")
    gate = root / "gate"
    config = make_workspace(root / "ws", str(tiny_model_dir), eos_id=_eos(tiny_model_dir),
                            gate=gate)
    gate.touch()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(root / "ws")
        # stdout is not a terminal: one plain line per step, as in a log.
        assert main(["train", "submit", str(config)]) == 0
    gate.unlink()
    return {"config": config, "gate": gate, "runs": root / "ws" / "runs", "out": out.getvalue()}


@pytest.fixture
def in_workspace(workspace: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(workspace["runs"].parent)
    workspace["gate"].unlink(missing_ok=True)
    _waiting(workspace).unlink(missing_ok=True)
    return workspace


def _waiting(workspace: dict[str, Any]) -> Path:
    return workspace["gate"].with_name(workspace["gate"].name + ".waiting")


def _held_at_gate(workspace: dict[str, Any], path: Path) -> RunRecord:
    """Wait until step 1 is checkpointed and a step-2 rollout waits at the gate. A checkpoint
    alone is not enough: the worker checks for a stop request after saving it, so a stop sent
    in between (a loaded machine widens that window) ended the run after step 1, not 2."""
    return wait_for_status(path, lambda r: bool(r.checkpoints()) and _waiting(workspace).exists())


def test_submit_runs_to_finished(
    in_workspace: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    full = find_run_all(in_workspace["runs"])[0]
    out = in_workspace["out"]
    assert f"run {full.run_id}" in out and "finished 3 steps" in out
    assert re.search(r"^\[\d\d:\d\d\] step 3/3 \(100%\) reward \d\.\d{3} ", out, re.M), out
    # The end screen says what changed (osmosis_ai.learning; 3 steps: first vs last step).
    assert re.search(
        r"^reward: first step \d\.\d{3} → last step \d\.\d{3} \([+-]\d\.\d{3} over 3 steps\)$",
        out, re.M,
    ), out
    assert full.step == 3 and full.total_steps == 3 and full.phase == "complete"
    assert [c.step for c in full.checkpoints()] == [1, 2, 3]
    status = full.raw
    assert status["worker"]["pid"] != os.getpid() and status["model"]
    # ctx.artifacts_dir: one real folder per rollout under the run.
    markers = list((full.path / "artifacts").glob("*/artifacts/marker.txt"))
    assert len(markers) == 3 * 16 and markers[0].read_text() == "working-tree"
    assert "step 3/3 (100%)" in full.log_file.read_text()

    assert main(["train", "list", "--json"]) == 0
    listed = {r["run_id"]: r for r in _json(capsys)}
    assert listed[full.run_id]["status"] == "finished"
    assert listed[full.run_id]["step"] == 3 and listed[full.run_id]["last_reward"] is not None
    assert main(["train", "info", full.run_id, "--output", "info.json"]) == 0
    out = capsys.readouterr().out
    assert "finished" in out and "step 3/3" in out and "checkpoints" in out
    info = json.loads(Path("info.json").read_text())
    assert info["progress"] == {"current_step": 3, "total_steps": 3}
    assert [c["step"] for c in info["checkpoints"]] == [1, 2, 3]
    assert info["best_reward"]["reward"] >= info["metrics_summary"]["reward_mean"]["min"]
    assert info["config"]["training"]["rollout_batch_size"] == 4 and info["error"] is None
    assert main(["train", "logs", full.run_id]) == 0
    assert "step 1/3" in capsys.readouterr().out


def find_run_all(runs: Path) -> list[Any]:
    from osmosis_ai.runs import list_runs

    return list_runs(runs)


def _submit_detached(config: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["train", "submit", str(config), "--detach", "--json"]) == 0
    return Path(_json(capsys)["path"])


def test_detach_then_stop_ends_stopped_with_a_checkpoint(
    in_workspace: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _submit_detached(in_workspace["config"], capsys)
    _held_at_gate(in_workspace, path)
    run = load_run(path)
    assert run is not None and run.status == "running"
    # A second run would not fit the machine at once: refused with a clear message.
    assert main(["train", "submit", str(in_workspace["config"])]) == 1
    assert f"run {path.name} is running" in capsys.readouterr().err
    assert main(["train", "stop", path.name]) == 0
    assert "stop requested" in capsys.readouterr().out
    # `logs --follow` on the live run prints until the worker has ended.
    import threading

    follow = threading.Thread(target=main, args=(["train", "logs", path.name, "--follow"],))
    follow.start()
    in_workspace["gate"].touch()
    follow.join()
    followed = capsys.readouterr().out
    assert "step 1/3" in followed and "step 2/3" in followed and "stopped: 2 steps" in followed
    final = wait_for_status(path, lambda r: not r.live)
    assert final.status == "stopped" and final.phase == "cleanup"
    assert final.step == 2 and [c.step for c in final.checkpoints()] == [1, 2]
    assert main(["train", "stop", path.name]) == 1
    assert "already stopped" in capsys.readouterr().err


def test_kill_9_is_crashed_and_resume_matches_an_uninterrupted_run(
    in_workspace: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _submit_detached(in_workspace["config"], capsys)
    _held_at_gate(in_workspace, path)
    run = load_run(path)
    assert run is not None and run.status == "running"
    os.kill(int(run.raw["worker"]["pid"]), signal.SIGKILL)
    crashed = wait_for_status(path, lambda r: r.status == "crashed")
    assert crashed.status == "crashed" and crashed.phase == "error"
    assert "kill -9" in (crashed.error or "") and crashed.checkpoints()

    assert main(["train", "list", "--status", "crashed", "--json"]) == 0
    assert [r["run_id"] for r in _json(capsys)] == [path.name]
    assert main(["train", "info", path.name, "--json"]) == 0
    info = _json(capsys)
    assert info["status"] == "crashed" and "resume" in info["error"]
    assert [c["step"] for c in info["checkpoints"]] == [1]
    assert main(["train", "logs", path.name]) == 0
    assert "step 1/3" in capsys.readouterr().out

    in_workspace["gate"].touch()
    assert main(["train", "resume", path.name, "--json"]) == 0
    done = _json(capsys)
    assert done["status"] == "finished" and done["steps"] == 3
    resumed = load_run(path)
    assert resumed is not None and resumed.status == "finished" and resumed.raw["resumes"] == 1
    # The same run as an uninterrupted one: same config, every step once, the same
    # checkpoints at the same data positions.
    full = next(r for r in find_run_all(in_workspace["runs"]) if r.raw.get("resumes") is None
                and r.status == "finished")
    assert (path / "config.toml").read_text() == (full.path / "config.toml").read_text()
    assert [r["step"] for r in read_metrics(path / "metrics.jsonl")] == [1, 2, 3]
    assert [c.step for c in resumed.checkpoints()] == [1, 2, 3]
    for step in (1, 2, 3):
        assert _data_position(path, step) == _data_position(full.path, step)
    from safetensors.torch import load_file

    a = load_file(str(path / "checkpoints" / "step_000003" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(full.path / "checkpoints" / "step_000003" / "adapter" / "adapter_model.safetensors"))
    assert {k: v.shape for k, v in a.items()} == {k: v.shape for k, v in b.items()}

    # Resuming a finished run, or a run without a checkpoint: one-line errors.
    assert main(["train", "resume", path.name]) == 1
    assert "already finished all 3 steps" in capsys.readouterr().err


def test_failing_rollout_is_failed_with_its_error(
    in_workspace: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    main_py = in_workspace["runs"].parent / "rollouts" / "even" / "main.py"
    main_py.write_text(rollout_source(broken=True))
    try:
        assert main(["train", "submit", str(in_workspace["config"]), "--name", "broken"]) == 1
    finally:
        main_py.write_text(rollout_source())
    captured = capsys.readouterr()
    assert "error: run broken-" in captured.err and "tool server down" in captured.err
    failed = find_run(in_workspace["runs"], "broken")
    assert failed.status == "failed" and failed.phase == "error" and not failed.checkpoints()
    assert main(["train", "info", "broken", "--json"]) == 0
    assert "16 of 16 rollouts failed" in _json(capsys)["error"]
    assert main(["train", "logs", "broken"]) == 0
    assert "tool server down" in capsys.readouterr().out
    assert main(["train", "resume", "broken"]) == 1
    assert "has no checkpoint to resume from" in capsys.readouterr().err


def _foreground_submit(
    workspace: dict[str, Any], name: str
) -> tuple[subprocess.Popen[str], Path]:
    """``osmosis train submit`` in a process of its own, as a terminal starts it, once its
    first step's checkpoint is saved (the next step waits at the closed gate): the CLI process
    and the run's folder."""
    code = (
        "import sys; from osmosis_ai.cli._app import main; "
        f"sys.exit(main(['train', 'submit', {str(workspace['config'])!r}, '--name', {name!r}]))"
    )
    cli = subprocess.Popen(
        [sys.executable, "-c", code], cwd=workspace["runs"].parent,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # A background shell (CI runners, `cmd &`) passes SIGINT on ignored, and Python then
        # raises no KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert cli.stdout is not None
    first = cli.stdout.readline()  # "run <name>-<time> (<path>)", the first line on stdout
    assert first.startswith("run "), first
    path = workspace["runs"] / first.split()[1]
    assert path.is_dir(), first
    _held_at_gate(workspace, path)
    return cli, path


def test_sigterm_to_the_foreground_cli_ends_its_worker_as_killed(
    in_workspace: dict[str, Any],
) -> None:
    """``timeout`` or a job runner ends ``train submit`` with SIGTERM: the worker (its own
    session, so the signal never reaches it) must not train on unseen."""
    cli, path = _foreground_submit(in_workspace, "term")
    cli.send_signal(signal.SIGTERM)
    out, err = cli.communicate(timeout=300)
    assert cli.returncode == 1, err
    assert "killed" in out and "resume: osmosis train resume" in out
    final = load_run(path)
    assert final is not None and final.status == "killed" and final.step == 1
    worker = final.raw["worker"]["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)


def test_ctrl_c_in_the_foreground_stops_after_the_step(in_workspace: dict[str, Any]) -> None:
    cli, path = _foreground_submit(in_workspace, "ctrlc")
    cli.send_signal(signal.SIGINT)  # the worker has its own session: only the CLI gets it
    # The stop request is written before the gate opens: step 2 is the last one.
    wait_for_status(path, lambda r: r.run_dir.stop_requested())
    in_workspace["gate"].touch()
    out, err = cli.communicate()
    assert cli.returncode == 0, err
    assert "stopping after the current step" in err and "stopped 2 steps" in out
    final = load_run(path)
    assert final is not None and final.status == "stopped" and final.step == 2
    assert [c.step for c in final.checkpoints()] == [1, 2]
