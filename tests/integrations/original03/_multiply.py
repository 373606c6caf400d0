"""The multiply task of osmosis-ai 0.3's starter workspace: rows and a scripted policy."""

from __future__ import annotations

import re
from pathlib import Path

from osmosis_ai.data import DatasetRow
from osmosis_ai.testing import FakeRequest, ScriptItem, text, tool_call

WORKSPACE = Path(__file__).parent / "workspace"
ROLLOUTS = WORKSPACE / "rollouts"
SYSTEM = "Multiply with the tool, then end with '#### <answer>'."
_QUESTION = re.compile(r"(\d+) \* (\d+)")


def rows(n: int) -> list[DatasetRow]:
    out = []
    for i in range(n):
        a, b = 3 + i, 7 + 2 * i
        question = f"What is {a} * {b}?"
        out.append(
            DatasetRow(
                row_index=i,
                source_row_index=i,
                prompt=[
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": question},
                ],
                label=str(a * b),
                metadata={},
                system_prompt=SYSTEM,
                user_prompt=question,
            )
        )
    return out


def multiply_policy(req: FakeRequest) -> ScriptItem:
    """Call the rollout's tool once, then answer '#### <product>' from its result."""
    match = _QUESTION.search(req.last_user_text)
    assert match is not None, req.last_user_text
    if not req.new_tool_results:
        name = req.tools[0]["function"]["name"]
        return tool_call(name, a=int(match[1]), b=int(match[2]))
    product = float(req.new_tool_results[-1])
    return text(f"The product is {product:g}.\n#### {product:g}")
