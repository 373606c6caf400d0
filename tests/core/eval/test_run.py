"""run_eval end to end against a scripted OpenAI-compatible server (no model).

The single-call template is scaffolded into a temp workspace; the fake server answers each
question right, right-with-extra-text, or wrong depending on the row, so the expected rewards
are known. Interruption is simulated by cancelling the eval task after k results.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from osmosis_ai.errors import ConfigError, OsmosisError
from osmosis_ai.eval import EvalEvents, EvalOptions, EvalRecord, read_journal, run_eval
from osmosis_ai.templates import create_from_template
from osmosis_ai.testing import FakeReply, FakeRequest, http_error
from tests.core.eval._helpers import fake_server_factory

_Q = re.compile(r"What is (\d+) ([-+*/]) (\d+)\?")


def _truth(question: str) -> int:
    m = _Q.search(question)
    assert m is not None, question
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0}[op]


def _answer(req: FakeRequest) -> str | FakeReply:
    """Even questions (by answer): exact; odd multiples of 3: chatty; others: wrong."""
    question = next(m["content"] for m in req.messages if m["role"] == "user")
    truth = _truth(question)
    if truth % 2 == 0:
        return str(truth)
    if truth % 3 == 0:
        return f"The answer is {truth}."
    return str(truth + 7)


def _expected_reward(question: str) -> float:
    truth = _truth(question)
    return 1.0 if truth % 2 == 0 else (0.5 if truth % 3 == 0 else 0.0)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    create_from_template("single-call", "calc", tmp_path)
    return tmp_path


def _questions(ws: Path) -> list[str]:
    lines = (ws / "data/calc.jsonl").read_text().splitlines()
    return [json.loads(line)["user_prompt"] for line in lines]


async def test_eval_writes_results_traces_and_summary(workspace: Path) -> None:
    out = workspace / "out"
    result = await run_eval(
        workspace / "configs/eval/calc.toml",
        EvalOptions(limit=6, output=out),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert result.info.status == "completed"
    records = read_journal(out / "results.jsonl")
    assert sorted(r.row_index for r in records) == list(range(6))
    expected = [_expected_reward(q) for q in _questions(workspace)[:6]]
    assert [r.reward for r in sorted(records, key=lambda r: r.row_index)] == expected
    for r in records:
        assert r.status == "success" and r.sample_id == "main"
        assert r.tokens == r.prompt_tokens + r.completion_tokens > 0
        assert r.num_calls == 1 and r.trace is not None
        trace = json.loads((out / r.trace).read_text())
        assert trace["messages"][-1]["role"] == "assistant"
        assert trace["calls"][0]["completion_token_ids"]
        assert trace["label"] is not None
    s = result.summary
    assert s.samples == 6 and s.success == 6
    assert s.reward.mean == pytest.approx(sum(expected) / 6)
    assert s.passed == expected.count(1.0)
    assert s.pass_rate == pytest.approx(expected.count(1.0) / 6)
    assert s.pass_at_k == {}  # n == 1
    assert json.loads((out / "summary.json").read_text())["samples"] == 6
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["model"] == "embedded"
    assert len(info["rollout_hash"]) == 64 and len(info["dataset_hash"]) == 64


async def test_eval_with_n_runs_reports_pass_at_k(workspace: Path) -> None:
    result = await run_eval(
        workspace / "configs/eval/calc.toml",
        EvalOptions(limit=3, n=4, output=workspace / "out"),
        endpoint_factory=fake_server_factory(_answer),
    )
    s = result.summary
    assert s.samples == 12
    assert set(s.pass_at_k) == {"pass@1", "pass@2", "pass@4"}
    assert {(r.row_index, r.run_index) for r in result.records} == {
        (i, k) for i in range(3) for k in range(4)
    }


async def test_failed_policy_calls_are_failures_not_zero_rewards(workspace: Path) -> None:
    result = await run_eval(
        workspace / "configs/eval/calc.toml",
        EvalOptions(limit=2, output=workspace / "out"),
        endpoint_factory=fake_server_factory(lambda req: http_error(400, "bad request")),
    )
    assert result.summary.failed == 2 and result.summary.success == 0
    for r in result.records:
        assert r.status == "failed" and r.reward is None
        assert r.error_type and r.error
    assert result.summary.pass_rate == 0.0
    assert sum(result.summary.failures_by_reason.values()) == 2


async def _interrupted_run(ws: Path, out: Path, after: int) -> int:
    """Run the eval and cancel it after ``after`` results; return how many were journaled."""
    seen: list[EvalRecord] = []
    task: asyncio.Task[Any] | None = None

    def on_record(record: EvalRecord) -> None:
        seen.append(record)
        if len(seen) == after and task is not None:
            task.cancel()

    task = asyncio.create_task(
        run_eval(
            ws / "configs/eval/calc.toml",
            EvalOptions(limit=8, concurrency=1, output=out),
            events=EvalEvents(on_record=on_record),
            endpoint_factory=fake_server_factory(_answer),
        )
    )
    with pytest.raises(asyncio.CancelledError):
        await task
    return len(read_journal(out / "results.jsonl"))


async def test_interrupted_run_keeps_finished_rows_and_resumes(workspace: Path) -> None:
    out = workspace / "out"
    kept = await _interrupted_run(workspace, out, after=3)
    assert kept >= 3
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted"
    result = await run_eval(  # --resume alone: limit, n and model come from the run
        workspace / "configs/eval/calc.toml",
        EvalOptions(resume=True, output=out),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert result.info.status == "completed"
    assert result.resumed_records == kept and result.new_records == 8 - kept
    records = read_journal(out / "results.jsonl")
    assert sorted((r.row_index, r.run_index) for r in records) == [(i, 0) for i in range(8)]
    expected = [_expected_reward(q) for q in _questions(workspace)[:8]]
    assert [r.reward for r in sorted(records, key=lambda r: r.row_index)] == expected


async def test_resume_without_output_picks_the_latest_run(workspace: Path) -> None:
    first = await run_eval(
        workspace / "configs/eval/calc.toml",
        EvalOptions(limit=2),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert first.plan.run_dir.parent == workspace / ".osmosis" / "evals"
    assert first.plan.run_dir.name.startswith("calc-")
    again = await run_eval(
        workspace / "configs/eval/calc.toml",
        EvalOptions(limit=2, resume=True),
        endpoint_factory=fake_server_factory(_answer),
    )
    assert again.plan.run_dir == first.plan.run_dir
    assert again.new_records == 0 and again.resumed_records == 2


async def test_resume_refuses_when_the_rollout_code_changed(workspace: Path) -> None:
    out = workspace / "out"
    await _interrupted_run(workspace, out, after=2)
    main_py = workspace / "rollouts/calc/main.py"
    main_py.write_text(main_py.read_text() + "\n# tweak\n")
    with pytest.raises(OsmosisError, match=r"--resume refused: the rollout code in .* changed"):
        await run_eval(
            workspace / "configs/eval/calc.toml",
            EvalOptions(limit=8, resume=True, output=out),
            endpoint_factory=fake_server_factory(_answer),
        )


async def test_resume_refuses_when_the_dataset_changed(workspace: Path) -> None:
    out = workspace / "out"
    await _interrupted_run(workspace, out, after=2)
    data = workspace / "data/calc.jsonl"
    data.write_text(data.read_text().replace("What is", "Compute", 1))
    with pytest.raises(OsmosisError, match=r"--resume refused: the dataset .* changed"):
        await run_eval(
            workspace / "configs/eval/calc.toml",
            EvalOptions(limit=8, resume=True, output=out),
            endpoint_factory=fake_server_factory(_answer),
        )


async def test_resume_refuses_other_settings(workspace: Path) -> None:
    out = workspace / "out"
    await _interrupted_run(workspace, out, after=2)
    with pytest.raises(OsmosisError, match=r"used model='embedded'.*model='other/model'"):
        await run_eval(
            workspace / "configs/eval/calc.toml",
            EvalOptions(limit=8, resume=True, output=out, model="other/model"),
            endpoint_factory=fake_server_factory(_answer),
        )


async def test_resume_with_nothing_to_resume(workspace: Path) -> None:
    with pytest.raises(OsmosisError, match="no earlier eval run of 'calc'"):
        await run_eval(
            workspace / "configs/eval/calc.toml",
            EvalOptions(resume=True),
            endpoint_factory=fake_server_factory(_answer),
        )


async def test_a_used_output_folder_needs_resume(workspace: Path) -> None:
    out = workspace / "out"
    opts = EvalOptions(limit=1, output=out)
    await run_eval(
        workspace / "configs/eval/calc.toml", opts, endpoint_factory=fake_server_factory(_answer)
    )
    with pytest.raises(OsmosisError, match="already holds an eval run; pass --resume"):
        await run_eval(
            workspace / "configs/eval/calc.toml",
            opts,
            endpoint_factory=fake_server_factory(_answer),
        )


async def test_a_run_folder_holding_a_link_is_refused_by_the_library_too(workspace: Path) -> None:
    """``run_eval`` (not only the CLI) refuses a resumed folder with a planted link, and
    ``--fresh`` does not empty a named folder before refusing it."""
    out = workspace / "out"
    await _interrupted_run(workspace, out, after=2)
    mine = workspace / "mine.txt"
    mine.write_text("kept\n")
    (out / "run.json.tmp").symlink_to(mine)
    for opts in (EvalOptions(resume=True, output=out), EvalOptions(output=out)):
        with pytest.raises(ConfigError, match=r"holds run.json.tmp, a link or special file"):
            await run_eval(
                workspace / "configs/eval/calc.toml", opts,
                endpoint_factory=fake_server_factory(_answer),
            )
    named = workspace / ".osmosis" / "evals" / "named"
    named.mkdir(parents=True)
    (named / "run.json").write_text("{}")
    (named / "results.jsonl").symlink_to(mine)
    with pytest.raises(ConfigError, match=r"holds results.jsonl"):
        await run_eval(
            workspace / "configs/eval/calc.toml", EvalOptions(name="named", fresh=True),
            endpoint_factory=fake_server_factory(_answer),
        )
    assert (named / "run.json").exists() and (named / "results.jsonl").is_symlink()
    assert mine.read_text() == "kept\n"


async def test_missing_secrets_stop_a_hosted_model_before_running(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = workspace / "configs/eval/calc.toml"
    cfg.write_text(cfg.read_text() + '\n[secrets]\nrequired = ["OSMOSIS_TEST_KEY"]\n')
    monkeypatch.delenv("OSMOSIS_TEST_KEY", raising=False)
    hosted = EvalOptions(limit=1, model="openai/gpt-4o-mini")
    with pytest.raises(ConfigError, match="OSMOSIS_TEST_KEY.*not set"):
        await run_eval(cfg, hosted, endpoint_factory=fake_server_factory(_answer))
    # The template's model is the embedded one: the eval runs, and the plan says what is unset.
    result = await run_eval(cfg, EvalOptions(limit=1), endpoint_factory=fake_server_factory(_answer))
    assert result.info.status == "completed"
    assert "OSMOSIS_TEST_KEY, which is not set; the model embedded is local" in result.plan.notes[0]


def test_a_sample_left_unfinished_by_a_failed_rollout_counts_as_that_failure() -> None:
    from osmosis_ai.eval._traces import outcome_records
    from osmosis_ai.rollout import ErrorCategory, RolloutSample, SampleError, SampleStatus
    from osmosis_ai.rollout._outcome import RolloutOutcome

    timeout = SampleError(category=ErrorCategory.TIMEOUT, message="workflow took > 300 s")
    never_answered = RolloutSample(id="main", status=SampleStatus.SKIPPED, remove_sample=True)
    outcome = RolloutOutcome(
        rollout_id="r0",
        row_index=0,
        sample_index=0,
        samples=[never_answered],
        status=SampleStatus.FAILED,
        error=timeout,
    )
    [(record, _sample)] = outcome_records(outcome, pass_threshold=1.0)
    assert record.status == "failed" and record.reward is None
    assert record.error_type == "timeout" and record.error == "workflow took > 300 s"
