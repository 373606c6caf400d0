"""The {{name}} rollout: a Strands calculator agent with tools, trained through OsmosisStrandsAgent.

``osmosis eval run configs/eval/{{name}}.toml`` evaluates it; ``osmosis train submit
configs/training/{{name}}.toml`` trains on it. osmosis finds the one ``AgentWorkflow`` and the
one ``Grader`` defined in this file.

Coming from plain Strands? Two lines change: ``Agent`` becomes ``OsmosisStrandsAgent`` and the
model becomes ``OsmosisRolloutModel()`` (osmosis resolves it to the policy being evaluated or
trained; rollout code never names a model).
"""

from __future__ import annotations

import math
import re
from typing import Any

from strands import tool
from strands.hooks import BeforeModelCallEvent
from strands.types.exceptions import MaxTokensReachedException

from osmosis_ai.rollout import AgentWorkflow, AgentWorkflowContext, Grader, GraderContext
from osmosis_integrations import OsmosisRolloutModel, OsmosisStrandsAgent

SYSTEM_PROMPT = (
    "You are a calculator. Use the tools add, subtract, multiply and divide to compute the "
    "answer, then reply with only the final number, for example: 42"
)
MAX_MODEL_CALLS = 6
"""A rollout that keeps calling tools is stopped here and graded as it stands."""


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tool
def subtract(a: float, b: float) -> float:
    """Subtract b from a.

    Args:
        a: the number to subtract from.
        b: the number to subtract.
    """
    return a - b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: the dividend.
        b: the divisor (not zero).
    """
    if b == 0:
        raise ValueError("cannot divide by zero")
    return a / b


class CalculatorWorkflow(AgentWorkflow):
    """One Strands agent per rollout; its conversation becomes the sample (returned as None)."""

    async def run(self, ctx: AgentWorkflowContext) -> None:
        system = next((m["content"] for m in ctx.prompt if m.get("role") == "system"), None)
        question = next(m["content"] for m in reversed(ctx.prompt) if m.get("role") == "user")
        agent = OsmosisStrandsAgent(
            model=OsmosisRolloutModel(),
            tools=[add, subtract, multiply, divide],
            system_prompt=system or SYSTEM_PROMPT,
            callback_handler=None,
        )
        agent.add_hook(_model_call_limit(MAX_MODEL_CALLS), BeforeModelCallEvent)
        try:
            await agent.invoke_async(question)
        except MaxTokensReachedException:
            # The reply hit max_tokens. Strands keeps the partial message, so the sample is
            # still graded (a cut-off ramble rarely holds a clean answer, so it scores low);
            # counting it as a failure would hide exactly the behaviour training should fix.
            pass


def _model_call_limit(limit: int) -> Any:
    """A Strands hook that ends the agent's turn instead of making model call ``limit + 1``."""
    calls = 0

    def before_model_call(event: BeforeModelCallEvent) -> None:
        nonlocal calls
        calls += 1
        if calls > limit:
            # Strands ends the turn with this text as the final answer (no digits: no credit).
            event.cancel = "stopped: too many model calls"

    return before_model_call


class CalculatorGrader(Grader):
    """Scores each sample's final answer against the row's ``ground_truth`` (see score_answer)."""

    async def grade(self, ctx: GraderContext) -> None:
        if ctx.label is None:
            raise ValueError("this grader needs a ground_truth column in the dataset")
        for sample_id, sample in ctx.samples.items():
            ctx.set_sample_reward(sample_id, score_answer(final_text(sample.messages), ctx.label))


# --- grading helpers (pure functions; easy to unit-test) ------------------------------------

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
EXACT, EXTRA_TEXT, CLOSE = 1.0, 0.5, 0.2


def score_answer(text: str, label: str) -> float:
    """Reward for one reply; deterministic, with honest partial credit.

    - 1.0: the reply is exactly the right number (spaces, a trailing period, or ``**``/``$``/
      backticks around it are allowed).
    - 0.5: the last number in the reply is right, but the reply has other text around it.
    - 0.2: the last number is wrong but within 1% of the right one (a rounding slip).
    - 0.0: no number at all, or a wrong one.
    """
    expected = _to_number(label)
    if expected is None:
        raise ValueError(f"ground_truth {label!r} is not a number")
    bare = _to_number(text.strip().strip("*$` ").rstrip(".").strip())
    if bare is not None and math.isclose(bare, expected, rel_tol=1e-9, abs_tol=1e-9):
        return EXACT
    numbers = _NUMBER_RE.findall(text)
    last = _to_number(numbers[-1]) if numbers else None
    if last is None:
        return 0.0
    if math.isclose(last, expected, rel_tol=1e-9, abs_tol=1e-9):
        return EXTRA_TEXT
    if abs(last - expected) <= 0.01 * max(abs(expected), 1.0):
        return CLOSE
    return 0.0


def final_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last assistant message (chat dicts, Strands blocks or Responses items)."""
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        return ""
    return ""


def _to_number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None
