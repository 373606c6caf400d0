"""The calculator templates, evaluated against a scripted policy (FakeOpenAIServer).

A policy that calls the right tools (one per operation, each result fed into the next call) and
then answers with the last tool's result must score 1.0 on every row, through the real adapters
and tools; a policy that never stops calling tools must be cut off by the template's turn limit
and graded (no credit), not left to time out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from osmosis_ai.eval import EvalOptions, run_eval
from osmosis_ai.templates import create_from_template
from osmosis_ai.testing import FakeReply, FakeRequest, tool_call
from tests.core.eval._helpers import fake_server_factory

_Q = re.compile(r"What is (\d+)((?: [-+*/] \d+)+)\?")
_STEP = re.compile(r" ([-+*/]) (\d+)")
_TOOL = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide"}


def _question(req: FakeRequest) -> str:
    for message in req.messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if _Q.search(text):
            return text
    raise AssertionError(f"no question in {req.messages}")


def _steps(req: FakeRequest) -> tuple[int, list[tuple[str, int]]]:
    m = _Q.search(_question(req))
    assert m is not None
    return int(m.group(1)), [(op, int(x)) for op, x in _STEP.findall(m.group(2))]


def _solver(req: FakeRequest) -> str | FakeReply:
    """One tool call per operation, left to right, each on the previous tool result; then
    answer with exactly what the last tool returned."""
    first, steps = _steps(req)
    done = len(req.tool_results)
    if done == len(steps):
        return req.tool_results[-1].strip()
    a = json.loads(req.tool_results[-1]) if done else first
    op, b = steps[done]
    return tool_call(_TOOL[op], a=a, b=b)


def _looper(req: FakeRequest) -> FakeReply:
    return tool_call("add", a=1, b=len(req.tool_results))


@pytest.mark.parametrize("template", ["strands", "openai-agents"])
async def test_tool_agent_that_uses_its_tools_scores_full_marks(
    tmp_path: Path, template: str
) -> None:
    create_from_template(template, "calc", tmp_path)
    result = await run_eval(
        tmp_path / "configs/eval/calc.toml",
        EvalOptions(limit=8, output=tmp_path / "out"),
        endpoint_factory=fake_server_factory(_solver),
    )
    s = result.summary
    assert s.success == 8, s.failure_examples
    assert s.reward.mean == 1.0 and s.pass_rate == 1.0
    assert s.tool_call_rate == 1.0
    for record in result.records:
        row = json.loads((tmp_path / "out" / str(record.trace)).read_text())
        assert record.tool_calls >= 1 and record.num_calls == record.tool_calls + 1
        assert sum(m.get("role") == "tool" for m in row["messages"]) == record.tool_calls
    if template == "strands":  # the multi-step questions: two or three chained calls each
        assert all(r.tool_calls >= 2 for r in result.records)
        assert s.tool_calls_per_rollout is not None and s.tool_calls_per_rollout >= 2
        assert s.turns_per_rollout == s.tool_calls_per_rollout + 1


@pytest.mark.parametrize("template", ["strands", "openai-agents"])
async def test_tool_agent_that_never_stops_is_cut_off_and_graded(
    tmp_path: Path, template: str
) -> None:
    create_from_template(template, "calc", tmp_path)
    result = await run_eval(
        tmp_path / "configs/eval/calc.toml",
        EvalOptions(limit=2, output=tmp_path / "out"),
        endpoint_factory=fake_server_factory(_looper),
    )
    s = result.summary
    assert s.success == 2, s.failure_examples
    assert s.reward.max == 0.0
    for record in result.records:
        assert 2 <= record.num_calls <= 7


async def test_single_call_template_scores_an_exact_answer(tmp_path: Path) -> None:
    create_from_template("single-call", "calc", tmp_path)

    def exact(req: FakeRequest) -> str:
        a, [(op, b)] = _steps(req)
        return str({"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op])

    result = await run_eval(
        tmp_path / "configs/eval/calc.toml",
        EvalOptions(output=tmp_path / "out"),
        endpoint_factory=fake_server_factory(exact),
    )
    assert result.summary.samples == 24 and result.summary.pass_rate == 1.0


@pytest.mark.parametrize(("calls", "answer", "credit"), [
    # Stopping after one right call, answering its result: half the credit for that step
    # (0.4 x 1/steps / 2), and nothing for being within 1 % of the answer.
    (1, "intermediate", 0.4 / 2),
    # A call per operation, all right, then a wrong answer: the whole step credit.
    (99, "wrong", 0.4),
    # All right, then more calls until the call limit stops the rollout: half of it.
    (99, "never", 0.2),
])
async def test_strands_grader_credits_the_steps_its_tools_computed(
    tmp_path: Path, calls: int, answer: str, credit: float
) -> None:
    create_from_template("strands", "calc", tmp_path)

    def partial(req: FakeRequest) -> str | FakeReply:
        first, steps = _steps(req)
        done = len(req.tool_results)
        if done >= len(steps) and answer == "never":
            return tool_call("add", a=1, b=1)
        if done == min(calls, len(steps)):
            return req.tool_results[-1].strip() if answer == "intermediate" else "-1"
        a = json.loads(req.tool_results[-1]) if done else first
        op, b = steps[done]
        return tool_call(_TOOL[op], a=a, b=b)

    result = await run_eval(
        tmp_path / "configs/eval/calc.toml",
        EvalOptions(limit=8, output=tmp_path / "out"),
        endpoint_factory=fake_server_factory(partial),
    )
    assert result.summary.success == 8 and result.summary.pass_rate == 0.0
    for record in result.records:
        trace = json.loads((tmp_path / "out" / str(record.trace)).read_text())
        question = str(trace["messages"])
        steps = len(_STEP.findall(question.split("What is ")[1].split("?")[0]))
        expected = credit / steps if calls == 1 else credit
        assert record.reward == pytest.approx(expected), question


def test_strands_chain_credit_ranks_stopping_below_chaining(tmp_path: Path) -> None:
    """For two operations: a wrong first call < a right first call then an answer < a right
    first call then a second call (even a wrong one) < both calls right."""
    import importlib.util

    create_from_template("strands", "calc", tmp_path)
    main = tmp_path / "rollouts" / "calc" / "main.py"
    spec = importlib.util.spec_from_file_location("_tpl_strands_credit", main)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    steps = [10063.0, 8563.0]

    def tools(*results: str) -> list[dict[str, object]]:
        return [{"role": "tool", "content": r} for r in results]

    wrong_first = module.chain_credit(steps, tools("5"))
    right_then_stop = module.chain_credit(steps, tools("10063"))
    right_then_wrong = module.chain_credit(steps, tools("10063", "7"))
    both = module.chain_credit(steps, tools("10063", "8563"))
    assert (wrong_first, right_then_stop, right_then_wrong, both) == pytest.approx(
        (0.0, 0.1, 0.2, 0.4)
    )
