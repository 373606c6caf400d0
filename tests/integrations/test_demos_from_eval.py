"""``osmosis dataset from-eval`` end to end: an eval run of a tool-calling rollout (Strands and
OpenAI Agents) against a scripted policy, then its passed samples as warm-start rows.

The scripted policy calls the question's tool and answers with the result, except on rows
whose index is 2 mod 3, where it answers one more than the tool said (the grader fails them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.cli import main
from osmosis_ai.data import load_demonstrations
from osmosis_ai.eval import EvalOptions, demos_from_eval, read_journal, run_eval
from osmosis_ai.eval._harvest import chat_messages
from osmosis_ai.testing import FakeRequest, ScriptItem, text
from tests.core.eval._helpers import fake_server_factory
from tests.integrations._calc import SYSTEM, calculator, question
from tests.integrations._helpers import ROLLOUTS

ROWS = 6
WRONG = {2, 5}  # rows the policy gets wrong


def policy(req: FakeRequest) -> ScriptItem:
    reply = calculator(req)
    wrong = any(question(i)[0] in req.last_user_text for i in WRONG)
    if req.new_tool_results and wrong:
        return text(str(int(reply.content) + 1))  # type: ignore[union-attr]
    return reply


def _workspace(root: Path, rollout: str, n: int) -> Path:
    (root / "rollouts" / "calc").mkdir(parents=True)
    shutil.copy(ROLLOUTS / rollout, root / "rollouts" / "calc" / "main.py")
    (root / "data").mkdir()
    rows = [question(i) for i in range(ROWS)]
    (root / "data" / "calc.jsonl").write_text(
        "".join(
            json.dumps({"system_prompt": SYSTEM, "user_prompt": q, "ground_truth": a}) + "\n"
            for q, a in rows
        )
    )
    (root / "configs" / "eval").mkdir(parents=True)
    config = root / "configs" / "eval" / "calc.toml"
    config.write_text(
        '[experiment]\nrollout = "calc"\nentrypoint = "main.py"\nmodel_path = "embedded"\n'
        f'dataset = "data/calc.jsonl"\n\n[evaluation]\nn = {n}\npass_threshold = 1.0\n'
    )
    return config


async def _eval(tmp_path: Path, rollout: str, n: int = 1) -> Path:
    config = _workspace(tmp_path, rollout, n)
    out = tmp_path / ".osmosis" / "evals" / "calc-1"
    result = await run_eval(
        config, EvalOptions(output=out), endpoint_factory=fake_server_factory(policy)
    )
    assert result.info.status == "completed"
    return out


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("rollout", ["strands_calc.py", "agents_calc.py"])
async def test_passed_samples_become_rows_that_replay_the_conversation(
    tmp_path: Path, rollout: str
) -> None:
    run_dir = await _eval(tmp_path, rollout)
    records = read_journal(run_dir / "results.jsonl")
    passed = [r for r in records if r.passed]
    assert len(passed) == ROWS - len(WRONG)

    report = demos_from_eval(run_dir, tmp_path / "demos.jsonl")
    rows = _rows(tmp_path / "demos.jsonl")
    assert report.kept == len(rows) == len(passed)
    # The warm start reads them as they are.
    demos, problems = load_demonstrations(tmp_path / "demos.jsonl")
    assert problems == [] and len(demos) == len(rows)
    assert (report.below_threshold, report.failed, report.unreadable) == (len(WRONG), 0, 0)
    for row, record in zip(rows, sorted(passed, key=lambda r: r.row_index), strict=True):
        q, answer = question(record.row_index)
        messages = row["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
        system, user, call, result, final = messages
        user_text = (
            user["content"]
            if isinstance(user["content"], str)
            else "".join(p["text"] for p in user["content"])
        )
        assert system["content"] == SYSTEM and q in user_text
        [tool_call] = call["tool_calls"]
        a, op, b = q.removeprefix("What is ").removesuffix("?").split()
        name = {"+": "add", "-": "subtract", "*": "multiply"}[op]
        assert tool_call["function"]["name"] == name
        assert json.loads(tool_call["function"]["arguments"]) == {"a": int(a), "b": int(b)}
        assert result["tool_call_id"] == tool_call["id"] and answer in result["content"]
        assert final == {"role": "assistant", "content": answer}
        assert sorted(t["function"]["name"] for t in row["tools"]) == [
            "add",
            "multiply",
            "subtract",
        ]
        assert all(
            t["function"]["parameters"]["properties"].keys() == {"a", "b"} for t in row["tools"]
        )
        assert row["reward"] == 1.0
        assert row["source"] == f"eval:calc-1/row{record.row_index}/run0/{record.sample_id}"
        # Exactly what the gateway recorded for the sample's last policy call.
        trace = json.loads((run_dir / str(record.trace)).read_text())
        last = trace["calls"][-1]
        assert messages == chat_messages([*last["request_messages"], last["response_message"]])


async def test_min_reward_duplicates_and_a_corrupt_results_line(tmp_path: Path) -> None:
    run_dir = await _eval(tmp_path, "agents_calc.py", n=2)
    out = tmp_path / "demos.jsonl"
    # The scripted policy repeats itself: the second run of each row is a duplicate (the tool
    # call ids differ, which does not make it another demonstration).
    report = demos_from_eval(run_dir, out)
    assert (report.kept, report.duplicates, report.below_threshold) == (4, 4, 4)
    # Every sample has reward 0 or 1: any threshold above 1 keeps nothing.
    report = demos_from_eval(run_dir, out, min_reward=1.5)
    assert (report.kept, report.below_threshold) == (0, 12) and out.read_text() == ""
    report = demos_from_eval(run_dir, out, min_reward=0.0)
    assert (report.kept, report.duplicates, report.below_threshold) == (ROWS, ROWS, 0)

    results = run_dir / "results.jsonl"
    lines = results.read_text().splitlines()
    lines[3] = lines[3][:40]
    results.write_text("\n".join(lines) + "\n")
    (run_dir / str(read_journal_tolerant(lines)[0])).write_text("{not json")
    report = demos_from_eval(run_dir, out)
    assert report.unreadable == 2
    assert report.problems[0].startswith(f"{results}:4: not a result record")
    assert "not JSON" in report.problems[1]


def read_journal_tolerant(lines: list[str]) -> list[str]:
    """The trace paths of the passed records among ``lines`` (bad lines skipped)."""
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("passed") and record.get("trace"):
            out.append(record["trace"])
    return out


async def test_cli_prints_counts_and_names_a_missing_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = await _eval(tmp_path, "agents_calc.py")
    monkeypatch.chdir(tmp_path)
    assert main(["dataset", "from-eval", "calc-1", "-o", "demos.jsonl"]) == 0
    out = capsys.readouterr().out
    assert "4 rows written to demos.jsonl from 6 samples" in out
    assert "kept 4 · below reward 1: 2 · failed 0 · duplicates 0 · unreadable 0" in out
    assert main(["dataset", "from-eval", "calc-1", "-o", "d.jsonl", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] == 4

    assert main(["dataset", "from-eval", "nope", "-o", "x.jsonl"]) == 1
    err = capsys.readouterr().err
    assert "no eval run named 'nope'" in err and "calc-1" in err and "Traceback" not in err
    (run_dir / "results.jsonl").unlink()
    assert main(["dataset", "from-eval", "calc-1", "-o", "x.jsonl"]) == 1
    assert "no results.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.slow  # SmolLM2 on the CPU through the default (embedded) eval engine
@pytest.mark.timeout(1200)  # up to 6 turns per rollout; minutes on a loaded 2-core machine
async def test_from_eval_accepts_an_eval_run_of_the_embedded_model(tmp_path: Path) -> None:
    from osmosis_ai.templates import create_from_template

    create_from_template("openai-agents", "calc", tmp_path)
    config = tmp_path / "configs" / "eval" / "calc.toml"
    text = config.read_text()
    assert "max_tokens = 128" in text
    config.write_text(text.replace("max_tokens = 128", "max_tokens = 64"))
    out = tmp_path / ".osmosis" / "evals" / "embedded"
    result = await run_eval(config, EvalOptions(limit=2, output=out))
    assert result.info.model == "embedded" and result.info.status == "completed"
    report = demos_from_eval(out, tmp_path / "demos.jsonl", min_reward=0.0)
    graded = [r for r in result.records if r.status == "success"]
    # A 135M model may write broken tool-call JSON: such a row is left out, nothing else is.
    assert all("the warm start would reject it" in p for p in report.problems), report.problems
    assert report.kept + report.duplicates + report.unreadable == len(graded) >= 1
    assert load_demonstrations(tmp_path / "demos.jsonl")[1] == []
    assert report.failed == len(result.records) - len(graded)
    for row in _rows(tmp_path / "demos.jsonl"):
        assert row["messages"][0]["role"] == "system" and row["messages"][-1]["role"] == "assistant"
        assert {t["function"]["name"] for t in row["tools"]} == {
            "add",
            "subtract",
            "multiply",
            "divide",
        }


async def test_a_passed_sample_the_warm_start_would_reject_is_left_out(tmp_path: Path) -> None:
    run_dir = await _eval(tmp_path, "agents_calc.py")
    passed = [r for r in read_journal(run_dir / "results.jsonl") if r.passed]
    trace_file = run_dir / str(passed[0].trace)
    trace = json.loads(trace_file.read_text())
    # A model that wrote broken JSON for its tool arguments and still got the answer right.
    for call in trace["calls"]:
        for m in [*call["request_messages"], call["response_message"]]:
            for tc in m.get("tool_calls") or []:
                tc["function"]["arguments"] = '{"a": 10, "b":'
    trace_file.write_text(json.dumps(trace))
    out = tmp_path / "demos.jsonl"
    report = demos_from_eval(run_dir, out)
    assert report.kept == len(_rows(out)) == len(passed) - 1 and report.unreadable == 1
    assert report.problems[0].startswith(f"eval:calc-1/row{passed[0].row_index}/run0/")
    assert "left out, the warm start would reject it" in report.problems[0]
    assert "arguments are not JSON" in report.problems[0]
    assert load_demonstrations(out)[1] == []
