"""Every template: ``template create`` -> ``validate`` -> ``eval run --limit 2`` on a tiny model.

The model is a random-init tiny Qwen2 built offline (``build_tiny_model``); it outputs garbage,
so rewards are low. What is asserted is that the real path (gateway + HF engine + runner +
adapters) produces results, traces and a summary, and that errors read well.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import RunCli

TEMPLATES = ["single-call", "strands", "openai-agents"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from osmosis_trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _create(run_cli: RunCli, ws: Path, template: str) -> None:
    res = run_cli("template", "create", "calc", "--template", template, "--dir", ws)
    assert res.code == 0, res.err


@pytest.mark.parametrize("template", TEMPLATES)
def test_template_is_created_validated_and_evaluated(
    run_cli: RunCli,
    tmp_path: Path,
    tiny_model: Path,
    template: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _create(run_cli, tmp_path, template)
    monkeypatch.chdir(tmp_path)

    res = run_cli("validate", "rollouts/calc/main.py")
    assert res.code == 0, res.err
    assert "CalculatorWorkflow" in res.out and "CalculatorGrader" in res.out
    report = run_cli("validate", "configs/eval/calc.toml", "--json").json()
    assert report["ok"] is True
    assert report["workflow"]["name"] == "CalculatorWorkflow"
    assert report["grader"]["name"] == "CalculatorGrader"
    assert report["dataset"]["rows"] >= 20 and report["dataset"]["ok"] is True

    out = tmp_path / "evals" / "run1"
    res = run_cli(
        "eval",
        "run",
        "configs/eval/calc.toml",
        "--limit",
        "2",
        "--model",
        tiny_model,
        "--output",
        out,
    )
    assert res.code == 0, res.err
    assert "eval calc" in res.out and "pass rate (reward >= 1)" in res.out
    assert "reward" in res.out and "latency" in res.out and "tokens" in res.out
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["row_index"] for r in records) == [0, 1]
    for r in records:
        assert set(r) >= {
            "row_index",
            "run_index",
            "rollout_id",
            "status",
            "reward",
            "tokens",
            "duration_ms",
            "error_type",
            "error",
        }
        if r["status"] == "success":
            assert 0.0 <= r["reward"] <= 1.0 and r["error"] is None
            assert r["tokens"] > 0  # token counts come from the gateway's records
        else:  # a garbage model may fail a sample: that is data, never a 0.0 reward
            assert r["reward"] is None and r["error_type"]
        trace = json.loads((out / r["trace"]).read_text())
        assert trace["messages"] or trace["error"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] == 2
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["model"] == str(tiny_model)


def test_eval_resume_continues_an_interrupted_run(
    run_cli: RunCli, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _create(run_cli, tmp_path, "single-call")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    args = ["eval", "run", "configs/eval/calc.toml", "--limit", "3", "--model", str(tiny_model)]
    assert run_cli(*args, "--output", out).code == 0
    # Simulate a Ctrl-C after the first result: keep one complete line plus a torn write.
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n" + lines[1][:20])
    info = json.loads((out / "run.json").read_text())
    info["status"] = "interrupted"
    (out / "run.json").write_text(json.dumps(info))

    # --resume alone continues with the run's own settings (limit, model)
    res = run_cli("eval", "run", "configs/eval/calc.toml", "--output", out, "--resume", "--json")
    assert res.code == 0, res.err
    data = res.json()
    assert data["status"] == "completed"
    assert (data["resumed_records"], data["new_records"]) == (1, 2)
    assert data["summary"]["samples"] == 3
    rows = [json.loads(x)["row_index"] for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(rows) == [0, 1, 2]

    (tmp_path / "rollouts/calc/main.py").write_text(
        (tmp_path / "rollouts/calc/main.py").read_text() + "\n# changed\n"
    )
    res = run_cli(*args, "--output", out, "--resume")
    assert res.code == 1
    assert "--resume refused: the rollout code" in res.err and "changed" in res.err
    assert "Traceback" not in res.err


def test_eval_bad_config_is_one_clear_line(run_cli: RunCli, tmp_path: Path) -> None:
    _create(run_cli, tmp_path, "single-call")
    cfg = tmp_path / "configs/eval/calc.toml"
    cfg.write_text(cfg.read_text().replace("pass_threshold", "pass_treshold"))
    res = run_cli("eval", "run", cfg, "--limit", "1")
    assert res.code == 1
    assert "pass_treshold" in res.err and "did you mean 'pass_threshold'" in res.err
    assert "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1


def test_eval_missing_config(run_cli: RunCli, tmp_path: Path) -> None:
    res = run_cli("eval", "run", tmp_path / "configs/eval/nope.toml")
    assert res.code == 1
    assert "does not exist" in res.err and "osmosis template create" in res.err


def test_eval_bad_dataset_names_file_and_line(run_cli: RunCli, tmp_path: Path) -> None:
    _create(run_cli, tmp_path, "single-call")
    data = tmp_path / "data/calc.jsonl"
    lines = data.read_text().splitlines()
    lines[2] = '{"user_prompt": "", "ground_truth": "1"}'
    data.write_text("\n".join(lines) + "\n")
    res = run_cli("eval", "run", tmp_path / "configs/eval/calc.toml", "--limit", "5")
    assert res.code == 1
    assert "calc.jsonl:3" in res.err and "user_prompt" in res.err
    assert "Traceback" not in res.err


def test_eval_missing_rollout_entrypoint(run_cli: RunCli, tmp_path: Path) -> None:
    _create(run_cli, tmp_path, "single-call")
    (tmp_path / "rollouts/calc/main.py").unlink()
    res = run_cli("eval", "run", tmp_path / "configs/eval/calc.toml")
    assert res.code == 1 and "main.py" in res.err and "Traceback" not in res.err


def test_validate_reports_discovery_errors(run_cli: RunCli, tmp_path: Path) -> None:
    bad = tmp_path / "main.py"
    bad.write_text("from osmosis_ai.rollout import AgentWorkflow\nx = 1\n")
    res = run_cli("validate", bad)
    assert res.code == 1
    assert "main.py" in res.err and "AgentWorkflow" in res.err
    res = run_cli("validate", tmp_path / "missing.py")
    assert res.code == 1 and "does not exist" in res.err
    res = run_cli("validate")
    assert res.code == 1 and "exactly one of ENTRYPOINT" in res.err


def test_validate_module_delegates_to_the_remote_validator(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myloop.py").write_text(
        "from osmosis_ai.remote import RolloutAgentLoop\n\n"
        "class Calc(RolloutAgentLoop):\n"
        "    name = 'calc'\n\n"
        "    def get_tools(self, request):\n"
        "        return [{'type': 'function', 'function': {'name': 'add', 'description': 'add',"
        " 'parameters': {'type': 'object', 'properties': {'a': {'type': 'number'}}}}}]\n\n"
        "    async def run(self, ctx):\n"
        "        return ctx.complete([])\n\n"
        "agent_loop = Calc()\n"
        "class Broken(RolloutAgentLoop):\n"
        "    name = 'broken'\n\n"
        "    def get_tools(self, request):\n"
        "        return None\n\n"
        "    async def run(self, ctx):\n"
        "        return ctx.complete([])\n\n"
        "broken = Broken()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    res = run_cli("validate", "-m", "myloop:agent_loop")
    assert res.code == 0, res.out + res.err
    assert "calc" in res.out
    data = run_cli("validate", "-m", "myloop:agent_loop", "--json").json()
    assert data["ok"] is True
    res = run_cli("validate", "-m", "myloop:broken")
    assert res.code == 1
    assert "GET_TOOLS_RETURNS_NONE" in res.out


def test_eval_against_an_openai_compatible_url(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--model http://.../v1`` (a vLLM-style server) goes through the gateway too."""
    import re

    from osmosis_ai.testing import FakeOpenAIServer, FakeRequest

    def exact(req: FakeRequest) -> str:
        question = next(m["content"] for m in req.messages if m["role"] == "user")
        m = re.search(r"(\d+) ([-+*/]) (\d+)", question)
        assert m is not None
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        ops = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}
        return str(ops[op])

    _create(run_cli, tmp_path, "single-call")
    monkeypatch.chdir(tmp_path)
    with FakeOpenAIServer(script=exact) as server:
        res = run_cli(
            "eval",
            "run",
            "configs/eval/calc.toml",
            "--limit",
            "4",
            "--n",
            "2",
            "--model",
            server.base_url,
            "--json",
        )
    assert res.code == 0, res.err
    summary = res.json()["summary"]
    assert summary["samples"] == 8 and summary["success"] == 8
    assert summary["reward"]["mean"] == 1.0 and summary["pass_rate"] == 1.0
    assert summary["pass_at_k"] == {"pass@1": 1.0, "pass@2": 1.0}


def test_eval_on_the_embedded_model_without_the_trainer_extra_names_the_install(
    run_cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    _create(run_cli, tmp_path, "single-call")
    res = run_cli("eval", "run", tmp_path / "configs/eval/calc.toml", "--limit", "1")
    assert res.code == 1
    assert 'pip install "osmosis-ai[trainer]"' in res.err and "Traceback" not in res.err


def test_strands_reply_cut_at_max_tokens_is_graded_not_failed(
    run_cli: RunCli, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _create(run_cli, tmp_path, "strands")
    cfg = tmp_path / "configs/eval/calc.toml"
    text = cfg.read_text()
    assert re.search(r"(?m)^max_tokens = \d+$", text), text
    assert re.search(r"(?m)^rollout_temperature = [\d.]+$", text), text
    text = re.sub(r"(?m)^max_tokens = \d+$", "max_tokens = 3", text)
    # Greedy: a local eval's engine seeds its sampler from the OS, and a sampled reply that
    # ends (end token) within 3 tokens lets the workflow ask the row's follow-up question, one
    # reply more than the test counts (~1 run in 8 at temperature 0.7).
    cfg.write_text(re.sub(r"(?m)^rollout_temperature = [\d.]+$", "rollout_temperature = 0", text))
    monkeypatch.chdir(tmp_path)
    res = run_cli(
        "eval", "run", "configs/eval/calc.toml", "--limit", "2", "--model", tiny_model, "--json"
    )
    assert res.code == 0, res.err
    summary = res.json()["summary"]
    assert summary["success"] == 2, summary["failure_examples"]
    assert summary["completion_tokens"] == 6  # 3 tokens per reply: every reply was cut


def test_ctrl_c_stops_cleanly_keeps_rows_and_says_how_to_resume(
    run_cli: RunCli, tmp_path: Path
) -> None:
    import signal
    import subprocess
    import sys
    import time

    from osmosis_ai.testing import FakeOpenAIServer

    _create(run_cli, tmp_path, "single-call")
    out = tmp_path / "run"
    code = "import sys; from osmosis_ai.cli import main; sys.exit(main(sys.argv[1:]))"
    import threading

    answered = [0]
    release = threading.Event()

    def two_then_hold(_req: object) -> str:
        # The third call waits until the test is done, so Ctrl-C always lands mid-run with
        # exactly two rows finished, however fast or slow the machine is.
        answered[0] += 1
        if answered[0] > 2:
            release.wait(120)
        return "42"

    with FakeOpenAIServer(script=two_then_hold) as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                "eval",
                "run",
                "configs/eval/calc.toml",
                "--concurrency",
                "1",
                "--model",
                server.base_url,
                "--output",
                str(out),
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        results = out / "results.jsonl"
        deadline = time.monotonic() + 120  # a hang guard: the third call is held, never answered
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and len(results.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        release.set()
    assert proc.returncode == 130, stderr
    assert "interrupted: finished results are kept" in stderr and "--resume" in stderr
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
    assert "(interrupted)" in stdout
    assert len(results.read_text().splitlines()) == 2
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"


def test_an_eval_folder_holding_a_link_is_refused_before_it_is_written_into(
    run_cli: RunCli, tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copied or crafted eval folder: resuming it wrote run.json through the link planted
    at its temporary name (a file of the user's, overwritten)."""
    _create(run_cli, tmp_path, "single-call")
    monkeypatch.chdir(tmp_path)
    config = "configs/eval/calc.toml"
    folder = tmp_path / ".osmosis" / "evals" / "calc-20260101-000000"
    res = run_cli("eval", "run", config, "--limit", "1", "--model", str(tiny_model),
                  "--output", folder)
    assert res.code == 0, res.err
    outside = tmp_path / "dotfile"
    outside.write_text("kept\n")
    (folder / "run.json.tmp").symlink_to(outside)
    for extra in (("--resume",), ("--output", folder, "--resume"),
                  ("--name", folder.name, "--resume")):
        res = run_cli("eval", "run", config, *extra)
        assert res.code == 1, (extra, res.out)
        assert "holds run.json.tmp, a link or special file" in res.err, extra
        assert "Traceback" not in res.err
    assert outside.read_text() == "kept\n"


def test_validate_shows_each_class_docstring_first_paragraph(
    run_cli: RunCli, tmp_path: Path
) -> None:
    main = tmp_path / "main.py"
    main.write_text(
        "from osmosis_ai.rollout import AgentWorkflow, Grader\n"
        "class Flow(AgentWorkflow):\n"
        '    """Answers a row with one [tool] call and a sentence that runs on to\n'
        "    a second line.\n\n    Details nobody needs in a summary.\n    \"\"\"\n"
        "    async def run(self, ctx):\n        return None\n"
        "class Score(Grader):\n"
        "    async def grade(self, ctx):\n        pass\n"
    )
    res = run_cli("--json", "validate", main)
    assert res.code == 0, res.err
    doc = res.json()["workflow"]["doc"]
    assert doc == "Answers a row with one [tool] call and a sentence that runs on to a second line."
    assert res.json()["grader"]["doc"] == ""
    res = run_cli("validate", main)
    assert "runs on to a second line." in " ".join(res.out.split())
    assert "[tool]" in res.out and "Details" not in res.out
