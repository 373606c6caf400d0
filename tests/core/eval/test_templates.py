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
_SYMBOL = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}


def _follow_up_patterns() -> list[tuple[re.Pattern[str], str]]:
    """Every wording of a follow-up the strands template's rows use (training and held-out),
    as (pattern with the number as its group, the operation's symbol)."""
    import importlib.util

    path = Path(__file__).parents[3] / "templates" / "strands" / "make_data.py"
    spec = importlib.util.spec_from_file_location("_tpl_strands_make_data", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [
        (re.compile(re.escape(wording).replace(r"\{\}", r"(\d+)")), _SYMBOL[op])
        for phrases in (module.FOLLOW_UPS, module.NEW_FOLLOW_UPS)
        for op, wordings in phrases.items()
        for wording in wordings
    ]


_FOLLOW_UPS = _follow_up_patterns()
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TOOL = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide"}


def _user_texts(req: FakeRequest) -> list[str]:
    out = []
    for message in req.messages:
        if message.get("role") == "user":
            content = message.get("content")
            out.append(content if isinstance(content, str) else json.dumps(content))
    return out


def _steps(req: FakeRequest) -> tuple[int, list[tuple[str, int]]]:
    """The first number and each operation asked so far: the question's, then each follow-up's
    ("Subtract 1500 from that.") among the user turns of the request."""
    texts = _user_texts(req)
    first = next((i for i, t in enumerate(texts) if _Q.search(t)), None)
    assert first is not None, f"no question in {req.messages}"
    m = _Q.search(texts[first])
    assert m is not None
    steps = [(op, int(x)) for op, x in _STEP.findall(m.group(2))]
    for text in texts[first + 1:]:
        for pattern, op in _FOLLOW_UPS:
            f = pattern.search(text)
            if f is not None:
                steps.append((op, int(f.group(1))))
                break
    return int(m.group(1)), steps


def _last_result(req: FakeRequest) -> str:
    """The number of the last tool message ("5" or "The result is 5.")."""
    return str(_NUMBER.findall(req.tool_results[-1])[-1])


def _first_question(req: FakeRequest) -> str:
    """The row's ``user_prompt``: the first user turn's text."""
    m = next(_Q.search(t) for t in _user_texts(req) if _Q.search(t))
    assert m is not None
    return m.group(0)


def _solver(req: FakeRequest) -> str | FakeReply:
    """One tool call per operation asked so far, each on the previous tool result; then answer
    with exactly what the last tool returned."""
    first, steps = _steps(req)
    done = len(req.tool_results)
    if done == len(steps):
        return _last_result(req)
    a = json.loads(_last_result(req)) if done else first
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
        assert record.tool_calls >= 1
        assert sum(m.get("role") == "tool" for m in row["messages"]) == record.tool_calls
    if template == "strands":  # two to four operations over as many questions, a call each
        for record in result.records:
            row = json.loads((tmp_path / "out" / str(record.trace)).read_text())
            questions = sum(m.get("role") == "user" for m in row["messages"])
            assert 2 <= questions <= 4 and record.tool_calls == questions
            assert record.num_calls == 2 * questions  # a call and an answer per question
    else:
        for record in result.records:
            assert record.num_calls == record.tool_calls + 1


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
    # One right call, then answering its result to every question: half the credit for that
    # step (0.4 x 1/steps / 2), and nothing for being within 1 % of the answer.
    (1, "intermediate", 0.4 / 2),
    # A call per operation, all right, and a wrong answer each time: the whole step credit.
    (99, "wrong", 0.4),
    # All right, then more calls until the call limit stops the rollout: half of it.
    (99, "never", 0.2),
])
async def test_strands_grader_credits_the_steps_its_tools_computed(
    tmp_path: Path, calls: int, answer: str, credit: float
) -> None:
    create_from_template("strands", "calc", tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "data/calc.jsonl").read_text().splitlines()]
    total = {r["user_prompt"]: 1 + len(r["follow_ups"]) for r in rows}

    def partial(req: FakeRequest) -> str | FakeReply:
        first, steps = _steps(req)
        done = len(req.tool_results)
        if done >= total[_first_question(req)] and answer == "never":
            return tool_call("add", a=1, b=1)
        if done >= min(calls, len(steps)):
            return _last_result(req) if answer == "intermediate" else "-1"
        a = json.loads(_last_result(req)) if done else first
        op, b = steps[done]
        return tool_call(_TOOL[op], a=a, b=b)

    result = await run_eval(
        tmp_path / "configs/eval/calc.toml",
        EvalOptions(limit=8, output=tmp_path / "out"),
        endpoint_factory=fake_server_factory(partial),
    )
    assert result.summary.success == 8, result.summary.failure_examples
    assert result.summary.pass_rate == 0.0
    for record in result.records:
        steps = 1 + len(rows[record.row_index]["follow_ups"])
        expected = credit / steps if calls == 1 else credit
        assert record.reward == pytest.approx(expected), rows[record.row_index]


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
