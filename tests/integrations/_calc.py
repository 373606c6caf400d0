"""Shared calculator fixtures: dataset rows, and a fake policy that uses the tools correctly.

The fake policy (a ``FakeOpenAIServer`` script callable) reads the question from the request,
calls the matching tool, and answers with the tool's result. It answers from *this request's*
messages only, so any cross-talk between samples shows up as a wrong answer.
"""

from __future__ import annotations

import re
from typing import Any

from osmosis_ai.data import DatasetRow
from osmosis_ai.testing import FakeRequest, ScriptItem, reply, text, tool_call

SYSTEM = "You are a calculator. Use the tools, then answer with the number only."
OPS = {
    "+": ("add", lambda a, b: a + b),
    "-": ("subtract", lambda a, b: a - b),
    "*": ("multiply", lambda a, b: a * b),
}
_QUESTION = re.compile(r"What is (-?\d+) ([+*-]) (-?\d+)\?")


def question(i: int) -> tuple[str, str]:
    """Row ``i``'s question and its answer (distinct for every ``i``)."""
    a, b = 10 + 7 * i, 3 + 2 * i
    op = "+-*"[i % 3]
    return f"What is {a} {op} {b}?", str(OPS[op][1](a, b))


def rows(n: int, **metadata: Any) -> list[DatasetRow]:
    out = []
    for i in range(n):
        q, answer = question(i)
        out.append(
            DatasetRow(
                row_index=i,
                source_row_index=i,
                prompt=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                label=answer,
                metadata=dict(metadata),
                system_prompt=SYSTEM,
                user_prompt=q,
            )
        )
    return out


def number(value: str) -> str:
    """Tool outputs as the frameworks render them ("13.0" -> "13")."""
    x = float(value)
    return str(int(x)) if x.is_integer() else str(x)


def _numbers(results: list[str]) -> list[str]:
    """Tool results that are numbers (a handoff's result, for one, is not)."""
    out = []
    for result in results:
        try:
            out.append(number(result))
        except ValueError:
            continue
    return out


def calculator(req: FakeRequest) -> ScriptItem:
    """Call the tool for the question once, then answer with its result."""
    match = _QUESTION.search(req.last_user_text)
    if match is None:
        return text("I cannot parse that.")
    a, op, b = int(match[1]), match[2], int(match[3])
    results = _numbers(req.new_tool_results)
    if not results:
        return tool_call(OPS[op][0], a=a, b=b)
    return text(results[-1])


def parallel_calculator(req: FakeRequest) -> ScriptItem:
    """Two tool calls in one completion (the op, and its mirror), then the first result."""
    match = _QUESTION.search(req.last_user_text)
    assert match is not None, req.last_user_text
    a, op, b = int(match[1]), match[2], int(match[3])
    if not req.new_tool_results:
        return reply("", [(OPS[op][0], {"a": a, "b": b}), ("add", {"a": b, "b": a})])
    return text(number(req.new_tool_results[0]))


def multi_step(turns: int) -> Any:
    """A script callable: ``turns - 1`` sequential tool calls, then the last result."""

    def script(req: FakeRequest) -> ScriptItem:
        done = len(req.new_tool_results)
        if done < turns - 1:
            return tool_call("add", a=done, b=1)
        return text(number(req.new_tool_results[-1]) if done else "0")

    return script
